"""``defer_products``: attention's accumulation ``acc = acc * alpha + p @ v`` issued one iteration
behind, after the next block's QK^T, so it runs on the tensor cores under that block's softmax
(FlashAttention-3's order within a warpgroup).  IR in and out (what the loop carries, the
accumulation before and after the loop), the loops it leaves alone, the waits it leads to
(the QK^T retired by ``wait_group 1`` after the PV's issue, the PV by a ``wait_group 0`` at the
body's end), the spellings that reach it, and the outputs on the emulator (and the GPU)."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.examples import attention
from tilejit.ir import TileOp
from tilejit.passes import defer_products as DP
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

from conftest import pipeline_until
from test_rotate_products import ATT3_SPECS, ATT_SPECS, _schedule, att_consts, plain_attention, scaled, \
    stores_in_the_loop


def _defer(monkeypatch, on=True):
    monkeypatch.setattr(DP, "DEFER", on)


def _loop(fn):
    [loop] = [o for o in fn.walk() if o.op is TileOp.FOR]
    return loop


def _simt_loop(fn):
    """The SIMT loop that issues the wgmmas (the consumers')."""
    [loop] = [o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk())]
    return loop


def test_the_accumulation_reads_last_trips_values_and_the_last_one_follows_the_loop(monkeypatch):
    _defer(monkeypatch)
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(dim=64), "defer_products", num_warps=8)
    loop = _loop(fn)
    body = loop.regions[0]
    iv, step = body.args[0], loop.operands[2]
    first, acc_dot = [o for o in body.ops if o.op is TileOp.DOT]
    # the carried p (the PV's bfloat16 A), the carried alpha and the trip's iv
    p_prev, alpha_prev, last = body.args[-3:]
    assert p_prev.type.dtype is tj.bfloat16 and p_prev.type.shape == (128, 128)   # (BM, BN)
    assert alpha_prev.type.shape == (128,) and last.type == iv.type
    assert acc_dot.operands[0] is p_prev
    # the accumulator: the carried acc times the carried alpha, rescaled before the first product
    mul = acc_dot.operands[2].owner
    assert mul.op is TileOp.MUL and body.args[2] in mul.operands
    assert body.ops.index(mul) < body.ops.index(first) < body.ops.index(acc_dot)
    # V of the block before: its row offset is iv - step
    load = acc_dot.operands[1].owner.operands[0].owner
    sub = load.operands[3].owner
    assert load.op is TileOp.LOAD and sub.op is TileOp.SUB and sub.operands == [iv, step]
    # the yields: the new acc, then the values the next trip's accumulation reads
    yields = body.ops[-1].operands
    assert yields[1] is acc_dot.result and yields[-1] is iv
    assert yields[-3].owner.op is TileOp.CAST and yields[-2].owner.op is TileOp.EXP2
    # the inits: zeros for p, ones for alpha, start - step for the iv
    inits = [x.owner for x in loop.operands[-3:]]
    assert inits[0].attrs.value == 0 and inits[1].attrs.value == 1 and inits[2].op is TileOp.SUB
    # after the loop: the last block's accumulation, which the normalisation reads
    after = fn.body.ops[fn.body.ops.index(loop) + 1:]
    [last_dot] = [o for o in after if o.op is TileOp.DOT]
    assert last_dot.operands[0] is loop.results[-3]
    div = next(o for o in after if o.op is TileOp.TRUEDIV)
    assert div.operands[0] is last_dot.result


def test_carry_float_converts_p_before_the_next_accumulation(monkeypatch):
    """``CARRY_FLOAT``: the loop carries p in float32 and the PV reads its conversion, made in
    the body before the first product."""
    _defer(monkeypatch)
    monkeypatch.setattr(DP, "CARRY_FLOAT", True)
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(dim=64), "defer_products", num_warps=8)
    body = _loop(fn).regions[0]
    first, acc_dot = [o for o in body.ops if o.op is TileOp.DOT]
    p_prev = body.args[-3]
    cast = acc_dot.operands[0].owner
    assert p_prev.type.dtype is tj.float32 and cast.op is TileOp.CAST and cast.operands[0] is p_prev
    assert body.ops.index(cast) < body.ops.index(first)
    assert body.ops[-1].operands[-3].owner.op is TileOp.EXP2


