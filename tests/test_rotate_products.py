"""``rotate_products``: a pipelined wgmma loop whose one DOT starts from zeros and whose product is
worked on in the same iteration computes the next iteration's product first, so that product's
wgmma group stays in flight while this one's is scaled in.  IR in and out (the product carried,
its operands cloned before the loop and at ``k + step``), the loops it must leave alone, the plan
and SIMT it leads to (one group in flight, ``wait_group 1``), the same schedule as the spelling a
user rotates by hand, and the products on the emulator (and the GPU) across ragged shapes."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.examples import attention, fp8_blockwise_gemm as fp8
from tilejit.ir import TileOp
from tilejit.passes import rotate_products as R
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

from conftest import pipeline_until

E4 = ArraySpec(tj.float8e4m3, 2, True, True, False)
F32 = ArraySpec(tj.float32, 2, True, True, False)
BF16 = ArraySpec(tj.bfloat16, 2, True, True, False)
FP8_SPECS = (E4, F32, E4, F32, BF16)
FP8_CONSTS = {"BM": 128, "BN": 128, "BK": 128, "B_NK": True}


@tj.kernel
def scaled(a, b, c, s, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """Each K tile's product scaled by ``s`` before it joins the accumulator."""
    m = tj.program_id(0) * BM
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.fma(tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN))), s, acc)
    tj.store(c, (m, 0), acc)


@tj.kernel
def rotated_by_hand(a, b, c, s, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    acc = tj.zeros((BM, BN), tj.float32)
    p = tj.dot(tj.load(a, (m, 0), (BM, BK)), tj.load(b, (0, 0), (BK, BN)))
    for k in range(0, a.shape[1], BK):
        p_next = tj.dot(tj.load(a, (m, k + BK), (BM, BK)), tj.load(b, (k + BK, 0), (BK, BN)))
        acc = tj.fma(p, s, acc)
        p = p_next
    tj.store(c, (m, 0), acc)


@tj.kernel
def stores_in_the_loop(a, b, c, s, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.fma(tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN))), s, acc)
        tj.store(c, (0, 0), acc)


SCALED_SPECS = (BF16, BF16, F32, ScalarSpec(tj.float32))
SCALED_CONSTS = {"BM": 128, "BN": 128, "BK": 64}


def loops(fn):
    return [o for o in fn.walk() if o.op is TileOp.FOR]


def test_the_product_is_carried_and_the_next_one_computed_in_the_body(monkeypatch):
    monkeypatch.setattr(R, "ROTATE", True)
    fn = pipeline_until(scaled, SCALED_SPECS, SCALED_CONSTS, "rotate_products", num_warps=8)
    [loop] = loops(fn)
    body = loop.regions[0]
    iv, start, step = body.args[0], loop.operands[0], loop.operands[2]
    before = [o for o in fn.body.ops if o.op is TileOp.DOT]
    [inside] = [o for o in body.walk() if o.op is TileOp.DOT]
    assert len(before) == 1 and loop.operands[-1] is before[0].result            # the first product
    assert body.ops[-1].operands[-1] is inside.result                            # the next one, yielded
    product = body.args[-1]
    [fma] = [o for o in body.ops if o.op is TileOp.FMA]
    assert fma.operands[0] is product                                             # this trip's, carried
    # the DOT's loads read the tile at k + step, the first product's at start
    loads = [o.owner for o in inside.operands[:2]]
    assert all(x.op is TileOp.LOAD for x in loads)
    k_next = loads[0].operands[2].owner
    assert k_next.op is TileOp.ADD and k_next.operands == [iv, step]
    assert before[0].operands[0].owner.operands[2] is start
    assert body.ops.index(inside) < body.ops.index(fma)                          # issued before the scaling


