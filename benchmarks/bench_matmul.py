"""GEMM (``examples/matmul.py``) on torch CUDA tensors against cuBLAS (``torch.matmul``) and a
Triton tutorial-style matmul, measured in the same run. Target: bf16 at 4096³ and 8192³
≥ 0.70× cuBLAS; the legacy mma.sync ceiling on the H200 is 631 TFLOP/s (measured).

    python3 benchmarks/bench_matmul.py [--shapes 4096x4096x4096,...] [--dtypes bfloat16,float16]
                                       [--configs 128x128x32x3x8,...] [--reps 30]

Each tilejit config (BM x BN x BK x STAGES x num_warps) is checked against torch.matmul in float32
on fresh random inputs before it is timed; the best config (what tj.autotune picks from the same
list) is reported beside the example's default config (its first, used untuned). Output dtype = input dtype,
as cuBLAS writes it.
"""
from __future__ import annotations

import argparse
import os
import sys

import common
import tilejit as tj

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 4096, 14336), (16, 8192, 8192)]
CONFIGS = [(128, 128, 32, 3, 8), (128, 128, 64, 3, 8), (128, 256, 32, 3, 8), (256, 128, 32, 3, 8),
           (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 256, 64, 4, 8), (64, 256, 64, 4, 4),
           (128, 64, 32, 4, 4), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 8), (16, 64, 64, 4, 4),
           (64, 128, 64, 7, 4), (64, 128, 128, 4, 4), (64, 128, 64, 6, 4), (64, 64, 64, 6, 4)]
MMA_SYNC_CEILING = 631.0          # TFLOP/s, legacy mma.sync m16n8k16 bf16 on the H200 (measured)


def triton_matmul(torch):
    """A Triton tutorial-style matmul with a small autotune list (the reference users pick)."""
    import triton
    import triton.language as tl
    configs = [triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_stages=3, num_warps=8),
               triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_stages=4, num_warps=4),
               triton.Config({"BM": 64, "BN": 128, "BK": 64}, num_stages=4, num_warps=4)]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
        pid = tl.program_id(0)
        grid_n = tl.cdiv(N, BN)
        group = 8 * grid_n
        first_m = (pid // group) * 8
        rows = min(tl.cdiv(M, BM) - first_m, 8)
        pm = first_m + (pid % group) % rows
        pn = (pid % group) // rows
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            ka = k * BK + rk
            x = tl.load(a + rm[:, None] * sam + ka[None, :] * sak, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
        kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    return run


def bench_shape(torch, shape, dtype_name, configs, reps):
    M, N, K = shape
    dt = getattr(torch, dtype_name)
    a = common.random_tensor(torch, (M, K), dt, seed=1)
    b = common.random_tensor(torch, (K, N), dt, seed=2)
    c = torch.empty((M, N), device="cuda", dtype=dt)
    ref = torch.matmul(a.float(), b.float())
    flops = 2.0 * M * N * K
    example = common.load_example("matmul")
    kernel = example.matmul_kernel.kernel
    first = example.CONFIGS[0]                    # what the example runs untuned (TILEJIT_AUTOTUNE=0)
    default = (first.constexprs["BM"], first.constexprs["BN"], first.constexprs["BK"],
               first.constexprs.get("STAGES", 3), first.num_warps)
    configs = list(configs) + ([default] if default not in configs else [])
    rows = []

    def tflops(ms):
        return flops / ms / 1e9
    cublas = common.time_cuda(lambda: torch.matmul(a, b, out=c), reps=reps)

    def launcher(cfg):
        BM, BN, BK, stages, nw = cfg
        grid = (tj.cdiv(M, BM), tj.cdiv(N, BN))
        return lambda: kernel[grid](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=nw)
    results = common.sweep(torch, configs, launcher, c, ref, 1e-2, reps)
    timed = {cfg: t.median_ms for cfg, (t, _) in results.items()}
    if os.environ.get("BENCH_EACH"):            # every config's figure, not only the best
        for cfg, ms in timed.items():
            print(f"  {M}x{N}x{K} {dtype_name} {'x'.join(map(str, cfg))}: {tflops(ms):.0f} TFLOP/s", file=sys.stderr)
    best = None
    if results:
        cfg, (t, err) = min(results.items(), key=lambda item: item[1][0].median_ms)
        best = ("x".join(map(str, cfg)), t, err)
    tri = None
    try:
        run_triton = triton_matmul(torch)
        run_triton(a, b, c)
        tri = common.time_cuda(lambda: run_triton(a, b, c), reps=reps)
    except Exception as e:                     # Triton missing or failing: report without it
        print(f"  triton: {type(e).__name__}: {e}", file=sys.stderr)
    row = {"shape": f"{M}x{N}x{K}", "dtype": dtype_name, "cublas": tflops(cublas.median_ms),
           "triton": tflops(tri.median_ms) if tri else float("nan")}
    if best:
        tj_tf = tflops(best[1].median_ms)
        row.update(config=best[0], tilejit=tj_tf, vs_cublas=tj_tf / row["cublas"],
                   vs_triton=tj_tf / row["triton"] if tri else float("nan"),
                   of_ceiling=tj_tf / MMA_SYNC_CEILING, err=best[2],
                   default=tflops(timed[default]) if default in timed else float("nan"))
        row["tuned_vs_default"] = tj_tf / row["default"]
        common.record("matmul", row["shape"], dtype_name, tj_tf, "TFLOP/s", "cuBLAS", row["cublas"],
                      row["vs_cublas"], triton=row["triton"], config=best[0])
    rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--configs", default=",".join("x".join(map(str, c)) for c in CONFIGS))
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_matmul: skipped (needs torch with a CUDA GPU)")
        return 0
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    rows = []
    for dtype_name in args.dtypes.split(","):
        for shape in shapes:
            rows += bench_shape(torch, shape, dtype_name, configs, args.reps)
    common.print_table(rows, [("shape", "shape", "s"), ("dtype", "dtype", "s"), ("config", "best config", "s"),
                              ("tilejit", "tilejit TF/s", ".0f"), ("cublas", "cuBLAS TF/s", ".0f"),
                              ("triton", "Triton TF/s", ".0f"), ("vs_cublas", "tj/cuBLAS", ".3f"),
                              ("vs_triton", "tj/Triton", ".3f"), ("of_ceiling", "of mma.sync ceiling", ".3f"),
                              ("default", "default cfg TF/s", ".0f"), ("tuned_vs_default", "best/default", ".2f"),
                              ("err", "rel err", ".1e")],
                       title=f"GEMM on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
