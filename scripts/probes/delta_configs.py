"""Time attention backward's delta kernel (rowsum(dO * O)) over row blocks and warps on torch
CUDA tensors (CUDA events, median of 20, L2 flushed by reading):

    python3 scripts/probes/delta_configs.py 16x16x1024x64 4x32x4096x128
"""
import sys

import torch

import tilejit as tj
from tilejit.examples import attention_backward as ab

sys.path.insert(0, "benchmarks")
import common  # noqa: E402


def main(argv):
    for shape in argv:
        batch, heads, seq, dim = map(int, shape.split("x"))
        o, do = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        delta = torch.empty(batch, heads, seq, device="cuda")
        want = (o.float() * do.float()).sum(-1)
        nbytes = 2 * o.numel() * o.element_size() + delta.numel() * 4
        copy = common.copy_gbps(torch, 10)
        for bm in (32, 64, 128, 256):
            for warps in (None, 4, 8):
                def run(bm=bm, warps=warps):
                    ab.delta_kernel[(tj.cdiv(seq, bm), batch * heads)](o, do, delta, None, BM=bm, BD=dim,
                                                                      num_warps=warps)
                run()
                torch.testing.assert_close(delta, want, rtol=1e-3, atol=1e-2)
                t = common.time_cuda(run, reps=20).median_ms
                print(f"{shape} BM {bm} warps {warps}: {t * 1e3:.1f} us, {nbytes / t / 1e6 / copy:.2f}x copy", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