def test_rotation_leaves_a_deferred_loop_alone(monkeypatch):
    _defer(monkeypatch)
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(dim=64), "rotate_products", num_warps=8)
    body = _loop(fn).regions[0]
    assert len([o for o in body.ops if o.op is TileOp.DOT]) == 2
    assert [o for o in fn.body.ops if o.op is TileOp.DOT][0].result not in _loop(fn).operands   # no first product


@pytest.mark.parametrize("kernel, specs, consts", [
    (scaled, (ArraySpec(tj.bfloat16, 2, True, True, False),) * 2 + (ArraySpec(tj.float32, 2),) + (ScalarSpec(tj.float32),),
     {"BM": 128, "BN": 128, "BK": 64}),
    (stores_in_the_loop, (ArraySpec(tj.bfloat16, 2, True, True, False),) * 2 + (ArraySpec(tj.float32, 2),)
     + (ScalarSpec(tj.float32),), {"BM": 128, "BN": 128, "BK": 64})])
def test_loops_without_an_accumulation_behind_a_product_are_left_alone(kernel, specs, consts, monkeypatch):
    """A GEMM's one DOT, and a loop that stores."""
    _defer(monkeypatch)
    before = pipeline_until(kernel, specs, consts, "swap_small_dots", num_warps=8)
    after = pipeline_until(kernel, specs, consts, "defer_products", num_warps=8)
    assert len(_loop(after).regions[0].args) == len(_loop(before).regions[0].args)


@pytest.mark.parametrize("kernel, specs, consts", [
    (attention.attention_kernel, ATT_SPECS, att_consts(bn=64)),
    (attention.attention_kernel, ATT_SPECS, att_consts(dim=64, causal=True)),
    (plain_attention, ATT3_SPECS, {"BM": 128, "BN": 128, "BD": 64})])
def test_the_first_products_wait_follows_the_accumulations_issue(kernel, specs, consts, monkeypatch):
    """The loop's waits: ``wait_group 1`` after the PV's issue (the QK^T retired, the PV in
    flight), ``wait_group 0`` at the body's end (the PV); the example and Triton's spelling (a
    plain ``range``, ``k.T``) alike.  Without the pass: a wait after each product."""
    commit, wait = SimtOp.WGMMA_COMMIT, SimtOp.WGMMA_WAIT
    _defer(monkeypatch, False)
    body = _simt_loop(_schedule(kernel, specs, consts)[0]).regions[0]
    assert [o.op for o in body.ops if o.op in (commit, wait)] == [commit, wait, commit, wait]
    _defer(monkeypatch)
    fn, families, engines, _, regs = _schedule(kernel, specs, consts)
    body = _simt_loop(fn).regions[0]
    assert [o.op for o in body.ops if o.op in (commit, wait)] == [commit, commit, wait, wait]
    assert [o.attrs.n for o in body.ops if o.op is SimtOp.WGMMA_WAIT] == [1, 0]
    last_wait = [o for o in body.ops if o.op is SimtOp.WGMMA_WAIT][-1]
    assert body.ops[-1].op is SimtOp.YIELD and last_wait.results[0] in body.ops[-1].operands
    # the exponentials run between the two waits, under the PV; the last wait is held there
    waits = [i for i, o in enumerate(body.ops) if o.op is SimtOp.WGMMA_WAIT]
    assert any(o.op is SimtOp.ELEMENTWISE and o.attrs.op is TileOp.EXP2 for o in body.ops[waits[0]:waits[1]])
    assert [body.ops[i].attrs.hold for i in waits] == [False, True]
    assert families[:2] == ["wgmma", "wgmma"] and engines == ["tma"] and regs[-1] >= 232


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dim, causal, config, seq", [(128, False, (128, 64, 8), 200), (128, True, (128, 64, 8), 200),
                                                      (64, True, (64, 128, 4), 200), (64, False, (128, 64, 8), 200),
                                                      (64, False, (64, 64, 4), 40)])
