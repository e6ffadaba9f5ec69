"""Per-tensor scaled float8 GEMM, as in fp8 inference: A and B are stored as float8 e4m3 with one
float32 scale each (x ≈ x8 * scale), the product accumulates in float32 on tensor cores
(mma.sync m16n8k32 on sm_90a), and the epilogue applies both scales and rounds to bfloat16:
``c = (a8 @ b8) * scale_a * scale_b``.  The loop is a plain ``range``: the compiler pipelines it.

``B_NK=True`` (``run_linear``) is the same product with the weights stored as ``nn.Linear`` and
``torch._scaled_mm`` keep them, (N, K), and read transposed (``w.T``): both operands are then
K-major, which float8 ``wgmma`` needs, so on sm_90a it runs there (4 warps per 64 rows, N a
multiple of 8), its tiles copied by TMA."""
import numpy as np

import tilejit as tj

E4M3_MAX = 448.0        # the largest finite float8 e4m3 value


@tj.kernel
def fp8_matmul_kernel(a, b, c, scale_a, scale_b, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                      B_NK: tj.constexpr = False):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        if B_NK:                           # b stored (N, K), as nn.Linear keeps its weight
            w = tj.load(b, (n, k), (BN, BK)).T
        else:
            w = tj.load(b, (k, n), (BK, BN))
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), w, acc)
    tj.store(c, (m, n), (acc * (scale_a * scale_b)).to(c.dtype))


def run_linear(a8, w8, scale_a, scale_w, BM=128, BN=128, BK=128, num_warps=8):
    """``(a8 @ w8.T) * scale_a * scale_w`` in bfloat16, ``w8`` of shape (N, K)."""
    c = np.empty((a8.shape[0], w8.shape[0]), tj.bfloat16.np)
    grid = (tj.cdiv(a8.shape[0], BM), tj.cdiv(w8.shape[0], BN))
    fp8_matmul_kernel[grid](a8, w8, c, scale_a, scale_w, BM=BM, BN=BN, BK=BK, B_NK=True, num_warps=num_warps)
    return c


def quantize(x):
    """``x`` (float32) as (float8 e4m3 values, their per-tensor float32 scale)."""
    scale = float(np.abs(x).max()) / E4M3_MAX or 1.0
    return (x / scale).astype(tj.float8e4m3.np), np.float32(scale)


def run(a8, b8, scale_a, scale_b, BM=64, BN=64, BK=64):
    c = np.empty((a8.shape[0], b8.shape[1]), tj.bfloat16.np)
    grid = (tj.cdiv(a8.shape[0], BM), tj.cdiv(b8.shape[1], BN))
    fp8_matmul_kernel[grid](a8, b8, c, scale_a, scale_b, BM=BM, BN=BN, BK=BK)
    return c


def reference(a8, b8, scale_a, scale_b, **_):
    return (a8.astype(np.float64) @ b8.astype(np.float64)) * float(scale_a) * float(scale_b)


def example_inputs(rng):
    a, sa = quantize(rng.standard_normal((200, 256)).astype(np.float32) * 3)
    b, sb = quantize(rng.standard_normal((256, 136)).astype(np.float32))
    return a, b, sa, sb


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    print(f"fp8 matmul {inputs[0].shape} @ {inputs[1].shape} (e4m3 -> bfloat16): "
          f"max error {np.abs(out.astype(np.float64) - ref).max():.2e}")
