"""tj.dot_scaled and the block-scaled fp8 example: ``acc + (a @ b) * a_scale * b_scale`` with the
scales broadcast to (M, 1) and (1, N), against float64 on every backend; the example's 1x128 and
128x128 scales against the dequantised product; its PTX on sm_90a; the errors."""
from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import codegen
from tilejit.examples import fp8_blockwise_gemm as ex
from tilejit.passes.pipeline import compile_to_simt
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, compile_source

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def scaled(a, sa, b, sb, c, M: tj.constexpr, N: tj.constexpr, K: tj.constexpr, SHAPE: tj.constexpr):
    x = tj.load(a, (0, 0), (M, K))
    y = tj.load(b, (0, 0), (K, N))
    if SHAPE == "tiles":
        out = tj.dot_scaled(x, tj.load(sa, (0, 0), (M, 1)), y, tj.load(sb, (0, 0), (1, N)),
                            tj.zeros((M, N), tj.float32) + 1.0)
    else:                                       # a 1-D row of column scales and a number
        out = tj.dot_scaled(x, 0.5, y, tj.load(sb, (0, 0), (1, N)).reshape((N,)))
    tj.store(c, (0, 0), out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["tiles", "vector"])
@pytest.mark.parametrize("dtype", [tj.float8e4m3, tj.bfloat16])
def test_dot_scaled_is_the_scaled_product_plus_acc(backend, shape, dtype, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (32, 64)).astype(dtype.np)           # small integers: exact products
    b = rng.integers(-4, 5, (64, 32)).astype(dtype.np)
    sa = (rng.random((32, 1)) + 0.5).astype(np.float32)
    sb = (rng.random((1, 32)) + 0.5).astype(np.float32)
    c = np.full((32, 32), np.nan, np.float32)
    scaled[(1,)](a, sa, b, sb, c, M=32, N=32, K=64, SHAPE=shape)
    prod = a.astype(np.float64) @ b.astype(np.float64)
    want = prod * sa * sb + 1.0 if shape == "tiles" else prod * 0.5 * sb
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)


def assert_fp8_close(out, a, sa, b, sb):
    """Within one bfloat16 rounding of the float64 product, plus 2**-12 of the sum of the terms'
    magnitudes: Hopper's fp8 ``wgmma`` adds its products with fewer bits than float32 (about 14
    bits relative to the largest partial sum, DeepGEMM's reason to promote every 128 of K), and
    the rowwise fp8 GEMM shares it."""
    ref = ex.reference(a, sa, b, sb)
    size = ex.reference(np.abs(a.astype(np.float64)), sa, np.abs(b.astype(np.float64)), sb)
    np.testing.assert_array_less(np.abs(out - ref), 2**-7 * np.abs(ref) + 2**-12 * size)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m, n, k, tiles", [(200, 256, 384, {}), (64, 128, 128, {"BN": 128, "BK": 128}),
                                            (33, 384, 256, {"BM": 32, "BK": 32}),
                                            (40, 384, 128, {"BM": 16, "BN": 256, "BK": 64})])
def test_block_scaled_fp8_matches_the_dequantised_product(backend, m, n, k, tiles, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k)
    a, sa = ex.quantize_rows(rng.standard_normal((m, k)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((k, n)).astype(np.float32))
    assert_fp8_close(ex.run(a, sa, b, sb, **tiles).astype(np.float64), a, sa, b, sb)


def test_a_tile_across_scale_blocks_is_refused():
    f8, f32 = ArraySpec(tj.float8e4m3, 2), ArraySpec(tj.float32, 2)
    with pytest.raises(tj.CompileError, match="BK must divide the 128-wide scale blocks"):
        ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(tj.bfloat16, 2)),
                                               {"BM": 64, "BN": 64, "BK": 256})


def test_the_quantisers_keep_each_block_within_e4m3():
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32) * 100
    q, s = ex.quantize_blocks(x)
    assert q.dtype == tj.float8e4m3.np and s.shape == (1, 2)
    assert np.abs(q.astype(np.float32)).max() <= ex.E4M3_MAX
    back = q.astype(np.float64) * np.repeat(np.repeat(s, 128, 0), 128, 1)
    assert np.abs(back - x).max() <= 2**-3 * np.abs(x).max()


