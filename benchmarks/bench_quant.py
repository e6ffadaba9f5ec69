"""Quantized GEMMs on torch CUDA tensors, each against its references in the same run:

- W4A16 (``examples/w4a16_gemm.py``, uint4 weights, group 128 scales and zero points) at
  M = 1, 16, 64 and N x K = 8192 x 8192, 28672 x 8192: the packed weights' read bandwidth as a
  ratio to copy, and the time against bf16 cuBLAS (``torch.matmul`` on the dequantised weights);
- fp8 blockwise (``examples/fp8_blockwise_gemm.py``, 1x128 / 128x128 scales) at 4096³ and 8192³:
  TFLOP/s against ``torch._scaled_mm`` with rowwise scales (torch rejects blockwise ones) and
  bf16 cuBLAS, and the error of each path (the data quantised blockwise, and rowwise for
  ``_scaled_mm``) against the float64 product of the unquantised data.

    python3 benchmarks/bench_quant.py [--w4 1,16,64] [--fp8 4096,8192] [--reps 30]

Every tilejit config is checked against the float64-exact reference (NaN-poisoned output) before
it is timed; the best of a few configs is reported, with its config.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import common
import tilejit as tj

# (BM, BN, BK, warps, split): split > 1 cuts K into slices (``run(split=)``: each slice's partial
# product in its own layer, the slice that finishes a block last sums them and writes bfloat16)
W4_CONFIGS = [(16, 64, 128, 4, 1), (16, 128, 128, 4, 1), (16, 64, 64, 4, 1), (64, 64, 128, 4, 1), (64, 128, 64, 4, 1),
              (16, 64, 128, 4, 4), (16, 64, 128, 4, 5), (16, 64, 128, 4, 8), (16, 128, 128, 4, 8), (16, 64, 128, 4, 16),
              (64, 64, 128, 4, 4), (64, 64, 128, 4, 8), (64, 128, 128, 4, 2), (64, 128, 128, 4, 4), (64, 64, 64, 4, 4),
              (64, 64, 64, 4, 8)]
FP8_CONFIGS = [(64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 128, 4)]
# the weights stored (N, K), as DeepGEMM keeps them (``B_NK``): float8 wgmma, TMA rings
FP8_NK_CONFIGS = [(128, 128, 128, 8, 0), (64, 128, 128, 4, 0), (128, 128, 64, 8, 0), (128, 128, 128, 8, 4),
                  (64, 128, 128, 4, 4), (128, 128, 128, 8, 3)]          # ..., stages (0: the compiler's)


def quantize_rowwise(x, axis: int, e4m3_max: float = 448.0):
    """``x`` as float8 e4m3 values with one float32 scale per row (``axis=1``: (M, 1) scales) or
    per column (``axis=0``: (1, N)), ``x ≈ x8 * scale``: what ``torch._scaled_mm``'s rowwise mode
    takes, for comparing its error with the blockwise path's on the same data."""
    scale = np.maximum(np.abs(x).max(axis=axis, keepdims=True), 1e-12) / e4m3_max
    return (x / scale).astype(tj.float8e4m3.np), scale.astype(np.float32)


