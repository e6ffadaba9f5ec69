"""The W4A16 example: uint4 weights packed along N, dequantised in registers with per-group
scales and zero points, feeding the tensor cores; against the float64 product of the dequantised
weights on every backend, for several group sizes and ragged M and N, with no dequantised copy in
global memory and PTX that assembles without spills."""
from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import codegen
from tilejit.examples import w4a16_gemm as ex
from tilejit.passes import plan_stores
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, NoneSpec

from conftest import assemble_or_skip

NONE = NoneSpec()


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, group", [(200, 192, 256, 64), (33, 64, 128, 32), (64, 130, 256, 128)])
@pytest.mark.parametrize("bf16_math", [False, True])
def test_w4a16_matches_the_dequantised_product(backend, m, n, k, group, bf16_math, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), group)
    out = ex.run(a, packed, scales, zeros, group, bf16_math=bf16_math).astype(np.float64)    # BM 64: rounded
    ref = ex.reference(a, packed, scales, zeros, group)
    # the kernel rounds the product to bfloat16 once: 2**-8 of each value, and float32 sums
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, group, split", [(1, 192, 512, 64, 4), (13, 130, 256, 128, 1)])
def test_zero_points_folded_into_the_product_match_the_dequantised_product(backend, m, n, k, group, split,
                                                                          monkeypatch):
    """``fold_zeros``: x.(q - z) as x.(q + 128) - (sum of x).(z + 128), with zero points that are
    not integers (the unfolded bfloat16 spelling would round q - z; this one does not)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k + split)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), group)
    zeros = (zeros.astype(np.float32) + rng.uniform(-0.5, 0.5, zeros.shape)).astype(tj.bfloat16.np)
    ref = ex.reference(a, packed, scales, zeros, group, rounded=False)
    out = ex.run(a, packed, scales, zeros, group, BM=16, BN=64, BK=32, split=split, fold_zeros=True)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, tiles", [(1, 192, 512, dict(BM=16, BN=64, BK=64, split=3)),
                                            (20, 130, 200, dict(BM=16, BN=128, BK=32)),
                                            (70, 96, 256, dict(BM=64, BN=32, BK=64))])
def test_tiled_weights_match_the_dequantised_product(backend, m, n, k, tiles, monkeypatch):
    """``tiled``: the weights reordered by ``tile_weights`` into contiguous BK x BN tiles (ragged
    edges padded with zeros) give the product of the row-major ones."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    group = 64 if k % 64 == 0 else 8
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), group)
    ref = ex.reference(a, packed, scales, zeros, group, rounded=tiles["BM"] >= 64)
    out = ex.run(a, packed, scales, zeros, group, tiled=True, **tiles).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())


