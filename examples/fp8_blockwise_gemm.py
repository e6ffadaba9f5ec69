"""Block-scaled float8 GEMM, as in DeepSeek-V3 inference and training: A (M x K) is float8 e4m3 with
one float32 scale per row and per block of 128 columns (1x128), B (K x N) is float8 e4m3 with one
scale per 128 x 128 block, ``x ≈ x8 * scale``.  BK divides 128, so each K tile lies in one scale block
(a BN that does not divide 128, 256 say, loads each column's block scale: a (1, BN) row):
``tj.dot_scaled`` multiplies the raw fp8 tiles on the tensor cores and applies the row's and
the block's scales to the float32 product before it joins the accumulator.  ``B_NK=True``
(``run_nk``) reads B stored (N, K), with (N/128, K/128) scales, transposed: both operands are
then K-major, which float8 ``wgmma`` needs."""
import numpy as np

import tilejit as tj

E4M3_MAX = 448.0        # the largest finite float8 e4m3 value
BLOCK = 128             # the scale block along K (and along N for B)


@tj.kernel
def fp8_blockwise_matmul_kernel(a, a_scale, b, b_scale, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
                                B_NK: tj.constexpr = False):
    tj.static_assert(128 % BK == 0, "BK must divide the 128-wide scale blocks")
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        sa = tj.load(a_scale, (m, k // 128), (BM, 1))                 # this block's row scales
        if B_NK:                       # b stored (N, K) with (N/128, K/128) scales, as DeepGEMM keeps it
            w = tj.load(b, (n, k), (BN, BK)).T
            if 128 % BN == 0:
                sb = tj.load(b_scale, (n // 128, k // 128), (1, 1))
            else:                      # a tile across scale blocks: each column's block's scale
                sb = tj.load(b_scale, ((n + tj.arange(0, BN)) // 128, k // 128), (BN, 1)).T
        else:
            w = tj.load(b, (k, n), (BK, BN))
            if 128 % BN == 0:
                sb = tj.load(b_scale, (k // 128, n // 128), (1, 1))   # this block's one scale
            else:
                sb = tj.load(b_scale, (k // 128, (n + tj.arange(0, BN)) // 128), (1, BN))
        acc = tj.dot_scaled(tj.load(a, (m, k), (BM, BK)), sa, w, sb, acc)
    tj.store(c, (m, n), acc.to(c.dtype))


def quantize_rows(x):
    """``x`` (M x K, K a multiple of 128) as float8 e4m3 values and (M x K/128) float32 scales."""
    blocks = x.reshape(x.shape[0], -1, BLOCK)
    scales = np.maximum(np.abs(blocks).max(axis=2), 1e-12) / E4M3_MAX
    q = (blocks / scales[:, :, None]).reshape(x.shape).astype(tj.float8e4m3.np)
    return q, scales.astype(np.float32)


def quantize_blocks(x):
    """``x`` (K x N, both multiples of 128) as float8 e4m3 values and (K/128 x N/128) scales."""
    k, n = x.shape
    blocks = x.reshape(k // BLOCK, BLOCK, n // BLOCK, BLOCK)
    scales = np.maximum(np.abs(blocks).max(axis=(1, 3)), 1e-12) / E4M3_MAX
    q = (blocks / scales[:, None, :, None]).reshape(x.shape).astype(tj.float8e4m3.np)
    return q, scales.astype(np.float32)


def run_nk(a8, a_scale, b8_nk, b_scale_nk, BM=128, BN=128, BK=128, num_warps=8):
    """The product with the weights stored (N, K) and their scales (N/128, K/128), as DeepGEMM
    keeps them: both operands K-major, so on sm_90a float8 ``wgmma`` from TMA rings (ptxas: no
    spills at 128 x 128 x 128, 8 warps)."""
    c = np.empty((a8.shape[0], b8_nk.shape[0]), tj.bfloat16.np)
    grid = (tj.cdiv(a8.shape[0], BM), tj.cdiv(b8_nk.shape[0], BN))
    fp8_blockwise_matmul_kernel[grid](a8, a_scale, b8_nk, b_scale_nk, c, BM=BM, BN=BN, BK=BK, B_NK=True,
                                      num_warps=num_warps)
    return c


def run(a8, a_scale, b8, b_scale, BM=64, BN=64, BK=64):
    c = np.empty((a8.shape[0], b8.shape[1]), tj.bfloat16.np)
    grid = (tj.cdiv(a8.shape[0], BM), tj.cdiv(b8.shape[1], BN))
    fp8_blockwise_matmul_kernel[grid](a8, a_scale, b8, b_scale, c, BM=BM, BN=BN, BK=BK)
    return c


def reference(a8, a_scale, b8, b_scale, **_):
    """The float64 product of the dequantised operands."""
    a = a8.astype(np.float64) * np.repeat(a_scale.astype(np.float64), BLOCK, axis=1)
    b = b8.astype(np.float64) * np.repeat(np.repeat(b_scale.astype(np.float64), BLOCK, 0), BLOCK, 1)
    return a @ b


def example_inputs(rng):
    a, sa = quantize_rows(rng.standard_normal((200, 384)).astype(np.float32) * 3)
    b, sb = quantize_blocks(rng.standard_normal((384, 256)).astype(np.float32))
    return a, sa, b, sb


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    print(f"fp8 blockwise matmul {inputs[0].shape} @ {inputs[2].shape} (e4m3, 1x128 and 128x128 scales "
          f"-> bfloat16): max error {np.abs(out.astype(np.float64) - ref).max():.2e}")