def test_the_deferred_attention_matches_float64(backend, dim, causal, config, seq, monkeypatch):
    """Ragged lengths (the block past the end and the one before the start read zeros), one
    block a row (the loop's only trip adds zeros; the accumulation after it does the work),
    GQA 4 / 2, two batches."""
    _defer(monkeypatch)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    bm, bn, warps = config
    q, k, v = attention.example_inputs(np.random.default_rng(dim + causal + seq), batch=2, heads=4, kv_heads=2,
                                       seq=seq, dim=dim, dtype=tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    attention.attention_kernel[(tj.cdiv(seq, bm), 8)](q, k, v, o, dim ** -0.5, **att_consts(dim, causal, bm, bn),
                                                       num_warps=warps)
    ref = attention.reference(q, k, v, causal)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=2e-2, atol=4e-3)


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_deferred_plain_spelling_matches_float64(backend, monkeypatch):
    _defer(monkeypatch)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 200, 64)).astype(tj.bfloat16.np) for _ in range(3))
    o = np.full_like(q, np.nan)
    plain_attention[(2, 2)](q, k, v, o, 64 ** -0.5, BM=128, BN=128, BD=64, num_warps=8)
    ref = attention.reference(q[None], k[None], v[None])[0]
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=2e-2, atol=4e-3)



@pytest.mark.parametrize("carry_float, dim, bn, deferred", [(True, 128, 128, False), (True, 128, 64, True),
                                                             (True, 64, 128, True), (False, 128, 128, True)])
def test_tiles_past_the_register_budget_are_left_to_rotation(carry_float, dim, bn, deferred, monkeypatch):
    """``MAX_VALUES``: at head dim 128 with 128x128 tiles and a float32 p a thread would hold 224
    values (it spills), so the loop stays as it was and ``rotate_products`` takes it; 128x64 (144)
    and head dim 64 (192) are deferred, and so is 128x128 with the bfloat16 p (160)."""
    _defer(monkeypatch)
    monkeypatch.setattr(DP, "CARRY_FLOAT", carry_float)
    consts = att_consts(dim=dim, bn=bn)
    before = pipeline_until(attention.attention_kernel, ATT_SPECS, consts, "swap_small_dots", num_warps=8)
    after = pipeline_until(attention.attention_kernel, ATT_SPECS, consts, "defer_products", num_warps=8)
    assert (len(_loop(after).regions[0].args) > len(_loop(before).regions[0].args)) == deferred
    if not deferred:
        rotated = pipeline_until(attention.attention_kernel, ATT_SPECS, consts, "rotate_products", num_warps=8)
        assert len(_loop(rotated).regions[0].args) == len(_loop(before).regions[0].args) + 1


def test_the_held_wait_is_a_branch_ptxas_cannot_fold_then_the_wait(monkeypatch):
    """The PTX of the deferred loop: the PV's wait (``wait_group 0``) right after a branch on
    ``%nctaid.x == 0`` around a ``nanosleep`` (``mma.hold_point``), and no other hold."""
    from tilejit import codegen
    _defer(monkeypatch)
    fn = _schedule(attention.attention_kernel, ATT_SPECS, att_consts(dim=64))[0]
    ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
    assert ptx.count("nanosleep.u32") == 1 and "%nctaid.x" in ptx
    after = ptx[ptx.index("nanosleep.u32"):]
    label = after.index("TJ_HOLD_")
    assert 0 < after.index("wgmma.wait_group.sync.aligned \t0;") - label < 200     # the wait just after it
    _defer(monkeypatch, False)
    fn = _schedule(attention.attention_kernel, ATT_SPECS, att_consts(dim=64))[0]
    assert "nanosleep" not in codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
