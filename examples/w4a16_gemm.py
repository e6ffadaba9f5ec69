"""Weight-only 4-bit GEMM (W4A16), as in LLM inference: activations in bfloat16, weights stored as
unsigned 4-bit integers packed two per byte along N (low nibble first, ``tj.unpack``), with one
scale and one zero point per group of ``GROUP`` rows of K and per column:
``w = (q - zero) * scale``.  The weights are dequantised in registers, tile by tile, and feed the
tensor cores as bfloat16; no dequantised copy of W is ever written to memory.  ``BF16_MATH``
(the default) computes ``q - zero`` in bfloat16, exact for integer zero points (pairs of values
per instruction on the GPU).  With fewer than 64 rows a block (decode) the tensor cores take
``q - zero`` and each K tile's float32 product is multiplied by its scales column by column (a
K tile lies in one group): no weight is rounded, and one multiply a column a tile replaces one a
weight (measured on the H200: 4-7% faster at M 1-16).  With 64 rows or more each weight is
``(q - zero) * scale`` rounded once to bfloat16 (a second accumulator there cost 21-26%).
Otherwise the weights are dequantised in float32 and rounded to bfloat16 (any zero points).  The
loop is a plain ``range``: the compiler pipelines it.

Decode shapes (M of 1-64) give few output blocks: N / BN programs cannot fill the GPU, and each
runs the whole K loop.  ``run(..., split=S)`` cuts K into S slices along a third grid axis
(``K_SLICE`` values each, a multiple of BK so no tile straddles a group).  Each program stores its
float32 partial product in its own layer of ``part`` (S x M x N) and counts itself in ``count``
(one int32 per output block, zero between launches) with a release-acquire atomic; the program
that counts last sums the S layers in order, writes the bfloat16 block and puts the count back to
zero.  So there is no zeroing and no conversion kernel around the launch, and the result is the
same from run to run whichever program finishes last.  Consecutive programs take the slices of
one block, so each block's sum comes soon after its slices start, not all in the launch's last
wave (measured on the H100 at M 1-16, N = K = 8192: 43 us, against 54 us with the slices on the
grid's slowest axis and 46-47 us for float32 atomics into a zeroed C plus the conversion).

With 16 rows a block and 32 columns or more a warp (16 x 128 on 4 warps), the compiler takes the
tensor cores' B fragments straight from the packed bytes (``passes/nibble_operands.py``): the
weight tiles ride the x tiles' cp.async ring, ``ldmatrix.trans`` reads two rows of four columns
per 32-bit word, and a shift and one logic op make a bfloat16 pair; no bfloat16 copy of B in
shared memory.  Measured on the H100 at M1, N = K = 8192: 28.7-29.1 us at 16x128x128, 4 warps,
split 4, against 38.4 us for the best config with B staged (2026-12-06).  The group's scales and
zero points are loaded an iteration ahead (``prefetch_loads``), and the kernel holds 3 CTAs an
SM (119 registers): 23.5-23.8 us at M1 N = K = 8192, 59.7-59.9 us at N 28672 (the packed weights
read at 0.47 / 0.64x copy bandwidth; 2026-12-06, session 29).

``TILED`` (``run(..., tiled=True)``) reads the weights reordered once by ``tile_weights`` into
(K/BK, N/BN, BK, BN/2): each tile one contiguous run of memory instead of BK rows of BN/2 bytes
(32 at BN 64) a row apart.  Measured on the H100 at M1: 35.4 against 39.6 us at N = K = 8192,
106.3 against 116.1 at N 28672 (2026-12-06)."""
import numpy as np

import tilejit as tj


