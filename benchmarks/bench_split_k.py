"""GEMM at small sizes with split-K (``examples/split_k_gemm.py``): bf16 M = N = K, each program
adds its K slice's partial product into a zeroed float32 C with ``tj.atomic_add``, against
cuBLAS (bf16 out) and the example GEMM's best config (``bench_matmul.CONFIGS``) in the same run.
The split-K time includes zeroing C (one memset) and writes float32, so it moves more bytes.

    python3 benchmarks/bench_split_k.py [--sizes 512,1024,2048] [--reps 50]
"""
from __future__ import annotations

import argparse
import sys

import common
import tilejit as tj

# BM, BN, BK, num_warps, split
# the example GEMM's small-tile configs (BM, BN, BK, STAGES, num_warps), the best of its list at 512³ and 1024³
PLAIN = [(16, 64, 64, 4, 4), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 8)]
CONFIGS = [(64, 64, 64, 4, 2), (64, 64, 64, 4, 4), (64, 128, 64, 4, 2), (64, 128, 64, 4, 4),
           (128, 128, 64, 8, 2), (128, 128, 64, 8, 4), (64, 64, 32, 4, 8)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="512,1024,2048")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--plain-configs", default="small", choices=["small", "all"],
                        help="the example GEMM's configs to compare with: the small-tile ones, or all")
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    import bench_matmul
    kernel = common.load_example("split_k_gemm").split_k_kernel
    out = []
    for n in (int(v) for v in args.sizes.split(",")):
        a = common.random_tensor(torch, (n, n), torch.bfloat16, seed=1)
        b = common.random_tensor(torch, (n, n), torch.bfloat16, seed=2)
        c = torch.empty((n, n), device="cuda", dtype=torch.float32)
        ref = a.float() @ b.float()
        flops = 2.0 * n ** 3

        def launcher(cfg):
            BM, BN, BK, nw, split = cfg
            k_slice = tj.cdiv(tj.cdiv(n, split), BK) * BK
            grid = (tj.cdiv(n, BM), tj.cdiv(n, BN), tj.cdiv(n, k_slice))

            def run():
                c.zero_()
                kernel[grid](a, b, c, BM=BM, BN=BN, BK=BK, K_SLICE=k_slice, num_warps=nw)
            return run
        timed = common.sweep(torch, CONFIGS, launcher, c, ref, 1e-2, args.reps)
        plain = bench_matmul.bench_shape(torch, (n, n, n), "bfloat16", PLAIN if args.plain_configs == "small"
                                         else bench_matmul.CONFIGS, args.reps)[0]
        if timed:
            cfg, (t, err) = min(timed.items(), key=lambda item: item[1][0].median_ms)
            split = flops / t.median_ms / 1e9
            out.append({"size": n, "config": "x".join(map(str, cfg)), "split": split, "plain": plain.get("tilejit"),
                        "plain_config": plain.get("config"), "cublas": plain["cublas"],
                        "vs_cublas": split / plain["cublas"]})
    common.print_table(out, [("size", "M=N=K", "d"), ("config", "split-K BMxBNxBKxwarpsxsplit", "s"),
                             ("split", "split-K TF/s", ".0f"), ("plain_config", "best plain", "s"),
                             ("plain", "plain TF/s", ".0f"), ("cublas", "cuBLAS TF/s", ".0f"),
                             ("vs_cublas", "split/cuBLAS", ".3f")],
                       title=f"split-K GEMM bf16 on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
