"""FlashAttention backward's dK/dV and dQ kernels (``examples/attention_backward.py``) compiled
for sm_90a at the benchmark's tiles, their loop's SASS counted on the build machine (nvdisasm):
the instructions from the first HGMMA to the last, and the float ones a score costs.

    python3 scripts/probes/bwd_sass.py"""
import collections
import re
import subprocess

import numpy as np

import tilejit as tj
from tilejit.examples import attention_backward as ab


def loop_counts(kernel, args, consts, num_warps):
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    art = kernel.compile(specs, consts, num_warps, "cuda").artifact
    with open("/tmp/_bwd.cubin", "wb") as f:
        f.write(art.cubin)
    sass = subprocess.run(["nvdisasm", "-c", "/tmp/_bwd.cubin"], capture_output=True, text=True).stdout.splitlines()
    gmma = [i for i, line in enumerate(sass) if "GMMA" in line]
    ops = collections.Counter(re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line).group(1)
                              for line in sass[gmma[0]:gmma[-1]] if re.match(r"\s*/\*[0-9a-f]+\*/", line))
    return sum(ops.values()), ops, art.registers, art.spills or 0


def main():
    for dim in (64, 128):
        q = np.zeros((1, 2, 1024, dim), tj.bfloat16.np)
        lse = np.zeros((1, 2, 1024), np.float32)
        for causal in (False, True):
            shared = dict(BD=dim, CAUSAL=causal, DEPENDENT=True)
            for name, kernel, args, consts in (
                    ("dkdv 32x128x8", ab.dkdv_kernel, (q, q, q, q, lse, lse, q, q, None, 1 / dim ** 0.5),
                     dict(BM=32, BN=128, **shared)),
                    ("dq 128x64x8", ab.dq_kernel, (q, q, q, q, lse, lse, q, 1 / dim ** 0.5), dict(BM=128, BN=64, **shared))):
                n, ops, regs, spills = loop_counts(kernel, args, consts, 8)
                print(f"D{dim} causal={causal} {name}: {n} SASS in the loop (MUFU {ops['MUFU']}, FFMA {ops['FFMA']}, "
                      f"FMUL {ops['FMUL']}, FADD {ops['FADD']}, FSEL {ops['FSEL']}), {regs} registers, {spills} spilled")


if __name__ == "__main__":
    main()
