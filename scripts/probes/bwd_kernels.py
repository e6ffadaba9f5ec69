"""Run FlashAttention backward (``examples/attention_backward.py``) once per config on torch CUDA
tensors, for a profiler to time each of its kernels:

    ncu --clock-control none --metrics gpu__time_duration.sum python3 scripts/probes/bwd_kernels.py \
        16x16x1024x64 64x128x8/128x64x8 64x128x8/atomic [--causal] [--exp]

``--exp``: P spelled ``exp(s - lse)`` (``attention_backward.BASE2 = False``).
"""
import sys

import numpy as np
import torch

from tilejit.examples import attention_backward as ab


def main(argv):
    causal = "--causal" in argv
    ab.BASE2 = "--exp" not in argv
    argv = [a for a in argv if a not in ("--causal", "--exp")]
    batch, heads, seq, dim = map(int, argv[0].split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(batch, heads, seq, dim, device="cuda", generator=gen, dtype=torch.bfloat16)
                   for _ in range(4))

    def empty(shape, dtype):
        return torch.empty(shape, device="cuda", dtype={np.float32: torch.float32}.get(dtype, dtype))
    o, lse = ab.forward(q, k, v, causal, BM=128, BN=128, empty=empty, num_warps=8)
    for cfg in argv[1:]:
        dkdv, dq = cfg.split("/")
        bm, bn, w = map(int, dkdv.split("x"))
        dq_config = "atomic" if dq == "atomic" else tuple(map(int, dq.split("x")))
        for _ in range(2):
            ab.backward(q, k, v, o, lse, do, causal, BM=bm, BN=bn, num_warps=w, dq_config=dq_config, empty=empty)
        torch.cuda.synchronize()
        print(f"done {cfg}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
