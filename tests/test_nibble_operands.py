"""Interleaved 4-bit B operands (``mma_layouts.nibble_*``): the layouts are checked against the
mma.sync and ldmatrix fragment maps of the PTX ISA, element by element."""
import re

import numpy as np
import pytest

from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML

SHAPES = [((16, 32), (1, 1)), ((32, 128), (1, 4)), ((128, 128), (1, 4)), ((64, 64), (2, 2)), ((16, 256), (2, 4))]


def simulate_dot(a, b, kind, warps):
    """C = A @ B computed the way the hardware would: A in ``mma_layout`` fragments, B in
    ``nibble_b_layout`` fragments, each m16n8k16 instruction per the PTX fragment maps, C
    scattered through ``nibble_c_layout``."""
    (m, k), n = a.shape, b.shape[1]
    la = ML.mma_layout(kind, ML.Operand.A, (m, k), warps)
    lb = ML.nibble_b_layout(kind, (k, n), warps)
    lc = ML.nibble_c_layout(kind, (m, n), warps)
    ta, tb, tc = la.table(), lb.table(), lc.table()
    wm, wn = warps
    mw, nw = m // wm, n // wn
    m_reps, n_reps, steps = mw // 16, nw // 8, k // 16
    out = np.full((m, n), np.nan)
    lanes = np.arange(32)
    for w in range(wm * wn):
        tid = w * 32 + lanes
        for mi in range(m_reps):
            for ni in range(n_reps):
                acc = np.zeros((16, 8))
                for kk in range(steps):
                    at, bt = np.zeros((16, 16)), np.zeros((16, 8))
                    for i in range(8):
                        r, c = ML.a_coord(kind, lanes, i)
                        at[r, c] = a[tuple(ta[tid, (mi * steps + kk) * 8 + i].T)]
                    for i in range(4):
                        r, c = ML.b_coord(kind, lanes, i)
                        bt[r, c] = b[tuple(tb[tid, (kk * n_reps + ni) * 4 + i].T)]
                    acc += at @ bt
                for i in range(4):
                    r, c = ML.c_coord(kind, lanes, i)
                    out[tuple(tc[tid, (mi * n_reps + ni) * 4 + i].T)] = acc[r, c]
    return out


@pytest.mark.parametrize("shape,warps", SHAPES)
def test_interleaved_fragments_compute_the_product(shape, warps):
    k, n = shape
    m = 16 * warps[0] * 2
    rng = np.random.default_rng(0)
    a, b = rng.integers(-4, 5, (m, k)).astype(float), rng.integers(-4, 5, (k, n)).astype(float)
    np.testing.assert_array_equal(simulate_dot(a, b, "bf16", warps), a @ b)