def test_tile_weights_puts_each_tile_in_one_run():
    packed = np.arange(40 * 6, dtype=np.uint32).astype(np.uint8).reshape(40, 6)      # K 40, N 12
    tiled = ex.tile_weights(packed, 16, 8)                                          # 3 x 2 tiles of 16 x 4 bytes
    assert tiled.shape == (3, 2, 16, 4) and tiled.flags.c_contiguous
    np.testing.assert_array_equal(tiled[1, 0], packed[16:32, 0:4])
    np.testing.assert_array_equal(tiled[2, 1, :8, :2], packed[32:40, 4:6])
    assert not tiled[2, 1, 8:].any() and not tiled[2, 1, :, 2:].any()           # past the edges: zeros


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, group, split", [(1, 192, 512, 64, 4), (16, 64, 448, 32, 3), (5, 130, 256, 128, 8)])
def test_split_k_matches_the_dequantised_product(backend, m, n, k, group, split, monkeypatch):
    """Decode shapes with K cut into slices (the last one short or empty of whole groups): each
    slice's float32 product in its layer, the last slice of a block to count sums them."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k + split)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), group)
    ref = ex.reference(a, packed, scales, zeros, group, rounded=False)      # BM 16: the scales after the products
    out = ex.run(a, packed, scales, zeros, group, BM=16, BN=64, BK=32, split=split).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
    assert ex.k_slice(k, split, 32) % 32 == 0 and tj.cdiv(k, ex.k_slice(k, split, 32)) <= split


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_split_k_is_one_launch_that_leaves_its_counts_at_zero_and_its_bits_fixed(backend, monkeypatch):
    """The same buffers serve a second launch (the counts are back at zero), the output is
    written by the launch alone (poisoned before), and its bits are the same every time and on
    every backend: the last slice sums the layers in slice order whoever counts last (the
    interpreter runs programs one after another, the emulator a batch in step)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    m, n, k, group, split, BM, BN, BK = 3, 192, 1024, 64, 8, 16, 64, 64
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), group)
    part, count = ex.workspace(m, n, split, BM, BN)
    outs = []
    for _ in range(2):
        c = np.full((m, n), np.nan, tj.bfloat16.np)
        ex.w4a16_matmul_kernel[(1, n // BN, split)](a, packed, scales, zeros, c, part, count, BM=BM, BN=BN, BK=BK,
                                                    GROUP=group, K_SLICE=k // split)
        assert not count.any()
        outs.append(c.view(np.uint16).copy())
    np.testing.assert_array_equal(outs[0], outs[1])
    want = sum(part[i].astype(np.float64) for i in range(split))        # the layers' own sum, in order
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2**-8)
    ref = ex.reference(a, packed, scales, zeros, group, rounded=False)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())


def test_the_split_k_kernel_assembles_without_spills():
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    u8 = ArraySpec(tj.uint8, 2, True, True, False)
    spaces = (ArraySpec(tj.float32, 3, True, True, False), ArraySpec(tj.int32, 1, True, True, False))
    tile = ex.w4a16_matmul_kernel.tile_ir((bf16, u8, bf16, bf16, bf16) + spaces,
                                          {"BM": 16, "BN": 64, "BK": 128, "GROUP": 128, "K_SLICE": 1024})
    fn = compile_to_simt(tile, num_warps=4, target="sm_90a")
    atomics = [o for o in fn.walk() if o.op is SimtOp.ATOMIC_GLOBAL]
    assert len(atomics) == 1 and atomics[0].attrs.sem == "acq_rel"
    assert not [o for o in fn.walk() if o.op is SimtOp.ATOMIC_GLOBAL and o.result.type.dtype == tj.float32]
    assert assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a").spills == 0


def test_quantize_round_trips_within_half_a_step():
    w = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    packed, scales, zeros = ex.quantize(w, 32)
    assert packed.dtype == np.uint8 and packed.shape == (128, 32) and scales.shape == (4, 64)
    err = np.abs(ex.dequantize(packed, scales, zeros, 32) - w)
    assert (err <= 0.51 * np.repeat(scales.astype(np.float64), 32, axis=0) + 0.02 * np.abs(w)).all()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_weights_are_dequantised_in_registers_and_the_ptx_assembles(target):
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    u8 = ArraySpec(tj.uint8, 2, True, True, False)
    tile = ex.w4a16_matmul_kernel.tile_ir((bf16, u8, bf16, bf16, bf16, NONE, NONE), {"BM": 64, "BN": 64, "BK": 64, "GROUP": 64})
    fn = compile_to_simt(tile, num_warps=4, target=target)
    # only C is written: by the threads on sm_80, by one TMA box copy on sm_90a (plan_stores)
    writes = [o.op for o in fn.walk() if o.op in (SimtOp.STORE_GLOBAL, SimtOp.TMA_STORE)]
    assert writes == [SimtOp.TMA_STORE if target == "sm_90a" and plan_stores.TMA_STORES else SimtOp.STORE_GLOBAL]
    packed = [o for o in fn.walk() if o.op is SimtOp.LOAD_GLOBAL and o.result.type.dtype == tj.uint8]
    # 64 rows a block: B staged in shared memory (nibble_operands takes decode-shaped DOTs only)
    assert packed and all(o.attrs.vec == 16 for o in packed)     # n // 2 keeps 16-byte vectors
    ptx = codegen.compile_ptx(fn, target)
    # 64 rows a block: wgmma on sm_90a, B (the dequantised weights) stored into its atoms (wgmma.COMPUTED_B)
    assert ("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" if target == "sm_90a"
            else "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") in ptx
    assert assemble_or_skip(ptx, target).spills == 0