def test_the_plan_keeps_a_group_in_flight_and_the_loop_waits_for_one(monkeypatch):
    for on, in_flight, waits in ((False, 0, [0]), (True, 1, [1, 0])):
        monkeypatch.setattr(R, "ROTATE", on)
        texts = {}
        fn = compile_to_simt(fp8.fp8_blockwise_matmul_kernel.tile_ir(FP8_SPECS, FP8_CONSTS), 8, "sm_90a",
                             dump=texts.__setitem__)
        assert f"wgmma_in_flight={in_flight}" in texts["plan_loops"]
        assert [o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT] == waits
        if on:
            [loop] = [o for o in fn.walk() if o.op is SimtOp.FOR and o.attrs and o.attrs.unroll]
            assert loop                                   # unrolled by two: the products alternate registers


def test_the_compiler_gives_the_plain_spelling_the_hand_rotated_schedule(monkeypatch):
    monkeypatch.setattr(R, "ROTATE", True)
    plans = []
    for kernel in (scaled, rotated_by_hand):
        texts = {}
        fn = compile_to_simt(kernel.tile_ir(SCALED_SPECS, SCALED_CONSTS), 8, "sm_90a", dump=texts.__setitem__)
        plans.append([line.split(": ", 1)[1] for line in texts["plan_loops"].splitlines() if line.startswith("#   for")])
        plans[-1].append(sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT))
        plans[-1].append(sum(o.op is SimtOp.WGMMA for o in fn.walk()))
    assert plans[0] == plans[1]


@pytest.mark.parametrize("case", ["hand-rotated", "carried acc", "stores", "attention", "off sm_90a", "switch off"])
def test_loops_it_leaves_alone(case, monkeypatch):
    """A product the loop already carries (the hand-rotated spelling), an accumulating DOT (a
    plain GEMM), a loop that stores, attention's two chained DOTs, mma.sync targets, the switch."""
    from tilejit.examples import matmul
    monkeypatch.setattr(R, "ROTATE", case != "switch off")
    kernel, specs, consts = {
        "hand-rotated": (rotated_by_hand, SCALED_SPECS, SCALED_CONSTS),
        "carried acc": (matmul.matmul_kernel.kernel, (BF16, BF16, BF16), {"BM": 128, "BN": 128, "BK": 64}),
        "stores": (stores_in_the_loop, SCALED_SPECS, SCALED_CONSTS),
        "attention": (attention.attention_kernel, (ArraySpec(tj.bfloat16, 4, True, True, False),) * 4
                      + (ScalarSpec(tj.float32),), {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": False}),
    }.get(case, (scaled, SCALED_SPECS, SCALED_CONSTS))
    target = "sm_80" if case == "off sm_90a" else "sm_90a"
    fn = pipeline_until(kernel, specs, consts, "swap_small_dots", 8, target)

    def shape(f):
        return sum(o.op is TileOp.DOT for o in f.walk()), [len(loop.operands) for loop in loops(f)]
    was = shape(fn)
    assert shape(R.rotate_products(fn, 8, target)) == was


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k", [(200, 256, 384), (128, 128, 128), (130, 384, 256)])
def test_the_rotated_fp8_blockwise_gemm_matches_float64(backend, m, n, k, monkeypatch):
    """Ragged M and N, one K block (the next product entirely past the end) and several."""
    monkeypatch.setattr(R, "ROTATE", True)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + n + k)
    a8, sa = fp8.quantize_rows(rng.standard_normal((m, k)).astype(np.float32))
    b8, sb = fp8.quantize_blocks(rng.standard_normal((k, n)).astype(np.float32))
    c = fp8.run_nk(a8, sa, np.ascontiguousarray(b8.T), np.ascontiguousarray(sb.T)).astype(np.float64)
    ref = fp8.reference(a8, sa, b8, sb)
    np.testing.assert_allclose(c, ref, rtol=2**-7, atol=2e-3 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("k", [64, 200, 320])
def test_a_ragged_k_reads_zeros_past_the_end(backend, k, monkeypatch):
    """K not a multiple of BK: the last tile and the product past the end read zeros."""
    monkeypatch.setattr(R, "ROTATE", True)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(k)
    a = rng.standard_normal((256, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, 128)).astype(tj.bfloat16.np)
    c = np.full((256, 128), np.nan, np.float32)
    scaled[(2,)](a, b, c, 0.5, BM=128, BN=128, BK=64, num_warps=8)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