@pytest.mark.parametrize("shape,warps", SHAPES)
def test_each_layout_covers_its_tile_once_per_warp_group(shape, warps):
    k, n = shape
    for lay, dims in ((ML.nibble_b_layout("bf16", (k, n), warps), (k, n)),
                      (ML.nibble_bytes_layout((k, n // 2), warps), (k, n // 2)),
                      (ML.nibble_c_layout("bf16", (64, n), warps), (64, n))):
        t = lay.table().reshape(-1, 2)
        counts = np.zeros(dims, int)
        np.add.at(counts, tuple(t.T), 1)
        copies = warps[0] if lay.kind is not L.LayoutKind.NIBBLE_C else 1     # B: replicas along M
        assert (counts == copies).all(), lay


@pytest.mark.parametrize("shape,warps", SHAPES)
def test_bytes_unpack_into_the_b_fragments(shape, warps):
    """Each byte's two nibbles (columns 2c, 2c+1) are elements of the same thread's B fragments,
    and every four byte registers are one ldmatrix.trans register: rows 2t, 2t+1 of one byte pair."""
    k, n = shape
    lw = ML.nibble_bytes_layout((k, n // 2), warps)
    lb = ML.nibble_b_layout("bf16", (k, n), warps)
    tw, tb = lw.table(), lb.table()
    for tid in range(0, 32 * warps[0] * warps[1], 7):
        mine = {tuple(x) for x in tb[tid]}
        unpacked = {(r, 2 * c + h) for r, c in tw[tid] for h in (0, 1)}
        assert mine == unpacked
    lanes = np.arange(32)
    for word in range(lw.n // 4):
        regs = tw[:32, 4 * word:4 * word + 4]              # warp 0
        for half in (0, 1):
            row, col = ML.ldmatrix_coord(lanes, half, trans=True)
            got_rows = regs[:, 2 * half:2 * half + 2, 0] - row[:, None]      # the k step's first row
            got_pairs = regs[:, 2 * half:2 * half + 2, 1] // 2
            assert (got_rows == got_rows[0, 0]).all()
            assert (got_pairs[:, 0] == got_pairs[:, 1]).all() and (got_pairs[:, 0] % 8 == col).all()


@pytest.mark.parametrize("shape,warps", SHAPES)
def test_ldmatrix_rows_deliver_the_byte_layout(shape, warps):
    """Simulating ``ldmatrix.x4.trans`` at ``nibble_ldmatrix_rows``' addresses gives every byte
    register of ``nibble_bytes_layout`` in every lane of every warp."""
    k, half = shape[0], shape[1] // 2
    lw = ML.nibble_bytes_layout((k, half), warps)
    tw = lw.table()
    tile = np.arange(k * half).reshape(k, half)
    lanes = np.arange(32)
    steps = k // 16
    for w in range(warps[0] * warps[1]):
        rows = ML.nibble_ldmatrix_rows((k, half), warps, w)
        chunks = rows.shape[1]
        got = {}
        for p in range(rows.shape[0]):
            for c in range(chunks):
                for m in range(4 if steps > 1 else 2):
                    for h in (0, 1):
                        row, col = ML.ldmatrix_coord(lanes, h, trans=True)
                        src = rows[p, c][8 * m + row]         # the lane that addressed that matrix row
                        for e in (0, 1):
                            kk, hh = 2 * p + m // 2, m % 2
                            reg = (((kk * chunks + c) * 2 + hh) * 2 + h) * 2 + e
                            got[reg] = tile[src[:, 0], src[:, 1] + 2 * col + e]
        want = tile[tw[w * 32:(w + 1) * 32, :, 0], tw[w * 32:(w + 1) * 32, :, 1]]
        for reg in range(lw.n):
            np.testing.assert_array_equal(got[reg], want[:, reg])


def test_nibble_ok_needs_32_columns_a_warp_and_16_bit_types():
    assert ML.nibble_ok("bf16", 128, (1, 4)) and ML.nibble_ok("f16", 64, (2, 2))
    assert not ML.nibble_ok("bf16", 64, (1, 4)) and not ML.nibble_ok("e4m3", 128, (1, 4))


@pytest.mark.parametrize("shape,warps", [s for s in SHAPES if s[0][0] % 32 == 0])
def test_the_ldmatrix_address_layout_is_the_rows_table(shape, warps):
    k, half = shape[0], shape[1] // 2
    lay = ML.nibble_ldmatrix_layout((k, half), warps)
    t = lay.table()
    for w in range(warps[0] * warps[1]):
        rows = ML.nibble_ldmatrix_rows((k, half), warps, w)
        np.testing.assert_array_equal(t[w * 32:(w + 1) * 32].transpose(1, 0, 2), rows.reshape(-1, 32, 2))


# ------------------------------------------------------------------------------ the W4A16 example
import os  # noqa: E402
from unittest import mock  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

import tilejit as tj  # noqa: E402
from tilejit.examples import w4a16_gemm as ex  # noqa: E402
from tilejit.passes import nibble_operands  # noqa: E402
from tilejit.simt import SimtOp  # noqa: E402


def _w4a16(m, n, k, tiles, split, tiled, num_warps, seed, switch=True, backend="emulate"):
    bm, bn, bk = tiles
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), 128)
    w = ex.tile_weights(packed, bk, bn) if tiled else packed
    c = np.full((m, n), np.nan, tj.bfloat16.np)
    ks = ex.k_slice(k, split, bk)
    slices = tj.cdiv(k, ks)
    part, count = ex.workspace(m, n, slices, bm, bn)
    grid = (tj.cdiv(m, bm), tj.cdiv(n, bn), slices)
    with mock.patch.object(nibble_operands, "NIBBLE_B", switch), mock.patch.dict(os.environ, {"TILEJIT_BACKEND": backend}):
        ex.w4a16_matmul_kernel[grid](a, w, scales, zeros, c, part, count, BM=bm, BN=bn, BK=bk, GROUP=128,
                                     K_SLICE=ks, TILED=tiled, num_warps=num_warps)
        found = ex.w4a16_matmul_kernel.inspect(a, w, scales, zeros, c, part, count, BM=bm, BN=bn, BK=bk, GROUP=128,
                                               K_SLICE=ks, TILED=tiled, num_warps=num_warps)
    return c.astype(np.float64), ex.reference(a, packed, scales, zeros, 128, rounded=False), found


@settings(max_examples=5, deadline=None)
@given(m=st.integers(1, 20), n_blocks=st.integers(1, 2), k_tiles=st.integers(1, 3), split=st.integers(1, 3),
       config=st.sampled_from([((16, 128, 128), 4), ((16, 128, 64), 4), ((16, 64, 64), 2), ((16, 256, 128), 8)]),
       tiled=st.booleans(), seed=st.integers(0, 2**16))
def test_w4a16_with_b_from_nibbles_matches_the_product_bit_for_bit(m, n_blocks, k_tiles, split, config, tiled, seed):
    """The example on the emulator with B's fragments taken from the packed bytes: the same bits
    as the kernel that stages the unpacked values in shared memory (only which lane holds which
    column changes, every sum is the same), and within bfloat16 rounding of float64."""
    tiles, warps = config
    n, k = tiles[1] * n_blocks - (8 if n_blocks > 1 else 0), 128 * k_tiles
    out, ref, found = _w4a16(m, n, k, tiles, split, tiled, warps, seed)
    if tiled or n % 32 == 0:      # rows of whole 16-byte chunks: copied into a ring, read by ldmatrix
        assert " = unpack " in found.simt_ir and "trans=True" in found.simt_ir
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
    plain, _, _ = _w4a16(m, n, k, tiles, split, tiled, warps, seed, switch=False)
    np.testing.assert_array_equal(out, plain)


def test_zero_points_loaded_an_iteration_ahead_keep_b_from_nibbles():
    """With the group's zero points prefetched (``prefetch_loads.PREFETCH_DEQUANTISED``: a row
    carried into the next iteration), the row is pinned through the loop's carried value in the
    columns the nibble fragments hold: B still comes from the bytes, with the same bits."""
    from tilejit.passes import prefetch_loads
    with mock.patch.object(prefetch_loads, "PREFETCH_DEQUANTISED", True):
        out, ref, found = _w4a16(5, 256, 384, (16, 128, 128), 1, True, 4, 1)
    assert " = unpack " in found.simt_ir and "trans=True" in found.simt_ir
    loop = re.search(r"= for .*", found.simt_ir).group(0)
    assert loop.count("xbfloat16>") == 2          # the scales and the zero points, carried
    plain, _, _ = _w4a16(5, 256, 384, (16, 128, 128), 1, True, 4, 1, switch=False)
    np.testing.assert_array_equal(out, plain)


def test_the_packed_weights_ride_a_shared_ring_read_by_ldmatrix_trans():
    _, _, found = _w4a16(3, 256, 512, (16, 128, 128), 2, True, 4, 0)
    simt = found.simt_ir
    assert " = unpack " in simt and "trans=True" in simt and "cp_async" in simt
    _, _, off = _w4a16(3, 256, 512, (16, 128, 128), 2, True, 4, 0, switch=False)
    assert " = unpack " not in off.simt_ir


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, tiles, split, tiled, warps", [
    (1, 8192, 1024, (16, 128, 128), 4, True, 4), (16, 4096, 512, (16, 256, 128), 2, False, 8),
    (7, 1000, 384, (16, 128, 64), 1, True, 4), (3, 992, 256, (16, 64, 64), 3, False, 2)])
def test_w4a16_with_b_from_nibbles_on_the_gpu(m, n, k, tiles, split, tiled, warps):
    out, ref, found = _w4a16(m, n, k, tiles, split, tiled, warps, m + n, backend="cuda")
    if tiled or n % 32 == 0:
        assert "ldmatrix.sync.aligned.m8n8.x4.trans" in found.ptx and found.spills == 0
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
    plain, _, _ = _w4a16(m, n, k, tiles, split, tiled, warps, m + n, switch=False, backend="cuda")
    np.testing.assert_array_equal(out, plain)


@tj.kernel
def _w4_gemm_other_spelling(a, w, s, z, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """A W4A16 GEMM as a Triton user might write it: ``tj.range`` with stages, each weight
    dequantised before the DOT (``(q - z) * s`` rounded to bfloat16), one group a K tile."""
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=3):
        q = tj.unpack(tj.load(w, (k, n // 2), (BK, BN // 2)), tj.uint4).to(tj.bfloat16)
        b = (q - tj.load(z, (k // BK, n), (1, BN))) * tj.load(s, (k // BK, n), (1, BN))
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), b, acc)
    tj.store(c, (m, n), acc.to(c.dtype))


@pytest.mark.parametrize("m, n, k, bn, bk, warps", [(5, 256, 256, 128, 64, 4), (16, 192, 128, 64, 32, 2)])
def test_another_spelling_reaches_b_from_nibbles(m, n, k, bn, bk, warps):
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), bk)
    c = np.full((m, n), np.nan, tj.bfloat16.np)
    args = (a, packed, scales, zeros, c)
    with mock.patch.dict(os.environ, {"TILEJIT_BACKEND": "emulate"}):
        _w4_gemm_other_spelling[(1, tj.cdiv(n, bn))](*args, BM=16, BN=bn, BK=bk, num_warps=warps)
        found = _w4_gemm_other_spelling.inspect(*args, BM=16, BN=bn, BK=bk, num_warps=warps)
    assert " = unpack " in found.simt_ir and "trans=True" in found.simt_ir
    ref = ex.reference(a, packed, scales, zeros, bk)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