def test_a_k_tile_across_groups_is_refused():
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    u8 = ArraySpec(tj.uint8, 2, True, True, False)
    with pytest.raises(tj.CompileError, match="inside one quantisation group"):
        ex.w4a16_matmul_kernel.tile_ir((bf16, u8, bf16, bf16, bf16, NONE, NONE), {"BM": 64, "BN": 64, "BK": 64, "GROUP": 32})


@given(m=st.integers(1, 130), n_blocks=st.integers(1, 5), k_tiles=st.integers(1, 7), split=st.integers(1, 4),
       tiles=st.sampled_from([(16, 64, 128), (64, 64, 64), (64, 128, 128), (64, 64, 128), (64, 128, 64)]),
       seed=st.integers(0, 2**16))
def test_any_tiling_and_split_matches_the_dequantised_product_on_the_emulator(m, n_blocks, k_tiles, split, tiles, seed):
    """The example on the emulator across ragged shapes, tilings and splits: 64-row blocks take
    wgmma with the dequantised B stored into two buffers and a group in flight, their packed
    weights, scales and zeros loaded an iteration ahead (odd and even trip counts, a slice of one
    K tile, a last slice short); 16-row blocks take mma.sync and scale after the products."""
    bm, bn, bk = tiles
    n, k = 64 * n_blocks, bk * k_tiles
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), 128 if bk == 128 else 64)
    group = 128 if bk == 128 else 64
    with mock.patch.dict(os.environ, {"TILEJIT_BACKEND": "emulate"}):
        out = ex.run(a, packed, scales, zeros, group, BM=bm, BN=bn, BK=bk, split=split).astype(np.float64)
    ref = ex.reference(a, packed, scales, zeros, group, rounded=bm >= 64)
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, tiles, split", [(70, 256, 640, (64, 128, 64), 2), (64, 128, 384, (64, 128, 128), 1),
                                                   (33, 192, 320, (64, 64, 64), 1)])
def test_packed_weights_of_a_computed_wgmma_b_ride_a_ring(backend, m, n, k, tiles, split, monkeypatch):
    """With ``plan_loops.COMPUTED_B_RINGS`` the 64-row loop's packed weights are copied several K
    tiles ahead into thread-private cp.async slots (not carried one tile ahead in registers), the
    slots counted in the shared-memory fit; the product still matches on odd trip counts, a ragged
    M, N past the tiles and a split whose last slice is short."""
    from tilejit.passes import plan_loops
    monkeypatch.setattr(plan_loops, "COMPUTED_B_RINGS", True)
    bm, bn, bk = tiles
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    u8 = ArraySpec(tj.uint8, 4, True, True, False)
    f32 = ArraySpec(tj.float32, 3, True, True, False)
    i32 = ArraySpec(tj.int32, 1, True, True, False)
    consts = {"BM": bm, "BN": bn, "BK": bk, "GROUP": bk, "K_SLICE": 2 * bk, "TILED": True}
    texts = {}
    compile_to_simt(ex.w4a16_matmul_kernel.tile_ir((bf16, u8, bf16, bf16, bf16, f32, i32), consts), num_warps=4,
                    target="sm_90a", dump=texts.__setitem__)
    plan = texts["plan_loops"]
    assert "engine=cp.async" in plan and "thread-private" in plan and "row ring" in plan
    loop = next(line for line in texts["prefetch_loads"].splitlines() if " = for " in line)
    assert "xuint8>" not in loop.partition(" : ")[2]          # not carried in registers
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, scales, zeros = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), bk)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    out = ex.run(a, packed, scales, zeros, bk, BM=bm, BN=bn, BK=bk, split=split, tiled=True).astype(np.float64)
    ref = ex.reference(a, packed, scales, zeros, bk, rounded=True)
    np.testing.assert_allclose(out, ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
