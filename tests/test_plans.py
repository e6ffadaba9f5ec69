"""The loop plans (``passes.plan_loops``): decided once before lowering, typed, printed with the
IR, and what the lowering then emits."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit.ir import TileOp
from tilejit.passes.pipeline import compile_to_simt
from tilejit.passes.plans import LoopPlan, SharedTile
from tilejit.simt import SimtOp

from examples.attention import attention_kernel
from examples.matmul import matmul_kernel


def bf16(*shape):
    return np.zeros(shape, tj.bfloat16.np)


def planned(kernel, args, consts, warps, target="sm_90a", tma=True):
    """(the plans of every FOR loop in program order, the SIMT function, the plan dump)."""
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    tile_fn = kernel.tile_ir(specs, consts)
    seen = {}
    simt_fn = compile_to_simt(tile_fn, warps, target, dump=seen.__setitem__, tma=tma)
    return seen["plan_loops"], simt_fn


def plans_of(kernel, args, consts, warps, target="sm_90a") -> list[LoopPlan]:
    from tilejit.passes import pipeline
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    fn = pipeline.clone_function(kernel.tile_ir(specs, consts))
    opts = pipeline.Options(warps, target)
    for stage in pipeline.PIPELINE:
        fn = stage.run(fn, opts)
        if stage.name == "plan_loops":
            return [fn.meta["loop_plans"][o] for o in fn.walk() if o.op is TileOp.FOR]
    raise AssertionError("no plan_loops stage")


GEMM = (bf16(512, 512), bf16(512, 512), np.zeros((512, 512), np.float32))


@pytest.mark.parametrize("stages,in_flight", [(2, 0), (3, 1), (4, 1)])
def test_a_hopper_gemm_loop_rings_a_and_b_in_wgmma_layouts(stages, in_flight):
    [plan] = plans_of(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": stages}, 8)
    assert plan.pipelined and plan.stages == stages and plan.staged_before == ()
    assert [(r.tile, r.wgmma) for r in plan.rings] == [(SharedTile.A, True), (SharedTile.B_ATOMS, True)]
    assert plan.wgmma_in_flight == in_flight and plan.ahead == stages - 1 - in_flight
    assert {r.load.op for r in plan.rings} == {TileOp.LOAD} and plan.replaced >= {r.load for r in plan.rings}


def test_the_lowering_emits_what_the_plan_says():
    text, fn = planned(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4}, 8, tma=False)
    waits = [o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT]
    assert 1 in waits                                   # one group left in flight in the loop
    cp_waits = [o.attrs.n for o in fn.walk() if o.op is SimtOp.CP_ASYNC_WAIT]
    assert 4 - 1 - 1 - 1 in cp_waits                    # wait_group(ahead - 1)
    assert "ring: " in text and "as A (wgmma)" in text and "as B_ATOMS (wgmma)" in text
    assert "engine=cp.async" in text and not any(o.op is SimtOp.TMA_LOAD for o in fn.walk())


def test_a_tma_plan_fills_each_slot_with_boxes_on_one_mbarrier():
    """A (128 x 64 bf16: 128-byte rows, one SW128 box) and B (64 x 128: two 64-column atoms,
    one box each); ahead = 4 - 1 - 1 = 2 slots filled before the loop and one per iteration,
    each announced as the slot's 32 KiB on its mbarrier."""
    text, fn = planned(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4}, 8)
    assert "engine=tma" in text
    loads = [o for o in fn.walk() if o.op is SimtOp.TMA_LOAD]
    assert len(loads) == 3 * 3
    assert {(o.attrs.box, o.attrs.swizzle) for o in loads} == {((128, 64), 128), ((64, 64), 128)}
    expect = [o.attrs.n for o in fn.walk() if o.op is SimtOp.MBARRIER_EXPECT_TX]
    assert expect == [2 * (128 * 64 + 64 * 128)] * 3
    kinds = [o.op for o in fn.walk()]
    assert kinds.count(SimtOp.MBARRIER_INIT) == kinds.count(SimtOp.MBARRIER_INVAL) == 4
    assert kinds.count(SimtOp.MBARRIER_WAIT) == 1 and SimtOp.CP_ASYNC_WAIT not in kinds
    assert SimtOp.MMA not in kinds and SimtOp.IF not in kinds    # the spec promises TMA's rules: no twin loop
    maps = [p for p in fn.meta.params if p.kind.value == "tensor_map"]
    assert [(p.arg, p.box, p.swizzle) for p in maps] == [(0, (128, 64), 128), (1, (64, 64), 128)]


