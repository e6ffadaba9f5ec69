"""GEMM at small sizes with split-K (``examples/split_k_gemm.py``): bf16 M = N = K, each program
adds its K slice's partial product into a zeroed float32 C with ``tj.atomic_add``, against
cuBLAS (bf16 out) and the example GEMM's best config (``bench_matmul.CONFIGS``) in the same run.
The split-K time includes zeroing C (one memset) and writes float32, so it moves more bytes;
with ``--shapes MxNxK,...`` (skinny GEMMs) it also includes the cast of C to bfloat16, the
dtype cuBLAS returns.

    python3 benchmarks/bench_split_k.py [--sizes 512,1024,2048] [--shapes 16x8192x8192] [--reps 50]
"""
from __future__ import annotations

import argparse
import sys

import common
import tilejit as tj

# BM, BN, BK, num_warps, split
# the example GEMM's small-tile configs (BM, BN, BK, STAGES, num_warps), the best of its list at 512³ and 1024³
PLAIN = [(16, 64, 64, 4, 4), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 8), (64, 128, 128, 4, 4),
         (64, 128, 64, 7, 4)]
CONFIGS = [(64, 64, 64, 4, 2), (64, 64, 64, 4, 4), (64, 128, 64, 4, 2), (64, 128, 64, 4, 4),
           (128, 128, 64, 8, 2), (128, 128, 64, 8, 4), (64, 64, 32, 4, 8)]
# skinny shapes (--shapes): few output blocks, long K
SKINNY = [(64, 128, 64, 4, 2), (64, 128, 64, 4, 4), (64, 64, 64, 4, 2), (64, 64, 64, 4, 4), (64, 128, 128, 4, 2),
          (64, 256, 64, 4, 2), (128, 128, 64, 8, 2), (128, 256, 64, 8, 2)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="512,1024,2048")
    parser.add_argument("--shapes", default="", help="MxNxK,...: skinny shapes instead of --sizes (C cast to bf16)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--plain-configs", default="small", choices=["small", "all"],
                        help="the example GEMM's configs to compare with: the small-tile ones, or all")
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    import bench_matmul
    kernel = common.load_example("split_k_gemm").split_k_kernel
    out = []
    skinny = bool(args.shapes)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if skinny else \
        [(n, n, n) for n in (int(v) for v in args.sizes.split(","))]
    for m, n, k in shapes:
        a = common.random_tensor(torch, (m, k), torch.bfloat16, seed=1)
        b = common.random_tensor(torch, (k, n), torch.bfloat16, seed=2)
        c = torch.empty((m, n), device="cuda", dtype=torch.float32)
        out16 = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        flops = 2.0 * m * n * k

        def launcher(cfg):
            BM, BN, BK, nw, split = cfg
            k_slice = tj.cdiv(tj.cdiv(k, split), BK) * BK
            grid = (tj.cdiv(m, BM), tj.cdiv(n, BN), tj.cdiv(k, k_slice))

            def run():
                c.zero_()
                kernel[grid](a, b, c, BM=BM, BN=BN, BK=BK, K_SLICE=k_slice, num_warps=nw)
                if skinny:
                    out16.copy_(c)
            return run
        timed = common.sweep(torch, SKINNY if skinny else CONFIGS, launcher, c, ref, 1e-2, args.reps)
        plain = bench_matmul.bench_shape(torch, (m, n, k), "bfloat16", PLAIN if args.plain_configs == "small"
                                         else bench_matmul.CONFIGS, args.reps)[0]
        if timed:
            cfg, (t, err) = min(timed.items(), key=lambda item: item[1][0].median_ms)
            split = flops / t.median_ms / 1e9
            out.append({"size": f"{m}x{n}x{k}", "config": "x".join(map(str, cfg)), "split": split, "plain": plain.get("tilejit"),
                        "plain_config": plain.get("config"), "cublas": plain["cublas"],
                        "vs_cublas": split / plain["cublas"]})
    common.print_table(out, [("size", "MxNxK", "s"), ("config", "split-K BMxBNxBKxwarpsxsplit", "s"),
                             ("split", "split-K TF/s", ".0f"), ("plain_config", "best plain", "s"),
                             ("plain", "plain TF/s", ".0f"), ("cublas", "cuBLAS TF/s", ".0f"),
                             ("vs_cublas", "split/cuBLAS", ".3f")],
                       title=f"split-K GEMM bf16 on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
