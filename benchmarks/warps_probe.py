"""Experiment: the warps of a row kernel and the occupancy hint (``pipeline.occupancy_hint``,
which caps registers so that 1024 threads fit an SM), on softmax, RMSNorm and layernorm over
rows of 4096 to 32768 columns (2**26 elements), against copy in the same run.  Each variant
compiles into its own cache directory and the kernels' in-process caches are cleared.

    python3 benchmarks/warps_probe.py [--columns 8192,16384] [--dtypes bfloat16] [--cpu]

One line per (kernel, dtype, columns, warps, variant: hint (the default), none (no occupancy
hint), no-PASS (``--without PASS``: the pipeline without that pass), long32 (``--long-rows-at-32``)): registers, spilled bytes, tilejit / copy.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import warnings

import common
from tilejit.passes import chunk_rows, pipeline

HINT, STAGES, LONG = pipeline.occupancy_hint, list(pipeline.PIPELINE), dict(chunk_rows.LONG_ROW_WARPS)
KERNELS = {"softmax": ("softmax", "softmax_kernel", lambda x, w, b, y: (x, y)),
           "rmsnorm": ("rmsnorm", "rmsnorm_kernel", lambda x, w, b, y: (x, w, y, 1e-6)),
           "layernorm": ("layernorm", "layernorm_kernel", lambda x, w, b, y: (x, w, b, y, 1e-5))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--columns", default="8192,16384")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--kernels", default="softmax,rmsnorm,layernorm")
    ap.add_argument("--warps", default="0,8,16,32", help="0: the compiler's choice")
    ap.add_argument("--without", default="", help="a pipeline pass to also measure without (e.g. hoist_loads)")
    ap.add_argument("--long-rows-at-32", action="store_true",
                    help="also measure rows past chunk_rows.CHUNK_VALUES at 32 warps whatever their dtype")
    ap.add_argument("--cpu", action="store_true", help="only compile and report registers and spills")
    ap.add_argument("--variants", default="hint,none", help="which of hint and none to run")
    opts = ap.parse_args()
    torch = None if opts.cpu else common.require_cuda_torch()
    base = tempfile.mkdtemp()
    for dname in opts.dtypes.split(","):
        for n in map(int, opts.columns.split(",")):
            m = 2 ** 26 // n
            if opts.cpu:
                import numpy as np
                import tilejit as tj
                x = np.zeros((2, n), tj.bfloat16.np if dname == "bfloat16" else np.float32)
                w, b, y, copy = x[0].copy(), x[0].copy(), x.copy(), None
            else:
                x, w, b, y, nbytes, copy = common.row_inputs(torch, m, n, getattr(torch, dname), 20)
            for name in opts.kernels.split(","):
                module, attr, args = KERNELS[name]
                kernel = getattr(common.load_example(module), attr)
                k = getattr(kernel, "kernel", kernel)
                kargs = args(x, w, b, y)
                for warps in [int(v) or None for v in opts.warps.split(",")]:
                    for variant in (opts.variants.split(",") + ([f"no-{opts.without}"] if opts.without else [])
                                    + (["long32"] if opts.long_rows_at_32 else [])):
                        chunk_rows.LONG_ROW_WARPS = {1: 32, 2: 32, 4: 32} if variant == "long32" else LONG
                        pipeline.occupancy_hint = (lambda fn, num_warps: 0) if variant == "none" else HINT
                        pipeline.PIPELINE[:] = [s for s in STAGES if variant != f"no-{s.name}"]
                        os.environ["TILEJIT_CACHE_DIR"] = f"{base}/{warps}-{variant}"
                        k._cache.clear()
                        k._fast.clear()
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            r = kernel.inspect(*kargs, BLOCK=n, num_warps=warps)
                        ratio = float("nan")
                        if not opts.cpu:
                            launch = lambda: kernel[(m,)](*kargs, BLOCK=n, num_warps=warps)  # noqa: E731
                            ratio = common.copy_ratio(torch, launch, y, nbytes, copy, (name, n, dname, warps))
                        print(name, dname, n, r.num_warps, variant, r.registers,
                              r.spills, ratio, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