def test_on_sm80_the_rings_keep_ldmatrix_layouts():
    [plan] = plans_of(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, 8, "sm_80")
    assert [(r.tile, r.wgmma) for r in plan.rings] == [(SharedTile.A, False), (SharedTile.B, False)]
    assert plan.wgmma_in_flight == 0 and plan.ahead == 2


ATTENTION = (bf16(1, 2, 256, 64),) * 4 + (0.125,)


def test_attention_stages_q_before_the_loop_and_rings_k_and_v():
    [plan] = plans_of(attention_kernel, ATTENTION, {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": False}, 4)
    [q] = plan.staged_before
    assert q.tile is SharedTile.A and q.align == 1024 and q.dot.op is TileOp.DOT
    assert [r.tile for r in plan.rings] == [SharedTile.B_NK, SharedTile.B_ATOMS]
    assert plan.wgmma_in_flight == 0                   # the scores are read in the iteration


def test_attention_with_128_wide_heads_uses_atoms_for_q_and_k():
    args = (bf16(1, 2, 256, 128),) * 4 + (0.125,)
    [plan] = plans_of(attention_kernel, args, {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": True}, 8)
    assert plan.staged_before[0].tile is SharedTile.A_ATOMS
    assert [r.tile for r in plan.rings] == [SharedTile.B_NK_ATOMS, SharedTile.B_ATOMS]


@tj.kernel
def plain_loop_gemm(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):                  # as Triton's tutorial writes it
        acc = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)), acc)
    tj.store(c, (0, 0), acc)


@tj.kernel
def unpipelined_gemm(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=1):     # stages=1: pipelining off
        acc = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)), acc)
    tj.store(c, (0, 0), acc)


def test_a_plain_range_loop_is_pipelined_by_default():
    """The depth the compiler picks: a wgmma GEMM keeps a group in flight with 4 slots, as the
    tuned example does (STAGES=4); mma.sync keeps DEFAULT_STAGES."""
    from tilejit.passes.mma_tiling import DEFAULT_STAGES
    [plan] = plans_of(plain_loop_gemm, GEMM, {"BM": 64, "BN": 64, "BK": 32}, 4)
    assert plan.pipelined and plan.stages == 4 and plan.wgmma_in_flight == 1 and len(plan.rings) == 2
    [plan] = plans_of(plain_loop_gemm, GEMM, {"BM": 64, "BN": 64, "BK": 32}, 4, "sm_80")
    assert plan.pipelined and plan.stages == DEFAULT_STAGES
    assert [r.tile for r in plan.rings] == [SharedTile.A, SharedTile.B]


def test_the_plain_spellings_get_the_tuned_examples_plans():
    """The plans the benchmarks measured fastest (benchmarks/README, 2026-12-03): the plain GEMM
    gets the STAGES=4 example's plan, the plain attention the tj.range(stages=2) example's."""
    def shape(plan):
        return plan.stages, plan.ahead, plan.wgmma_in_flight, [(r.tile, r.wgmma) for r in plan.rings]
    big = bf16(1024, 1024), bf16(1024, 1024), np.zeros((1024, 1024), np.float32)
    consts = {"BM": 128, "BN": 256, "BK": 64}
    [tuned] = plans_of(matmul_kernel, big, {**consts, "STAGES": 4}, 8)
    [plain] = plans_of(plain_loop_gemm, big, consts, 8)
    assert shape(plain) == shape(tuned)
    for d, bm, bn, warps in ((64, 64, 128, 4), (128, 128, 128, 8)):
        q = bf16(256, d)
        [tuned] = plans_of(attention_kernel, (bf16(1, 2, 256, d),) * 4 + (0.1,),
                           {"BM": bm, "BN": bn, "BD": d, "CAUSAL": False}, warps)
        [plain] = plans_of(attention_as_triton_writes_it, (q, q, q, q, 0.1), {"BM": bm, "BN": bn, "BD": d}, warps)
        assert shape(plain) == shape(tuned), d


def test_stages_1_turns_pipelining_off():
    [plan] = plans_of(unpipelined_gemm, GEMM, {"BM": 64, "BN": 64, "BK": 32}, 4)
    assert not plan.pipelined and plan.rings == () and plan.ahead == 0
    assert plan.describe(str)[0].startswith("stages=1 pipelined=False")


def test_shared_tile_properties():
    assert {t for t in SharedTile if t.atoms} == {SharedTile.A_ATOMS, SharedTile.B_ATOMS, SharedTile.B_NK_ATOMS,
                                                   SharedTile.A_MN_ATOMS}
    assert [t for t in SharedTile if t.ldmatrix.atoms] == [SharedTile.A_MN_ATOMS]     # (no ldmatrix form)
    assert {t for t in SharedTile if t.wgmma_a} == {SharedTile.A, SharedTile.A_ATOMS, SharedTile.A_MN_ATOMS}
    assert {t for t in SharedTile if t.wgmma_b} == {SharedTile.B_ATOMS, SharedTile.B_NK, SharedTile.B_NK_ATOMS}
    assert {t for t in SharedTile if t.k_major} == {SharedTile.A, SharedTile.A_ATOMS, SharedTile.B_NK,
                                                     SharedTile.B_NK_ATOMS}


