"""Experiment: the switches of ``passes.chunk_rows`` (chunk budget, warps, prefetch, online
softmax, chunk-shaped accumulators, the several-loads threshold) on softmax, RMSNorm and
layernorm at 65536, 32768, 16384 and 8192 columns (2**26 elements, fp32 and bf16), against copy
in the same run.  Each variant compiles into its own cache directory (the compiler's fingerprint
does not see the patched constants) and the kernels' in-process caches are cleared.  The
switches set here shape rows past the registers; rows split only for their several loads follow
``chunk_rows.SEVERAL_LOADS`` (edit it to vary them).

    python3 benchmarks/chunk_variants.py [--cpu]      # --cpu: only compile and report spills

One line per (kernel, dtype, columns, variant): the variant's index, the chunk (None: not
split), the warps, the registers, the spilled bytes and tilejit / copy.
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings

import common
import tilejit as tj
from tilejit.passes import chunk_rows

# (prefetch, chunk budget, num_warps of a chunked kernel (None: the compiler's), online softmax,
#  threshold counts every load, chunk-shaped accumulators)
VARIANTS = [(False, 8192, 16, True, True, True), (False, 8192, 16, False, True, True),
            (True, 8192, 16, True, True, True), (False, 16384, None, True, True, True),
            (False, 16384, None, False, True, True)]


def kernels(n):
    return [("softmax", common.load_example("softmax").softmax_kernel, lambda x, w, y: (x, y)),
            ("rmsnorm", common.load_example("rmsnorm").rmsnorm_kernel, lambda x, w, y: (x, w, y, 1e-6)),
            ("layernorm", common.load_example("layernorm").layernorm_kernel, lambda x, w, y: (x, w, w, y, 1e-5))]


def main() -> int:
    cpu = "--cpu" in sys.argv
    base = tempfile.mkdtemp()
    rows = []
    torch = None if cpu else common.require_cuda_torch()
    for name in ("float32", "bfloat16"):
        for n in (65536, 32768, 16384, 8192):
            m = 2 ** 26 // n
            if cpu:
                import numpy as np
                x = np.zeros((2, n), tj.bfloat16.np if name == "bfloat16" else np.float32)
                w, y = x[0].copy(), x.copy()
            else:
                dtype = getattr(torch, name)
                x = common.random_tensor(torch, (m, n), dtype, 1)
                w, y = common.random_tensor(torch, (n,), dtype, 2), torch.empty_like(x)
                src, dst = common.random_tensor(torch, (m, n), dtype, 4), torch.empty_like(x)
                nbytes = 2 * x.numel() * x.element_size()
                copy = common.time_cuda(lambda: dst.copy_(src), warmup=10, reps=20).gbps(nbytes)
            for label, kernel, args in kernels(n):
                for i, (prefetch, values, chunk_warps, online, count, acc) in enumerate(VARIANTS):
                    warps = chunk_warps
                    chunk_rows.PREFETCH, chunk_rows.CHUNK_BUDGET, chunk_rows.ONLINE_SOFTMAX = prefetch, values, online
                    chunk_rows.COUNT_LOADS, chunk_rows.ELEMENTWISE_ACC = count, acc
                    os.environ["TILEJIT_CACHE_DIR"] = f"{base}/{i}"
                    k = getattr(kernel, "kernel", kernel)
                    k._cache.clear()
                    k._fast.clear()               # the re-launch fast path keeps the last variant's code
                    getattr(k, "_launchers", {}).clear() if hasattr(k, "_launchers") else None
                    kargs = args(x, w, y)
                    planned = chunk_rows.plan_chunks(k.tile_ir(*k.specialise(k.bind(kargs, {"BLOCK": n}))[:2]))
                    warps = warps if planned is not None else None
                    with warnings.catch_warnings(record=True) as ws:
                        warnings.simplefilter("always")
                        r = kernel.inspect(*kargs, BLOCK=n, num_warps=warps)
                    spill = r.spills
                    gbps = float("nan")
                    if not cpu:
                        launch = lambda: kernel[(m,)](*kargs, BLOCK=n, num_warps=warps)  # noqa: E731
                        gbps = common.copy_ratio(torch, launch, y, nbytes, copy, (label, n, name, i))
                    plan = chunk_rows.plan_chunks(k.tile_ir(*k.specialise(k.bind(kargs, {"BLOCK": n}))[:2]))
                    rows.append((label, name, n, i, plan.chunk if plan else None, r.num_warps, r.registers, spill, gbps))
                    print(*rows[-1], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
