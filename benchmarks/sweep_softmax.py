"""Experiment: what limits bf16 softmax (one row per program reaches 0.56-0.67x copy)?  Sweeps,
in one run against the copy bandwidth: num_warps, the occupancy hint ptxas gets (CTAs per SM;
the compiler asks for 1024 threads per SM today), and a spelling with several rows per program.

    python3 benchmarks/sweep_softmax.py [--reps 50]

The hint is swapped by patching ``tilejit.passes.pipeline.occupancy_hint`` in this process, with
a fresh on-disk cache per variant, so nothing else is affected.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import common
import tilejit as tj
import tilejit.passes.pipeline as pipeline


@tj.kernel
def softmax_rows(x, y, R: tj.constexpr, BLOCK: tj.constexpr):
    row = tj.program_id(0) * R
    t = tj.load(x, (row, 0), (R, BLOCK), other=-tj.inf)
    t = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(y, (row, 0), t / tj.sum(t, axis=1, keepdims=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--hints", action="store_true", help="also sweep the occupancy hint")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    original = pipeline.occupancy_hint
    example = common.load_example("softmax").softmax_kernel
    print(f"softmax sweep on {common.gpu_name()} ({args.dtype}, CUDA events, median of {args.reps})")
    for rows, cols in ((32768, 1024), (8192, 8192)):
        x = common.random_tensor(torch, (rows, cols), getattr(torch, args.dtype), 1, scale=2.0)
        y = torch.empty_like(x)
        src, dst = common.random_tensor(torch, (rows, cols), getattr(torch, args.dtype), 2), torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        copy = common.time_cuda(lambda: dst.copy_(src), warmup=10, reps=args.reps).gbps(nbytes)
        ref = torch.softmax(x.float(), dim=-1)
        print(f"{rows}x{cols}: copy {copy:.0f} GB/s")
        variants = []
        for nw in (1, 2, 4, 8, 16, 32):
            for hint in (("default", 0, 2048 // (32 * nw)) if args.hints else ("default",)):
                variants.append((f"1 row/program  warps={nw:<2} ctas/SM hint={hint}", example, {}, rows, nw, hint))
        for r in (2, 4, 8):
            if rows % r == 0:
                for nw in (1, 2, 4, 8, 16):
                    variants.append((f"{r} rows/program warps={nw:<2} hint=default", softmax_rows, {"R": r},
                                     rows // r, nw, "default"))
        for label, kernel, consts, grid, nw, hint in variants:
            os.environ["TILEJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tj-sweep-")
            pipeline.occupancy_hint = original if hint == "default" else (lambda fn, w, h=hint: h)
            kernel._cache.clear()
            kernel._fast.clear()

            def launch():
                kernel[(grid,)](x, y, BLOCK=tj.next_power_of_2(cols), num_warps=nw, **consts)
            try:
                y.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                err = common.relative_error(torch, y.float(), ref)
                gbps = common.time_cuda(launch, warmup=10, reps=args.reps).gbps(nbytes)
                regs = kernel.inspect(x, y, BLOCK=tj.next_power_of_2(cols), num_warps=nw, **consts).registers \
                    if hasattr(kernel, "inspect") else "?"
                print(f"  {label:<48} {gbps:7.0f} GB/s  {gbps / copy:.3f}x copy  rel err {err:.1e}  regs {regs}")
            except Exception as e:          # report and go on
                print(f"  {label:<48} FAILED {type(e).__name__}: {str(e)[:150]}")
    pipeline.occupancy_hint = original
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