def test_num_stages_is_a_launch_option_and_a_config_field_in_the_key(monkeypatch):
    from tilejit.simt import SimtOp
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    a = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float16)
    b = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float16)
    outs = {}
    for stages in (None, 1, 2):
        c = np.zeros((64, 64), np.float32)
        plain_loop_gemm[(1,)](a, b, c, BM=64, BN=64, BK=32, num_stages=stages)
        outs[stages] = c
    entries = list(plain_loop_gemm._cache.values())
    rings = [sum(o.op in (SimtOp.CP_ASYNC, SimtOp.TMA_LOAD) for o in e.artifact.fn.walk()) for e in entries]
    assert len(entries) == 3 and rings[1] == 0 and rings[0] > 0 and rings[2] > 0      # None, 1, 2
    for c in outs.values():
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-2, atol=1e-2)
    with pytest.raises(tj.LaunchError, match="num_stages"):
        plain_loop_gemm[(1,)](a, b, outs[1], BM=64, BN=64, BK=32, num_stages=0)
    assert tj.Config(BM=64, num_stages=2) != tj.Config(BM=64)
    assert "num_stages=2" in tj.Config(BM=64, num_stages=2).label()


@tj.kernel
def attention_as_triton_writes_it(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    start_m = tj.program_id(0) * BM
    qt = tj.load(q, (start_m, 0), (BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    for n0 in range(0, k.shape[0], BN):               # a plain range, k.T: nothing about pipelining
        kt = tj.load(k, (n0, 0), (BN, BD))
        vt = tj.load(v, (n0, 0), (BN, BD))
        s = tj.dot(qt, kt.T) * scale
        s = tj.where((n0 + tj.arange(0, BN))[None, :] < k.shape[0], s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        alpha = tj.exp(m_i - m_new)
        p = tj.exp(s - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tj.store(o, (start_m, 0), (acc / l_i[:, None]).to(o.dtype))


@pytest.mark.parametrize("bm,bn,bd,warps", [(64, 128, 64, 4), (128, 64, 128, 8)])
def test_the_triton_spelling_of_attention_reaches_the_pipelined_wgmma_path(bm, bn, bd, warps, monkeypatch):
    """Spelling independence: the plain-range, ``k.T`` attention gets the rings and wgmma the
    examples' ``tj.range(stages=2)`` spelling gets, and computes the same on emulate."""
    from tilejit.simt import SimtOp
    seq = 200
    rng = np.random.default_rng(7)
    q, k, v = ((rng.standard_normal((seq, bd)) * 0.5).astype(np.float16) for _ in range(3))
    [plan] = plans_of(attention_as_triton_writes_it, (q, k, v, np.zeros_like(q), 0.1),
                      {"BM": bm, "BN": bn, "BD": bd}, warps)
    assert plan.pipelined and all(r.wgmma for r in plan.rings) and len(plan.rings) == 2
    assert [s.tile.wgmma_a for s in plan.staged_before] == [True]
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    o = np.zeros_like(q)
    attention_as_triton_writes_it[(tj.cdiv(seq, bm),)](q, k, v, o, bd ** -0.5, BM=bm, BN=bn, BD=bd, num_warps=warps)
    entry = next(iter(attention_as_triton_writes_it._cache.values()))
    ops = {op.op for op in entry.artifact.fn.walk()}
    assert {SimtOp.WGMMA, SimtOp.TMA_LOAD} <= ops
    s = q.astype(np.float64) @ k.astype(np.float64).T * bd ** -0.5
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64), atol=2e-2)


# ------------------------------------------------------------------------------- DOT plans
def dot_plans_of(kernel, args, consts, warps, target="sm_90a", wgmma=True):
    """The DotPlans of every DOT in program order, and the plan_dots dump."""
    from tilejit.passes import pipeline
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    fn = pipeline.clone_function(kernel.tile_ir(specs, consts))
    opts = pipeline.Options(warps, target, wgmma)
    for stage in pipeline.PIPELINE:
        fn = stage.run(fn, opts)
        if stage.name == "plan_dots":
            return ([fn.meta["dot_plans"][o] for o in fn.walk() if o.op is TileOp.DOT],
                    pipeline.stage_text(fn, stage.level))
    raise AssertionError("no plan_dots stage")


def test_a_hopper_gemm_dot_is_planned_on_wgmma_with_one_row_slice_per_warpgroup():
    from tilejit.passes.plans import DotFamily
    [plan], text = dot_plans_of(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, 8)
    assert plan.family is DotFamily.WGMMA and plan.config.warps == (8, 1)
    assert (plan.config.m, plan.config.n, plan.config.k) == (128, 128, 64)
    assert "# dot plans" in text and "wgmma bf16 m128 n128 k64 warps 8x1 acc float32" in text


@pytest.mark.parametrize("target,wgmma", [("sm_80", True), ("sm_90a", False)])
def test_without_wgmma_the_gemm_dot_is_planned_on_mma_sync(target, wgmma):
    from tilejit.passes.plans import DotFamily
    [plan], text = dot_plans_of(matmul_kernel, GEMM, {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, 8,
                                target, wgmma)
    assert plan.family is DotFamily.MMA_SYNC and plan.config.warps != (8, 1)   # choose_warps' split
    assert "mma.sync bf16 m128 n128 k64" in text


def test_chained_attention_dots_share_rows_per_warp_on_mma_sync_too():
    from tilejit.passes.plans import DotFamily
    plans, _ = dot_plans_of(attention_kernel, ATTENTION, {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": False},
                            4, "sm_80")
    assert [p.family for p in plans] == [DotFamily.MMA_SYNC] * 2
    assert [p.config.warps for p in plans] == [(4, 1), (4, 1)]


@tj.kernel
def float32_dot(a, b, c, BM: tj.constexpr):
    tj.store(c, (0, 0), tj.dot(tj.load(a, (0, 0), (BM, BM)), tj.load(b, (0, 0), (BM, BM))))


def test_a_float32_dot_without_tf32_is_planned_on_fma():
    from tilejit.passes.plans import DotFamily
    x = np.zeros((32, 32), np.float32)
    [plan], text = dot_plans_of(float32_dot, (x, x, x), {"BM": 32}, 4)
    assert plan.family is DotFamily.FMA and plan.config is None and ": fma" in text


@tj.kernel
def gemm_reading_b_twice(a, b, c, s, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    acc = tj.zeros((BM, BN), tj.float32)
    total = tj.zeros((BN,), tj.float32)
    for k in range(0, a.shape[1], BK):
        bt = tj.load(b, (k, 0), (BK, BN))
        acc = tj.dot(tj.load(a, (0, k), (BM, BK)), bt, acc)
        total += tj.sum(bt.to(tj.float32), axis=0)        # B has a second reader: no ring for it
    tj.store(c, (0, 0), acc)
    tj.store(s, (0,), total)


@pytest.mark.parametrize("computed_b", [False, True])
def test_a_dot_is_planned_on_wgmma_only_when_its_loads_get_rings(monkeypatch, computed_b):
    """plan_dots and plan_loops share one rule for which loads are ringed (ring_sources): a B
    tile that something else also reads is not ringed, so its DOT is planned on mma.sync (not
    on wgmma, to be quietly demoted while lowering) -- or, with ``wgmma.COMPUTED_B`` (the
    default), on wgmma with B stored into its atoms each iteration, and the lowering keeps it
    there."""
    from tilejit.passes import wgmma
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.passes.plans import DotFamily
    from tilejit.simt import SimtOp
    monkeypatch.setattr(wgmma, "COMPUTED_B", computed_b)
    args = GEMM + (np.zeros(512, np.float32),)
    consts = {"BM": 64, "BN": 64, "BK": 32}
    [plan], _ = dot_plans_of(gemm_reading_b_twice, args, consts, 4)
    assert plan.family is (DotFamily.WGMMA if computed_b else DotFamily.MMA_SYNC)
    [loop] = plans_of(gemm_reading_b_twice, args, consts, 4)
    assert [(r.tile, r.wgmma) for r in loop.rings] == [(SharedTile.A, computed_b)]
    # a group in flight only where B has two buffers (wgmma.COMPUTED_B_BUFFERS) to alternate
    assert loop.wgmma_in_flight == (1 if computed_b and wgmma.COMPUTED_B_BUFFERS == 2 else 0)
    specs, consts_, _ = gemm_reading_b_twice.specialise(gemm_reading_b_twice.bind(args, consts))
    kinds = {o.op for o in compile_to_simt(gemm_reading_b_twice.tile_ir(specs, consts_), 4, "sm_90a").walk()}
    assert (SimtOp.WGMMA in kinds, SimtOp.MMA in kinds) == (computed_b, not computed_b)
    [plan], _ = dot_plans_of(plain_loop_gemm, GEMM, consts, 4)
    assert plan.family is DotFamily.WGMMA