@tj.kernel
def w4a16_matmul_kernel(a, w, scales, zeros, c, part, count, BM: tj.constexpr, BN: tj.constexpr,
                        BK: tj.constexpr, GROUP: tj.constexpr, K_SLICE: tj.constexpr = 0,
                        BF16_MATH: tj.constexpr = True, FOLD_ZEROS: tj.constexpr = False,
                        TILED: tj.constexpr = False):
    tj.static_assert(GROUP % BK == 0, "a K tile must lie inside one quantisation group")
    tj.static_assert(K_SLICE % BK == 0, "a K slice must be whole K tiles")
    # consecutive programs take the slices of one block: each block's last slice (its sum) comes
    # soon after its first, not all in the launch's last wave
    lin = (tj.program_id(2) * tj.num_programs(1) + tj.program_id(1)) * tj.num_programs(0) + tj.program_id(0)
    slices = tj.num_programs(2)
    blk = lin // slices
    m = (blk % tj.num_programs(0)) * BM
    n = (blk // tj.num_programs(0)) * BN
    k0 = (lin % slices) * K_SLICE
    k1 = tj.minimum(k0 + K_SLICE, a.shape[1]) if K_SLICE else a.shape[1]
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(k0, k1, BK):
        x = tj.load(a, (m, k), (BM, BK))
        if TILED:                  # (K/BK, N/BN, BK, BN/2): the tile's bytes in one contiguous run
            wt = tj.load(w, (k // BK, n // BN, 0, 0), (1, 1, BK, BN // 2)).reshape((BK, BN // 2))
        else:
            wt = tj.load(w, (k, n // 2), (BK, BN // 2))
        q = tj.unpack(wt, tj.uint4)                                            # (BK, BN) in 0..15
        s = tj.load(scales, (k // GROUP, n), (1, BN))
        z = tj.load(zeros, (k // GROUP, n), (1, BN))
        if FOLD_ZEROS and BM < 64:  # x.(q - z) = x.(q + 128) - (sum of x).(z + 128): q + 128 is the
            # nibble's bfloat16 as the conversion builds it, with no subtraction a weight
            xs = tj.expand_dims(tj.sum(x.to(tj.float32), axis=1), 1)
            acc += (tj.dot(x, q.to(x.dtype) + 128) - xs * (z.to(tj.float32) + 128.0)) * s.to(tj.float32)
        elif BF16_MATH and BM < 64:  # (q - z) is exact in bfloat16 for integer zero points, and a
            # K tile lies in one group: its scale multiplies the tile's product column by column.
            # Spelled (q + 128) - (z + 128): q + 128 is the nibble's bfloat16 as the conversion
            # builds it (no subtraction), so a pair of weights costs one subtraction, not two;
            # the scaled product joins acc in one fused multiply-add
            acc = tj.fma(tj.dot(x, (q.to(x.dtype) + 128) - (z + 128)), s.to(tj.float32), acc)
        elif BF16_MATH:            # more rows: a second accumulator costs more than a multiply a weight
            acc = tj.dot(x, (q.to(x.dtype) - z) * s, acc)
        else:
            acc = tj.dot(x, ((q.to(tj.float32) - z.to(tj.float32)) * s.to(tj.float32)).to(x.dtype), acc)
    if K_SLICE:
        # this slice's product in its layer; the slice that counts last sums the layers in order
        tj.store(part, (lin % slices, m, n), tj.expand_dims(acc, 0))
        block = blk
        before = tj.atomic_add(count, (block,), tj.full((1,), 1, tj.int32), sem="acq_rel")
        if tj.max(before) == tj.num_programs(2) - 1:
            total = tj.zeros((BM, BN), tj.float32)
            for layer in range(tj.num_programs(2)):
                total += tj.sum(tj.load(part, (layer, m, n), (1, BM, BN)), axis=0)
            tj.store(c, (m, n), total.to(c.dtype))
            tj.store(count, (block,), tj.zeros((1,), tj.int32))          # zero for the next launch
    else:
        tj.store(c, (m, n), acc.to(c.dtype))


def quantize(w, group):
    """``w`` (K x N float32) as (packed uint8 K x N/2, scales and zero points (K/group) x N)."""
    k, n = w.shape
    g = w.reshape(k // group, group, n)
    lo, hi = g.min(axis=1), g.max(axis=1)
    scales = np.maximum(hi - lo, 1e-6) / 15
    zeros = np.round(-lo / scales)
    q = np.clip(np.round(g / scales[:, None, :] + zeros[:, None, :]), 0, 15).astype(np.uint8).reshape(k, n)
    packed = q[:, 0::2] | (q[:, 1::2] << 4)
    return packed, scales.astype(tj.bfloat16.np), zeros.astype(tj.bfloat16.np)


def tile_weights(packed, BK, BN):
    """The packed weights (K x N/2 bytes) laid out for ``TILED`` kernels of BK x BN tiles:
    (ceil(K/BK), ceil(N/BN), BK, BN/2), each tile's bytes contiguous (zeros past the edges), so
    a tile is one run of memory rather than BK rows of BN/2 bytes a row stride apart.  Done once,
    when the weights are loaded, as Marlin-style kernels reorder theirs."""
    k, half = packed.shape
    kt, nt = tj.cdiv(k, BK), tj.cdiv(2 * half, BN)
    padded = np.zeros((kt * BK, nt * BN // 2), np.uint8)
    padded[:k, :half] = packed
    return np.ascontiguousarray(padded.reshape(kt, BK, nt, BN // 2).transpose(0, 2, 1, 3))


def dequantize(packed, scales, zeros, group):
    q = np.stack([packed & 15, packed >> 4], axis=-1).reshape(packed.shape[0], -1).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), group, axis=0)
    z = np.repeat(zeros.astype(np.float64), group, axis=0)
    return (q - z) * s


def k_slice(k, split, bk):
    """The K values each of ``split`` slices takes: whole BK tiles."""
    return tj.cdiv(tj.cdiv(k, split), bk) * bk


def workspace(m, n, split, BM, BN):
    """The split-K buffers of ``run``: the layers of partial products (float32, split x m x n)
    and the blocks' arrival counts (int32 zeros, one per BM x BN block).  The kernel leaves the
    counts at zero, so the same buffers serve every later launch of that shape."""
    return (np.empty((split, m, n), np.float32),
            np.zeros(tj.cdiv(m, BM) * tj.cdiv(n, BN), np.int32))


def run(a, packed, scales, zeros, group=64, BM=64, BN=64, BK=64, split=1, bf16_math=True, fold_zeros=False,
        tiled=False):
    """``bf16_math``: ``q - zero`` in bfloat16 (exact for the integer zero points ``quantize``
    gives); with ``BM`` < 64 the scales multiply each K tile's float32 product and no weight is
    rounded (``reference(rounded=False)``), else each weight is rounded once to bfloat16
    (``reference``); ``bf16_math=False``: the weights dequantised in float32 and rounded to
    bfloat16 (any zero points); ``fold_zeros`` (``BM`` < 64): the zero points leave the weights
    and join the product as ``(sum of x) * (z + 128)`` (``reference(rounded=False)``, any zero
    points; on the H100 no faster at M1: 40.6 against 39.6 us, 2026-12-06); ``tiled``: the
    weights reordered by ``tile_weights`` here, at every call (a caller that launches the kernel
    itself reorders them once, as ``benchmarks/bench_quant.py`` does) and read with ``TILED``."""
    bk = min(BK, group)
    n = packed.shape[1] * 2
    if tiled:
        packed = tile_weights(packed, bk, BN)
    grid = (tj.cdiv(a.shape[0], BM), tj.cdiv(n, BN))
    c = np.empty((a.shape[0], n), tj.bfloat16.np)
    if split == 1:
        w4a16_matmul_kernel[grid](a, packed, scales, zeros, c, None, None, BM=BM, BN=BN, BK=bk, GROUP=group,
                                  BF16_MATH=bf16_math, FOLD_ZEROS=fold_zeros, TILED=tiled)
        return c
    ks = k_slice(a.shape[1], split, bk)
    slices = tj.cdiv(a.shape[1], ks)
    part, count = workspace(a.shape[0], n, slices, BM, BN)
    w4a16_matmul_kernel[grid + (slices,)](a, packed, scales, zeros, c, part, count, BM=BM, BN=BN, BK=bk,
                                          GROUP=group, K_SLICE=ks, BF16_MATH=bf16_math, FOLD_ZEROS=fold_zeros,
                                          TILED=tiled)
    return c


def reference(a, packed, scales, zeros, group=64, rounded=True, **_):
    """The product with the weights dequantised in float64, each rounded to bfloat16 as ``run``
    does at its default ``BM`` (``rounded=False``: not rounded, as at ``BM`` < 64)."""
    w = dequantize(packed, scales, zeros, group)
    if rounded:
        w = w.astype(tj.bfloat16.np).astype(np.float64)
    return a.astype(np.float64) @ w


def example_inputs(rng):
    a = rng.standard_normal((200, 256)).astype(tj.bfloat16.np)
    packed, scales, zeros = quantize(rng.standard_normal((256, 192)).astype(np.float32), 64)
    return a, packed, scales, zeros


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    print(f"w4a16 matmul {inputs[0].shape} @ uint4 {inputs[1].shape[0]}x{2 * inputs[1].shape[1]}, "
          f"group 64 (-> bfloat16): max error {np.abs(out.astype(np.float64) - ref).max():.2e}")