def relative_error64(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (NumPy arrays; inf where out is not finite)."""
    out = np.asarray(out, np.float64)
    return float("inf") if not np.isfinite(out).all() else float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def bench_w4(torch, m: int, n: int, k: int, reps: int, copy_gbps: float, configs=None) -> None:
    ex = common.load_example("w4a16_gemm")
    rng = np.random.default_rng(m + n)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), 128)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    dev = {name: torch.from_numpy(x.view(np.uint16) if x.dtype == tj.bfloat16.np else x).cuda()
           for name, x in (("w", packed), ("s", scales), ("z", zeros))}
    s, z = (dev[x].view(torch.bfloat16) for x in "sz")
    w_bf16 = torch.from_numpy(ex.dequantize(packed, scales, zeros, 128).astype(np.float32)).cuda().to(torch.bfloat16)
    exact = lambda: a.double() @ w_bf16.double()       # noqa: E731 (W rounded to bf16: within the 2e-2)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    best = None
    bf16_math = not os.environ.get("W4_F32_MATH")     # the example's float32 spelling of the dequantisation instead
    fold = os.environ.get("W4_FOLD_ZEROS") == "1"     # the example's zero points folded into the product (BM < 64)
    # the weights reordered once into contiguous BK x BN tiles (``tile_weights``), as torch's int4
    # kernel takes its own packed layout; W4_TILED=0: the row-major packing
    tiled = os.environ.get("W4_TILED", "1") == "1"
    tiles = {}
    for bm, bn, bk, warps, split, *st in configs or W4_CONFIGS:
        stages = st[0] if st else None              # the ring's slots (None: the compiler's)
        grid = (tj.cdiv(m, bm), tj.cdiv(n, bn))
        ks = ex.k_slice(k, split, bk)
        spaces = {split: tuple(torch.from_numpy(x).cuda() for x in ex.workspace(m, n, tj.cdiv(k, ks), bm, bn))}
        if tiled and (bk, bn) not in tiles:
            tiles[bk, bn] = torch.from_numpy(ex.tile_weights(packed, bk, bn)).cuda()
        w = tiles[bk, bn] if tiled else dev["w"]

        def launch(bm=bm, bn=bn, bk=bk, warps=warps, grid=grid, split=split, ks=ks, stages=stages, w=w):
            if split == 1:
                ex.w4a16_matmul_kernel[grid](a, w, s, z, c, None, None, BM=bm, BN=bn, BK=bk, GROUP=128,
                                             num_warps=warps, BF16_MATH=bf16_math, FOLD_ZEROS=fold, TILED=tiled,
                                             num_stages=stages)
                return
            ex.w4a16_matmul_kernel[grid + (tj.cdiv(k, ks),)](a, w, s, z, c, *spaces[split], BM=bm, BN=bn,
                                                              BK=bk, GROUP=128, K_SLICE=ks, num_warps=warps,
                                                              BF16_MATH=bf16_math, FOLD_ZEROS=fold, TILED=tiled,
                                                              num_stages=stages)
        name = f"{bm}x{bn}x{bk}x{warps}" + (f" split {split}" if split > 1 else "") + (f" {stages} stages" if stages else "") \
            + (", tiled weights" if tiled else "")
        try:
            common.checked(torch, launch, c, exact, 2e-2, f"w4a16 {m}x{n}x{k} {name}")
        except Exception as e:          # a config that does not compile or fit: report, go on
            print(f"  w4a16 config {name}: {type(e).__name__}: {str(e)[:120]}")
            continue
        ms = common.time_cuda(launch, reps=reps).median_ms
        if os.environ.get("BENCH_EACH"):
            print(f"  w4a16 {m}x{n}x{k} {name}: {ms * 1e3:.1f} us", file=sys.stderr)
        if best is None or ms < best[0]:
            best = (ms, name)
    cublas = common.time_cuda(lambda: torch.matmul(a, w_bf16), reps=reps).median_ms
    if best is None:
        print(f"w4a16 M={m} N={n} K={k}: no config ran")
        return
    weight_gbps = packed.nbytes / (best[0] * 1e-3) / 1e9
    print(f"w4a16 M={m:<3d} N={n} K={k}: {best[0] * 1e3:8.1f} us ({best[1]}), packed weights at "
          f"{weight_gbps / copy_gbps:.2f}x copy; bf16 cuBLAS {cublas * 1e3:8.1f} us -> {cublas / best[0]:.2f}x")


def bench_fp8(torch, size: int, reps: int, configs=None) -> None:
    """``configs``: ((BM, BN, BK, warps[, stages]), weights stored (N, K)) pairs (default: FP8_CONFIGS
    and FP8_NK_CONFIGS)."""
    ex = common.load_example("fp8_blockwise_gemm")
    rng = np.random.default_rng(size)
    x, w = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    a8, sa = ex.quantize_rows(x)
    b8, sb = ex.quantize_blocks(w)
    to_dev = lambda x: torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn)  # noqa: E731
    a, b = to_dev(a8), to_dev(b8)
    sa_d, sb_d = torch.from_numpy(sa).cuda(), torch.from_numpy(sb).cuda()
    b_nk, sb_nk = to_dev(np.ascontiguousarray(b8.T)), torch.from_numpy(np.ascontiguousarray(sb.T)).cuda()
    exact_cpu = None

    def exact():
        nonlocal exact_cpu
        if exact_cpu is None:
            exact_cpu = torch.from_numpy(ex.reference(a8, sa, b8, sb)).cuda()
        return exact_cpu
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    flop = 2 * size ** 3
    best = None
    configs = configs or [(c_, False) for c_ in FP8_CONFIGS] + [(c_, True) for c_ in FP8_NK_CONFIGS]
    for (bm, bn, bk, warps, *st), nk in configs:
        grid = (tj.cdiv(size, bm), tj.cdiv(size, bn))
        stages = st[0] if st and st[0] else None
        name = f"{bm}x{bn}x{bk}x{warps}" + (f" {stages} stages" if stages else "") + (" (N, K) weights" if nk else "")

        def launch(bm=bm, bn=bn, bk=bk, warps=warps, grid=grid, nk=nk, stages=stages):
            ex.fp8_blockwise_matmul_kernel[grid](a, sa_d, b_nk if nk else b, sb_nk if nk else sb_d, c, BM=bm, BN=bn,
                                                 BK=bk, B_NK=nk, num_warps=warps, num_stages=stages)
        try:
            common.checked(torch, launch, c, exact, 2e-2, f"fp8 blockwise {size}³ {name}")
        except Exception as e:
            print(f"  fp8 config {name}: {type(e).__name__}: {str(e)[:120]}")
            continue
        ms = common.time_cuda(launch, reps=reps).median_ms
        if os.environ.get("BENCH_EACH"):
            print(f"  fp8 blockwise {size}³ {name}: {flop / (ms * 1e-3) / 1e12:.0f} TFLOP/s", file=sys.stderr)
        if best is None or ms < best[0]:
            best = (ms, name, c.float().cpu().numpy())
    refs = {}
    try:                                   # rowwise scales: what torch's fp8 GEMM takes
        row_a = torch.ones(size, 1, device="cuda")
        row_b = torch.ones(1, size, device="cuda")
        bt = b.t().contiguous().t()        # column-major B, as _scaled_mm wants it
        refs["torch._scaled_mm rowwise"] = common.time_cuda(
            lambda: torch._scaled_mm(a, bt, scale_a=row_a, scale_b=row_b, out_dtype=torch.bfloat16), reps=reps).median_ms
    except Exception as e:
        print(f"  torch._scaled_mm: {type(e).__name__}: {str(e)[:120]}")
    accuracy = ""
    if best is not None:                   # both paths' error against the unquantised product
        try:
            xr, sxr = quantize_rowwise(x, 1)
            wr, swr = quantize_rowwise(w, 0)
            wr_d = to_dev(np.ascontiguousarray(wr.T)).t()          # column-major, as _scaled_mm wants it
            rowwise = torch._scaled_mm(to_dev(xr), wr_d, scale_a=torch.from_numpy(sxr).cuda(),
                                       scale_b=torch.from_numpy(swr).cuda(), out_dtype=torch.bfloat16)
            exact64 = x.astype(np.float64) @ w.astype(np.float64)
            ours, theirs = relative_error64(best[2], exact64), relative_error64(rowwise.float().cpu().numpy(), exact64)
            accuracy = f"; error vs the float64 product of the unquantised data: blockwise {ours:.2e}, " \
                       f"rowwise _scaled_mm {theirs:.2e} ({ours / theirs:.2f}x)"
        except Exception as e:
            accuracy = f"; accuracy vs rowwise: {type(e).__name__}: {str(e)[:120]}"
    abf, bbf = a.to(torch.bfloat16), b.to(torch.bfloat16)
    refs["bf16 cuBLAS"] = common.time_cuda(lambda: torch.matmul(abf, bbf), reps=reps).median_ms
    if best is None:
        print(f"fp8 blockwise {size}³: no config ran")
        return
    tflops = flop / (best[0] * 1e-3) / 1e12
    line = ", ".join(f"{name} {flop / (ms * 1e-3) / 1e12:.0f} TFLOP/s -> {ms / best[0]:.2f}x" for name, ms in refs.items())
    print(f"fp8 blockwise {size}³: {tflops:.0f} TFLOP/s ({best[1]}); {line}{accuracy}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--w4", default="1,16,64", help="W4A16 batch sizes M")
    parser.add_argument("--fp8", default="4096,8192", help="fp8 blockwise sizes (M = N = K)")
    parser.add_argument("--w4-configs", default="", help="BMxBNxBKxwarpsxsplit[xstages],... (default: W4_CONFIGS)")
    parser.add_argument("--fp8-configs", default="",
                        help="BMxBNxBKxwarps[xstages][:nk],... (:nk: weights stored (N, K); default: FP8_CONFIGS "
                             "and FP8_NK_CONFIGS)")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_quant: needs torch with a CUDA device")
        return 2
    copy_gbps = common.copy_gbps(torch, args.reps)
    print(f"{common.gpu_name()}: copy {copy_gbps:.0f} GB/s")
    for m in (int(x) for x in args.w4.split(",") if x):
        for n, k in ((8192, 8192), (28672, 8192)):
            bench_w4(torch, m, n, k, args.reps, copy_gbps,
                     [tuple(int(v) for v in c.split("x")) for c in args.w4_configs.split(",") if c])
    for size in (int(x) for x in args.fp8.split(",") if x):
        bench_fp8(torch, size, args.reps, [(tuple(int(v) for v in c.partition(":")[0].split("x")), c.endswith(":nk"))
                                           for c in args.fp8_configs.split(",") if c])
    return 0


if __name__ == "__main__":
    sys.exit(main())