def test_the_example_assembles_on_sm_90a_with_fp8_tensor_cores():
    f8 = ArraySpec(tj.float8e4m3, 2, True, True, False)
    f32 = ArraySpec(tj.float32, 2, True, True, False)
    tile = ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(tj.bfloat16, 2, True, True, False)),
                                                  {"BM": 64, "BN": 64, "BK": 64})
    ptx = codegen.compile_ptx(compile_to_simt(tile, num_warps=4, target="sm_90a"), "sm_90a")
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in ptx
    assert assemble_or_skip(ptx, "sm_90a").spills == 0


@pytest.mark.parametrize("call, message", [
    ("tj.dot_scaled(x, 1.0, x.to(tj.int8), 1.0)", "dtypes differ"),
    ("tj.dot_scaled(x.to(tj.int8), 1.0, x.to(tj.int8), 1.0)", "must be floating point"),
    ("tj.dot_scaled(x, tj.zeros((8,), tj.float32), x, 1.0)", "a_scale must be a number or a float tile that broadcasts to \\(4, 1\\)"),
    ("tj.dot_scaled(x, 1.0, x, x > 0)", "b_scale must be"),
    ("tj.dot_scaled(x, 1.0, x, 1.0, tj.zeros((4, 4), tj.float16))", "acc must be"),
])
def test_bad_dot_scaled_calls_are_errors_at_the_users_line(call, message):
    src = f"def k(a, c, B: tj.constexpr):\n    x = tj.load(a, (0, 0), (B, B))\n    tj.store(c, (0, 0), {call})\n"
    with pytest.raises(tj.CompileError, match=message) as err:
        compile_source(src, [ArraySpec(tj.bfloat16, 2), ArraySpec(tj.float32, 2)], {"B": 4}, "scaled_kernel.py")
    assert err.value.loc.line == 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m, n, k, tiles", [(200, 256, 384, {"BM": 64, "BN": 128, "BK": 128, "num_warps": 4}),
                                            (130, 384, 256, {}), (64, 128, 128, {"BK": 64}),
                                            (24, 384, 128, {"BM": 16, "BN": 256, "BK": 64, "num_warps": 4})])
def test_block_scaled_fp8_with_weights_stored_n_by_k(backend, m, n, k, tiles, monkeypatch):
    """``B_NK`` (``run_nk``): B stored (N, K) with (N/128, K/128) scales, read transposed."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k + 1)
    a, sa = ex.quantize_rows(rng.standard_normal((m, k)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((k, n)).astype(np.float32))
    out = ex.run_nk(a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T), **tiles).astype(np.float64)
    assert_fp8_close(out, a, sa, b, sb)


def test_weights_stored_n_by_k_take_fp8_wgmma_from_tma_rings_without_spills():
    from tilejit.simt import SimtOp
    a8 = np.zeros((1024, 1024), tj.float8e4m3.np)
    args = (a8, np.zeros((1024, 8), np.float32), a8, np.zeros((8, 8), np.float32), np.zeros((1024, 1024), tj.bfloat16.np))
    kernel = ex.fp8_blockwise_matmul_kernel
    specs, consts, _ = kernel.specialise(kernel.bind(args, {"BM": 128, "BN": 128, "BK": 128, "B_NK": True}))
    fn = compile_to_simt(kernel.tile_ir(specs, consts), num_warps=8, target="sm_90a")
    kinds = [o.op for o in fn.walk()]
    assert SimtOp.WGMMA in kinds and SimtOp.TMA_LOAD in kinds and SimtOp.MMA not in kinds
    assert assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a").spills == 0


@pytest.mark.parametrize("ws", [False, True])
def test_the_scales_are_loaded_where_the_accumulator_needs_them(ws):
    """A row's scale times the block's scale is loaded straight into the rows of the wgmma
    accumulator each thread holds: the K loop moves nothing through shared memory but the
    operands, and waits on no CTA barrier but the ring's (with a producer warpgroup none: the
    consumer warpgroups' turns, ``specialise_warps.PINGPONG_PROMOTION``, are named barriers)."""
    from tilejit.simt import SimtOp
    f8, f32 = ArraySpec(tj.float8e4m3, 2, True, True, False), ArraySpec(tj.float32, 2, True, True, False)
    tile = ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(tj.bfloat16, 2, True, True, False)),
                                                  {"BM": 128, "BN": 128, "BK": 128, "B_NK": True})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", warp_specialize=ws)
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    ops = [o.op for o in loop.regions[0].walk()]
    assert SimtOp.STORE_SHARED not in ops and SimtOp.LOAD_SHARED not in ops
    assert sum(o.op is SimtOp.BARRIER and not o.operands for o in loop.regions[0].walk()) == (0 if ws else 1)
    assert ops.count(SimtOp.BARRIER) == ops.count(SimtOp.BARRIER_ARRIVE) + (0 if ws else 1)


