"""Launch one example kernel a few times on the GPU so a profiler can look at it:

    ncu --clock-control none -k regex:attention -c 1 --section SpeedOfLight \\
        --section WarpStateStats --section ComputeWorkloadAnalysis python3 benchmarks/profile_one.py attention
    python3 benchmarks/profile_one.py matmul --config 256x128x64x3x8

``attention``: B4 H32 S<size> D128 bf16 (``--shape BxHxSxD``, ``--causal``), config BMxBNxwarps (default 128x64x4);
``softmax``, ``layernorm``, ``rmsnorm``: the examples over 2**26 values in rows of ``--columns``
(``--dtype``, default bfloat16), as ``bench_sweep`` runs them (no num_warps unless ``--num-warps``;
``--triton``: Triton's tutorial kernel from ``triton_kernels.py``);
``w4a16``: ``examples/w4a16_gemm.py`` at M ``--m``, N = K = <size>, group 128, split ``--split``,
config BMxBNxBKxwarps (default 16x128x128x4);
``matmul``: <size>³ bf16, config BMxBNxBKxSTAGESxwarps (default 256x128x64x3x8); ``--size``
defaults to 4096 (use a small one under ``compute-sanitizer``).  The first launch
compiles; three more follow, so ``-c 1`` after a warm-up skip (``-s 1``) sees a steady one.
"""
from __future__ import annotations

import argparse
import os

import common
import tilejit as tj


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", choices=["attention", "matmul", "softmax", "layernorm", "rmsnorm", "w4a16",
                                                 "fp8_blockwise"])
    parser.add_argument("--m", type=int, default=None, help="w4a16 (default 1) and matmul (default --size): M "
                                                             "(N = K = --size)")
    parser.add_argument("--cublas", action="store_true", help="matmul: torch.matmul (cuBLAS) instead")
    parser.add_argument("--split", type=int, default=8, help="w4a16: K slices")
    parser.add_argument("--columns", type=int, default=1024)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--config", default=None)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--shape", default=None, help="attention: BxHxSxD (default 4x32x<size>x128)")
    parser.add_argument("--size", type=int, default=4096, help="GEMM M = N = K, attention seq")
    parser.add_argument("--triton", action="store_true", help="row kernels: Triton's tutorial kernel instead")
    parser.add_argument("--num-warps", type=int, default=None, help="row kernels: the warps (default: the compiler's)")
    args = parser.parse_args()
    torch = common.cuda_torch()
    if torch is None:
        print("profile_one: needs torch with a CUDA device")
        return 2
    if args.kernel == "attention":
        BM, BN, nw = (int(x) for x in (args.config or "128x64x4").split("x"))
        batch, heads, seq, dim = (int(x) for x in (args.shape or f"4x32x{args.size}x128").split("x"))
        q, k, v = (common.random_tensor(torch, (batch, heads, seq, dim), torch.bfloat16, seed=s) for s in (1, 2, 3))
        o = torch.empty_like(q)
        kernel = common.load_example("attention").attention_kernel

        def launch():
            kernel[(tj.cdiv(seq, BM), batch * heads)](q, k, v, o, dim ** -0.5, BM=BM, BN=BN, BD=dim,
                                                      CAUSAL=args.causal, num_warps=nw)
    elif args.kernel in ("softmax", "layernorm", "rmsnorm"):
        C, dt = args.columns, getattr(torch, args.dtype)
        x = common.random_tensor(torch, (2**26 // C, C), dt, seed=1)
        w, b, y = (common.random_tensor(torch, (C,), dt, seed=2), common.random_tensor(torch, (C,), dt, seed=3),
                   torch.empty_like(x))
        module = common.load_example(args.kernel)
        kernel = getattr(module, f"{args.kernel}_kernel")
        extra = {"softmax": (), "layernorm": (w, b), "rmsnorm": (w,)}[args.kernel]
        outputs = (y,) + ((1e-5,) if args.kernel != "softmax" else ())

        def launch():
            kernel[(x.shape[0],)](x, *extra, *outputs, BLOCK=tj.next_power_of_2(C), num_warps=args.num_warps)
        if args.triton:
            import triton_kernels
            launch = {"softmax": lambda: triton_kernels.softmax(x, y),
                      "layernorm": lambda: triton_kernels.layernorm(x, w, b, y, 1e-5),
                      "rmsnorm": lambda: triton_kernels.rmsnorm(x, w, y, 1e-5)}[args.kernel]
    elif args.kernel == "w4a16":
        import numpy as np
        BM, BN, BK, nw = (int(x) for x in (args.config or "16x128x128x4").split("x"))
        ex, size = common.load_example("w4a16_gemm"), args.size
        packed, scales, zeros = ex.quantize(np.random.default_rng(0).standard_normal((size, size)).astype(np.float32), 128)
        m = args.m or 1
        a = common.random_tensor(torch, (m, size), torch.bfloat16, seed=1)
        tiled = os.environ.get("W4_TILED", "1") == "1"       # (bench_quant's default: tile_weights)
        if tiled:
            packed = ex.tile_weights(packed, BK, BN)
        w, s, z = (torch.from_numpy(x.view(np.uint16) if x.dtype != np.uint8 else x).cuda() for x in (packed, scales, zeros))
        s, z = s.view(torch.bfloat16), z.view(torch.bfloat16)
        c = torch.empty((m, size), device="cuda", dtype=torch.bfloat16)
        ks = ex.k_slice(size, args.split, BK)
        grid = (tj.cdiv(m, BM), tj.cdiv(size, BN), tj.cdiv(size, ks))
        part, count = (torch.from_numpy(x).cuda() for x in ex.workspace(m, size, grid[2], BM, BN))

        def launch():
            ex.w4a16_matmul_kernel[grid](a, w, s, z, c, part, count, BM=BM, BN=BN, BK=BK, GROUP=128, K_SLICE=ks,
                                         num_warps=nw, TILED=tiled)
    elif args.kernel == "fp8_blockwise":          # weights stored (N, K); config BMxBNxBKxwarps
        BM, BN, BK, nw = (int(x) for x in (args.config or "128x128x128x8").split("x"))
        ex, size = common.load_example("fp8_blockwise_gemm"), args.size
        _, (a, sa_d, b, sb_d) = common.fp8_blockwise_inputs(torch, size)
        c = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)

        def launch():
            ex.fp8_blockwise_matmul_kernel[(tj.cdiv(size, BM), tj.cdiv(size, BN))](
                a, sa_d, b, sb_d, c, BM=BM, BN=BN, BK=BK, B_NK=True, num_warps=nw)
    else:
        BM, BN, BK, S, nw = (int(x) for x in (args.config or "256x128x64x3x8").split("x"))
        size, m = args.size, args.m or args.size
        a = common.random_tensor(torch, (m, size), torch.bfloat16, seed=1)
        b = common.random_tensor(torch, (size, size), torch.bfloat16, seed=2)
        c = torch.empty((m, size), device="cuda", dtype=torch.bfloat16)
        kernel = common.load_example("matmul").matmul_kernel.kernel

        def launch():
            kernel[(tj.cdiv(m, BM), tj.cdiv(size, BN))](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=S, num_warps=nw)
        if args.cublas:
            launch = lambda: torch.matmul(a, b, out=c)      # noqa: E731
    for _ in range(4):
        launch()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
