"""Split-K matmul C = A @ B for shapes with a long K and few output blocks (a skinny decode GEMM,
a weight-gradient GEMM): the grid adds a third axis that cuts K into SPLIT slices, each program
computes its slice's partial product on the tensor cores and ``tj.atomic_add``s it into C (float32,
zeroed first).  The partial sums land in no set order on the GPU, so the last bits of C may differ
from run to run."""
import numpy as np

import tilejit as tj


@tj.kernel
def split_k_kernel(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, K_SLICE: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    k0 = tj.program_id(2) * K_SLICE
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(k0, tj.minimum(k0 + K_SLICE, a.shape[1]), BK):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.atomic_add(c, (m, n), acc)


def run(a, b, split=4, BM=64, BN=64, BK=32):
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    k_slice = tj.cdiv(tj.cdiv(a.shape[1], split), BK) * BK
    grid = (tj.cdiv(a.shape[0], BM), tj.cdiv(b.shape[1], BN), tj.cdiv(a.shape[1], k_slice))
    split_k_kernel[grid](a, b, c, BM=BM, BN=BN, BK=BK, K_SLICE=k_slice)
    return c


def reference(a, b, **_):
    return a.astype(np.float64) @ b.astype(np.float64)


def example_inputs(rng):
    return (rng.standard_normal((96, 1000)).astype(np.float16),
            rng.standard_normal((1000, 80)).astype(np.float16))


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    print(f"split-K gemm {inputs[0].shape} x {inputs[1].shape}: max error {np.abs(out - ref).max():.2e}")