@pytest.mark.parametrize("bm, warps, producer", [(128, 8, 4), (64, 4, 0)])
def test_the_block_scaled_loop_gets_four_slots_and_a_producer_for_two_consumer_warpgroups(bm, warps, producer):
    """One wgmma DOT whose product is scaled in the loop: a ring of 4 slots (copies 3 ahead, the
    group waited for in each iteration) and, with two consumer warpgroups, a producer warpgroup
    (measured +8-9% on the H200; one consumer warpgroup is slower with it)."""
    f8, f32 = ArraySpec(tj.float8e4m3, 2, True, True, False), ArraySpec(tj.float32, 2, True, True, False)
    tile = ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(tj.bfloat16, 2, True, True, False)),
                                                  {"BM": bm, "BN": 128, "BK": 128, "B_NK": True})
    fn = compile_to_simt(tile, num_warps=warps, target="sm_90a")
    loop, = fn.meta.tma_loops
    assert (loop.stages, loop.in_flight, fn.meta.producer_warps) == (4, 0, producer)


@tj.kernel
def triton_spelled(a, a_scale, b, b_scale, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """The block-scaled GEMM as a Triton user writes it: no dot_scaled, ``+=``, ``.T``."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        a_s = tj.load(a_scale, (m, k // 128), (BM, 1))
        b_s = tj.load(b_scale, (n // 128, k // 128), (1, 1))
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (n, k), (BN, BK)).T) * a_s * b_s
    tj.store(c, (m, n), acc.to(c.dtype))


def test_the_triton_spelling_reaches_the_same_schedule():
    """Scales multiplied in by hand take the same path: loaded ahead into the accumulator's rows
    (nothing through shared memory in the loop), 4 slots, a producer warpgroup."""
    from tilejit.simt import SimtOp
    f8, f32 = ArraySpec(tj.float8e4m3, 2, True, True, False), ArraySpec(tj.float32, 2, True, True, False)
    tile = triton_spelled.tile_ir((f8, f32, f8, f32, ArraySpec(tj.bfloat16, 2, True, True, False)),
                                  {"BM": 128, "BN": 128, "BK": 128})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    loop, = fn.meta.tma_loops
    assert (loop.stages, fn.meta.producer_warps) == (4, 4)
    body = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    ops = [o.op for o in body.regions[0].walk()]
    assert SimtOp.STORE_SHARED not in ops and SimtOp.LOAD_SHARED not in ops
    assert not any(o.op is SimtOp.BARRIER and not o.operands for o in body.regions[0].walk())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_triton_spelling_matches_the_dequantised_product(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(11)
    a, sa = ex.quantize_rows(rng.standard_normal((128, 256)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((256, 128)).astype(np.float32))
    c = np.empty((128, 128), tj.bfloat16.np)
    triton_spelled[(1, 1)](a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T), c, BM=128, BN=128, BK=128,
                           num_warps=8)
    assert_fp8_close(c.astype(np.float64), a, sa, b, sb)


@given(m=st.integers(1, 300), n_blocks=st.integers(1, 3), k_blocks=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_the_warp_specialised_block_scaled_gemm_matches_on_the_emulator(m, n_blocks, k_blocks, seed):
    """``run_nk`` at 128x128x128, 8 warps on the emulator: a producer warpgroup and two consumer
    warpgroups taking turns (``specialise_warps.PINGPONG_PROMOTION``), over ragged M and one to
    five K blocks (trip counts below, at and above the ring's slots)."""
    n, k = 128 * n_blocks, 128 * k_blocks
    rng = np.random.default_rng(seed)
    a, sa = ex.quantize_rows(rng.standard_normal((m, k)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((k, n)).astype(np.float32))
    with mock.patch.dict(os.environ, {"TILEJIT_BACKEND": "emulate"}):
        out = ex.run_nk(a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T)).astype(np.float64)
    assert_fp8_close(out, a, sa, b, sb)
