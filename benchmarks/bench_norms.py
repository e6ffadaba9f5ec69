"""Layernorm and RMSNorm forward (``examples/layernorm.py``, ``examples/rmsnorm.py``) on torch
CUDA tensors, launched with no ``num_warps`` (the compiler picks), against
``torch.nn.functional.layer_norm`` / ``rms_norm`` and the copy bandwidth in the same run.

    python3 benchmarks/bench_norms.py [--shapes 32768x1024,8192x8192] [--dtypes float32,float16,bfloat16]

Every output is poisoned with NaN, computed, and checked against torch in float32 before it is
timed. Bytes moved: the input read and the output written (the weight and bias are one row).
"""
from __future__ import annotations

import argparse

import common
import tilejit as tj

TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
COLUMNS = [("kernel", "kernel", ""), ("shape", "shape", ""), ("dtype", "dtype", ""), ("warps", "warps", ""),
           ("tj", "tilejit GB/s", ".0f"), ("torch", "torch GB/s", ".0f"), ("copy", "copy GB/s", ".0f"),
           ("vs_copy", "tj/copy", ".3f"), ("vs_torch", "tj/torch", ".3f"), ("err", "rel err", ".1e")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="32768x1024,8192x8192")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    F = torch.nn.functional
    layernorm = common.load_example("layernorm").layernorm_kernel
    rmsnorm = common.load_example("rmsnorm").rmsnorm_kernel
    rows = []
    for shape in args.shapes.split(","):
        m, n = (int(v) for v in shape.lower().split("x"))
        for name in args.dtypes.split(","):
            dtype = getattr(torch, name)
            x, w, b, y, nbytes, copy = common.row_inputs(torch, m, n, dtype, args.reps)
            block = tj.next_power_of_2(n)
            cases = [("layernorm", layernorm, (x, w, b, y, 1e-5), lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                      lambda: F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)),
                     ("rmsnorm", rmsnorm, (x, w, y, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6),
                      lambda: F.rms_norm(x.float(), (n,), w.float(), 1e-6))]
            for label, kernel, kargs, ref_fn, exact in cases:
                def launch():
                    kernel[(m,)](*kargs, BLOCK=block)
                err = common.checked(torch, launch, y, exact, TOLERANCE[name], f"{label} {shape} {name}")
                tj_gbps = common.time_cuda(launch, setup=lambda: y.fill_(float("nan")), warmup=10,
                                           reps=args.reps).gbps(nbytes)
                torch_gbps = common.time_cuda(ref_fn, warmup=10, reps=args.reps).gbps(nbytes)
                warps = kernel.inspect(*kargs, BLOCK=block).num_warps
                rows.append({"kernel": label, "shape": shape, "dtype": name, "warps": warps, "tj": tj_gbps,
                             "torch": torch_gbps, "copy": copy, "vs_copy": tj_gbps / copy,
                             "vs_torch": tj_gbps / torch_gbps, "err": err})
                common.record(label, shape, name, tj_gbps, "GB/s", "torch copy_ (same run)", copy, tj_gbps / copy,
                              torch_GBps=torch_gbps, num_warps=warps)
    common.print_table(rows, COLUMNS, title=f"norms on {common.gpu_name()} (CUDA events, median of "
                       f"{args.reps}, L2 flushed; GB/s = read + write; no num_warps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
