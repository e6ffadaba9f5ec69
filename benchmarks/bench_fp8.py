"""Per-tensor scaled float8 e4m3 GEMM with K-major weights (``examples/fp8_matmul.py``,
``run_linear``: float8 ``wgmma`` on sm_90a) against ``torch._scaled_mm`` (cuBLASLt) in the same
run. Target (#14): ≥ 1.0× ``torch._scaled_mm`` at 4096³ and 8192³.

    python3 benchmarks/bench_fp8.py [--shapes 4096x4096x4096,8192x8192x8192] [--configs 128x256x128x8] [--reps 20]

Each config (BM x BN x BK x num_warps) is checked against the float32 product of the same float8
inputs before it is timed; output bfloat16, as ``_scaled_mm`` writes it."""
from __future__ import annotations

import argparse

import common
import tilejit as tj

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
CONFIGS = [(128, 256, 128, 8), (128, 128, 128, 8), (64, 256, 128, 4), (128, 256, 64, 8)]


def bench_shape(torch, shape, configs, reps):
    M, N, K = shape
    a = (common.random_tensor(torch, (M, K), torch.float32, seed=1)).to(torch.float8_e4m3fn)
    w = (common.random_tensor(torch, (N, K), torch.float32, seed=2)).to(torch.float8_e4m3fn)
    sa, sw = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    ref = (a.float() @ w.float().T) * 0.125
    kernel = common.load_example("fp8_matmul").fp8_matmul_kernel

    def launcher(cfg):
        BM, BN, BK, nw = cfg
        grid = (tj.cdiv(M, BM), tj.cdiv(N, BN))
        return lambda: kernel[grid](a, w, c, 0.5, 0.25, BM=BM, BN=BN, BK=BK, B_NK=True, num_warps=nw)
    results = common.sweep(torch, configs, launcher, c, ref, 1e-2, reps)
    scaled = common.time_cuda(lambda: torch._scaled_mm(a, w.T, scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16),
                              reps=reps)
    flops = 2.0 * M * N * K
    row = {"shape": f"{M}x{N}x{K}", "scaled_mm": flops / scaled.median_ms / 1e9}
    if results:
        cfg, (t, err) = min(results.items(), key=lambda item: item[1][0].median_ms)
        row.update(config="x".join(map(str, cfg)), tilejit=flops / t.median_ms / 1e9, err=err)
        row["ratio"] = row["tilejit"] / row["scaled_mm"]
        common.record("fp8_gemm", row["shape"], "float8e4m3", row["tilejit"], "TFLOP/s", "torch._scaled_mm",
                      row["scaled_mm"], row["ratio"], config=row["config"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--configs", default=",".join("x".join(map(str, c)) for c in CONFIGS))
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_fp8: skipped (needs torch with a CUDA GPU)")
        return 0
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    rows = [bench_shape(torch, s, configs, args.reps) for s in shapes]
    common.print_table(rows, [("shape", "shape", "s"), ("config", "best config", "s"), ("tilejit", "tilejit TF/s", ".0f"),
                              ("scaled_mm", "_scaled_mm TF/s", ".0f"), ("ratio", "tj/_scaled_mm", ".3f"),
                              ("err", "rel err", ".1e")], title=f"fp8 e4m3 GEMM on {common.gpu_name()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
