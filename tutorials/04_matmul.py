"""Tutorial 4: matrix multiplication. The one idea: ``tj.dot`` on tiles, in a loop over K. Each
program computes one BM x BN block of C, accumulating BK-wide slices of A and B.

    python3 tutorials/04_matmul.py

- ``tj.dot(a, b, acc)`` returns ``acc + a @ b``. On NVIDIA GPUs 16-bit tiles run on the tensor
  cores (``wgmma`` on Hopper, ``mma.sync`` on Ampere) with a float32 accumulator.
- A plain ``range`` loop is enough: the compiler copies the next slices of A and B into shared
  memory while this one is multiplied (``tj.range(..., stages=N)`` only sets how far ahead).
- Ragged edges (M, N, K not multiples of the blocks) read zeros and drop writes, as before.
- ``kernel.inspect(...)`` compiles without running and shows every stage: which instruction the
  DOT became, the registers, the PTX. It works without a GPU (``backend="cuda"`` compiles).
"""
import numpy as np

import tilejit as tj


@tj.kernel
def matmul_kernel(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m0, n0 = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k0 in range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (m0, k0), (BM, BK)), tj.load(b, (k0, n0), (BK, BN)), acc)
    tj.store(c, (m0, n0), acc.to(c.dtype))


def matmul(a, b, BM=64, BN=64, BK=32):
    c = np.empty((a.shape[0], b.shape[1]), np.float32)
    matmul_kernel[(tj.cdiv(a.shape[0], BM), tj.cdiv(b.shape[1], BN))](a, b, c, BM=BM, BN=BN, BK=BK)
    return c


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 300)).astype(np.float16)
    b = rng.standard_normal((300, 150)).astype(np.float16)
    c = matmul(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    tj.testing.assert_close(c, want, rtol=2e-3, atol=2e-2)
    print(f"matmul {a.shape} @ {b.shape} in float16, float32 accumulation: max error {np.abs(c - want).max():.1e}")
    ptx = matmul_kernel.inspect(a, b, c, BM=64, BN=64, BK=32).ptx       # compiled for the GPU, not run
    if ptx:
        kind = "wgmma" if "wgmma" in ptx else "mma.sync" if "mma.sync" in ptx else "FMAs"
        print(f"for this GPU (or sm_90a without one) the loop's DOT compiles to {kind}")


if __name__ == "__main__":
    main()
