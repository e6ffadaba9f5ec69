"""Ping-pong of two consumer warpgroups (``passes/specialise_warps.py``, ``PINGPONG``): in a
warp-specialised attention kernel each consumer warpgroup waits at its own named barrier before
issuing a wgmma group and arrives at the other's once it has, so the groups reach the tensor
cores in turns (FlashAttention-3's schedule).  The emulator runs a CTA's consumer warps in
lockstep and so cannot deadlock or reorder on named barriers; here the two warpgroups' barrier
sequences are played through a model of the hardware's named barriers (``bar.sync`` waits until
the barrier's thread count has arrived, ``bar.arrive`` counts without waiting, a full barrier
resets) under every interleaving: no deadlock, no barrier over-filled, nothing left pending at
the end, and the wgmma groups alternate between the warpgroups.  The kernel still matches
float64 on the emulator, and the switch off leaves the kernel as it was."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.backends import emulate
from tilejit import backends
from tilejit.examples import attention
from tilejit.ir import TileOp
from tilejit.passes import specialise_warps as SW
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

KERNEL = attention.attention_kernel


def compiled(monkeypatch, on, BM=128, BN=128, D_=128, causal=False, warps=8):
    """The attention kernel's SIMT with ``PINGPONG`` ``on``, unrotated (``rotate_products``,
    on by default at D128, issues a third group a trip: its own schedule, tested there)."""
    from tilejit.passes import rotate_products
    monkeypatch.setattr(SW, "PINGPONG", on)
    monkeypatch.setattr(rotate_products, "ROTATE", False)
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": BM, "BN": BN, "BD": D_, "CAUSAL": causal})
    return compile_to_simt(tile, num_warps=warps, target="sm_90a", verify=True)


def consumer_block(fn):
    [split] = [o for o in fn.body.ops if o.op is SimtOp.IF]
    return split.regions[0]


def group_value(fn):
    return next(o.result for o in fn.body.ops if o.op is SimtOp.SHUFFLE_IDX)


def evaluate(v, group, wg):
    """A scalar SIMT value computed from constants and the warpgroup index ``wg``."""
    if v is group:
        return wg
    o = v.owner
    if o.op is SimtOp.CONSTANT:
        return o.attrs.values[0]
    if o.op is SimtOp.ELEMENTWISE:
        a, b = (evaluate(x, group, wg) for x in o.operands)
        return {TileOp.ADD: a + b, TileOp.SUB: a - b, TileOp.EQ: a == b, TileOp.MUL: a * b}[o.attrs.op]
    raise AssertionError(f"{o.op.name} is not computed from the warpgroup index")


def syncs_in(o):
    return any(x.op in (SimtOp.BARRIER, SimtOp.BARRIER_ARRIVE, SimtOp.WGMMA_COMMIT) for r in o.regions for x in r.walk())


def events(block, group, wg, trips):
    """The barrier events (and wgmma groups) of warpgroup ``wg`` running ``block``, its
    pipelined loop ``trips`` times."""
    out = []
    for o in block.ops:
        if o.op is SimtOp.BARRIER:
            assert o.operands, "a CTA-wide bar.sync 0 among the consumers would hang the producer"
            out.append(("sync", evaluate(o.operands[0], group, wg), o.attrs.threads))
        elif o.op is SimtOp.BARRIER_ARRIVE:
            out.append(("arrive", evaluate(o.operands[0], group, wg), o.attrs.threads))
        elif o.op is SimtOp.WGMMA_COMMIT:
            out.append(("gemm", wg, 0))
        elif o.op is SimtOp.IF and syncs_in(o):
            taken = evaluate(o.operands[0], group, wg)
            out += events(o.regions[0 if taken else 1], group, wg, trips)
        elif o.op is SimtOp.FOR and syncs_in(o):
            for _ in range(trips):
                out += events(o.regions[0], group, wg, trips)
    return out


def explore(programs) -> int:
    """Every interleaving of the warpgroups' event lists against named barriers (128 threads a
    warpgroup; a state is visited once): fails on a deadlock, a warpgroup arriving twice in one
    phase of a barrier (the hardware counts each warp once), an over-filled barrier, arrivals
    left at the end, or a wgmma group issued out of turn (the k-th group must be warpgroup
    k % 2's).  Returns the number of states seen."""
    seen = set()

    def step(pc, count, waiting, gemms):
        state = (pc, count, waiting, gemms)
        if state in seen:
            return
        seen.add(state)
        counts, waits = {b: frozenset(x) for b, x in count}, dict(waiting)
        runnable = [w for w, prog in enumerate(programs) if pc[w] < len(prog) and w not in waits]
        if not runnable:
            assert all(p == len(prog) for p, prog in zip(pc, programs)), f"deadlock: {waits}, {counts}"
            assert not waits and not any(counts.values()), f"left pending: {waits}, {counts}"
            return
        for w in runnable:
            kind, bar, threads = programs[w][pc[w]]
            c, wt, g = dict(counts), dict(waits), gemms
            if kind == "gemm":
                assert gemms % 2 == w, f"group {gemms} issued by warpgroup {w}"
                g += 1
            else:
                arrived = dict(c).get(bar, frozenset())
                assert w not in arrived, f"warpgroup {w} arrives twice in one phase of barrier {bar}"
                c[bar] = arrived | {w}
                assert 128 * len(c[bar]) <= threads, f"barrier {bar} over-filled"
                if kind == "sync":
                    wt[w] = bar
                if 128 * len(c[bar]) == threads:      # complete: its waiters go on, it resets
                    c[bar] = frozenset()
                    wt = {x: b for x, b in wt.items() if b != bar}
            nxt = tuple(p + (i == w) for i, p in enumerate(pc))
            step(nxt, tuple(sorted((b, tuple(sorted(x))) for b, x in c.items())), tuple(sorted(wt.items())), g)

    step((0,) * len(programs), (), (), 0)
    return len(seen)


@pytest.mark.parametrize("causal", [False, True])
def test_two_consumer_warpgroups_take_turns_at_the_tensor_cores(monkeypatch, causal):
    fn = compiled(monkeypatch, True, causal=causal)
    consumer, group = consumer_block(fn), group_value(fn)
    loop = next(o for o in consumer.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].ops))
    kinds = [o.op for o in loop.regions[0].ops]
    assert kinds.count(SimtOp.BARRIER) == kinds.count(SimtOp.BARRIER_ARRIVE) == kinds.count(SimtOp.WGMMA_COMMIT) == 2
    for trips in (1, 2, 5):
        programs = [events(consumer, group, wg, trips) for wg in (0, 1)]
        assert sum(e[0] == "gemm" for e in programs[0]) == 2 * trips
        assert explore(programs) > 4 * trips


def test_the_switch_off_and_other_shapes_keep_no_turns(monkeypatch):
    assert not SW.PINGPONG                                     # off until measured on the GPU
    off = compiled(monkeypatch, False)
    assert not any(o.op is SimtOp.BARRIER_ARRIVE for o in off.walk())
    four = compiled(monkeypatch, True, BM=64, BN=64, warps=4)  # one consumer warpgroup: nothing to alternate
    assert not any(o.op is SimtOp.BARRIER_ARRIVE for o in four.walk())


def test_the_barrier_arrive_reaches_ptx(monkeypatch):
    from tilejit.codegen.llvm import compile_ptx
    ptx = compile_ptx(compiled(monkeypatch, True), "sm_90a")
    assert ptx.count("bar.arrive") == 3 and ptx.count("bar.sync") >= 3 + 2


@pytest.mark.parametrize("seq, causal", [(130, True), (200, False)])
def test_pingpong_attention_matches_float64_on_the_emulator(monkeypatch, seq, causal):
    fn = compiled(monkeypatch, True, BN=64, D_=64, causal=causal)
    assert fn.meta.producer_warps == 4 and any(o.op is SimtOp.BARRIER_ARRIVE for o in fn.walk())
    q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, 2, 1, seq, 64, tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    grid, args = backends.launch_geometry(fn.meta.programs_per_cta, (tj.cdiv(seq, 128), 2), [q, k, v, o, 0.125])
    emulate.run(fn, grid, args)
    tj.testing.assert_close(o, attention.reference(q, k, v, causal), dtype=tj.bfloat16)


@tj.kernel
def attention_plain(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    """Attention as a Triton user writes it: a plain ``range`` loop, ``k.T``, no GQA, causal
    mask inline (no constexpr switch), the scale applied after the max."""
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    for n0 in range(0, tj.minimum(k.shape[2], start_m + BM), BN):
        kt = tj.load(k, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T)
        s = tj.where((n0 + tj.arange(0, BN)[None, :] <= start_m + tj.arange(0, BM)[:, None])
                     & (n0 + tj.arange(0, BN)[None, :] < k.shape[2]), s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1) * scale)
        alpha = tj.exp(m_i - m_new)
        p = tj.exp(s * scale - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tj.store(o, (batch, head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, 1, BM, BD)))


def test_the_plain_spelling_takes_turns_too_and_matches_float64(monkeypatch):
    monkeypatch.setattr(SW, "PINGPONG", True)
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention_plain.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": 128, "BN": 64, "BD": 64})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", verify=True)
    assert fn.meta.producer_warps == 4
    consumer, group = consumer_block(fn), group_value(fn)
    programs = [events(consumer, group, wg, 3) for wg in (0, 1)]
    assert [e[0] for e in programs[0]].count("arrive") == 1 + 2 * 3 and explore(programs)
    seq = 150
    q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, 2, 1, seq, 64, tj.bfloat16.np)
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)               # one KV head per query head
    o = np.full_like(q, np.nan)
    grid, args = backends.launch_geometry(fn.meta.programs_per_cta, (tj.cdiv(seq, 128), 2), [q, k, v, o, 0.125])
    emulate.run(fn, grid, args)
    tj.testing.assert_close(o, attention.reference(q, k, v, True), dtype=tj.bfloat16)


def block_scaled(monkeypatch, on, kernel=None, bm=128, warps=8):
    """The fp8 block-scaled GEMM (``examples/fp8_blockwise_gemm.py``, weights stored (N, K)):
    one wgmma group a K block, waited for and scaled into the accumulator in the loop."""
    from tilejit.examples import fp8_blockwise_gemm as ex
    monkeypatch.setattr(SW, "PINGPONG_PROMOTION", on)
    f8, f32 = ArraySpec(D.float8e4m3, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    specs = (f8, f32, f8, f32, ArraySpec(D.bfloat16, 2, True, True, False))
    consts = {"BM": bm, "BN": 128, "BK": 128} | ({"B_NK": True} if kernel is None else {})
    tile = (kernel or ex.fp8_blockwise_matmul_kernel).tile_ir(specs, consts)
    return compile_to_simt(tile, num_warps=warps, target="sm_90a", verify=True)


@pytest.mark.parametrize("spelling", ["dot_scaled", "triton"])
def test_a_block_scaled_loop_takes_turns_with_the_promotion_switch(monkeypatch, spelling):
    """One wgmma group a K block, waited for in the loop: with ``PINGPONG_PROMOTION`` the two
    consumer warpgroups issue in turns, so one scales its product while the other's runs."""
    from test_dot_scaled import triton_spelled
    fn = block_scaled(monkeypatch, True, triton_spelled if spelling == "triton" else None)
    assert fn.meta.producer_warps == 4
    consumer, group = consumer_block(fn), group_value(fn)
    loop = next(o for o in consumer.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].ops))
    kinds = [o.op for o in loop.regions[0].ops]
    assert kinds.count(SimtOp.BARRIER) == kinds.count(SimtOp.BARRIER_ARRIVE) == kinds.count(SimtOp.WGMMA_COMMIT) == 1
    assert kinds.index(SimtOp.BARRIER) < kinds.index(SimtOp.WGMMA) < kinds.index(SimtOp.BARRIER_ARRIVE) \
        < kinds.index(SimtOp.WGMMA_WAIT)                     # the other's turn comes before this one waits
    for trips in (1, 2, 5):
        programs = [events(consumer, group, wg, trips) for wg in (0, 1)]
        assert sum(e[0] == "gemm" for e in programs[0]) == trips
        assert explore(programs) > 4 * trips


def test_the_promotion_switch_is_on_and_leaves_other_loops_alone(monkeypatch):
    assert SW.PINGPONG_PROMOTION                               # on since measured on the GPU (+5-7%)
    assert not any(o.op is SimtOp.BARRIER_ARRIVE for o in block_scaled(monkeypatch, False).walk())
    # attention's two groups take turns only with PINGPONG; one consumer warpgroup has no one to wait for
    monkeypatch.setattr(SW, "PINGPONG_PROMOTION", True)
    assert not any(o.op is SimtOp.BARRIER_ARRIVE for o in compiled(monkeypatch, False).walk())
    assert not any(o.op is SimtOp.BARRIER_ARRIVE for o in block_scaled(monkeypatch, True, bm=64, warps=4).walk())


def test_the_block_scaled_turns_match_float64_on_the_emulator_and_assemble(monkeypatch):
    from tilejit.codegen.llvm import compile_ptx
    from tilejit.examples import fp8_blockwise_gemm as ex
    from test_dot_scaled import assert_fp8_close
    from conftest import assemble_or_skip
    fn = block_scaled(monkeypatch, True)
    rng = np.random.default_rng(5)
    a, sa = ex.quantize_rows(rng.standard_normal((200, 384)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((384, 256)).astype(np.float32))
    c = np.full((200, 256), np.nan, tj.bfloat16.np)
    args = [a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T), c]
    grid, args = backends.launch_geometry(fn.meta.programs_per_cta, (2, 2), args)
    emulate.run(fn, grid, args)
    assert_fp8_close(c.astype(np.float64), a, sa, b, sb)
    built = assemble_or_skip(compile_ptx(fn, "sm_90a"), "sm_90a")
    assert built.spills == 0 and "serializ" not in built.log.lower()


def _loop_body(fn):
    consumer = consumer_block(fn)
    return next(o for o in consumer.walk() if o.op is SimtOp.FOR
                and any(x.op is SimtOp.WGMMA for x in o.regions[0].ops)).regions[0]


def test_turns_are_for_two_warpgroups_and_one_promoted_group(monkeypatch):
    """``pingpong_groups``' rules on the fp8 block-scaled loop: its one promoted group takes turns
    only between exactly two consumer warpgroups (256 threads, not 128 or 512); a loop of two
    promoted groups (a 256-row tile as two DOTs) takes turns only with ``many`` (``PINGPONG``)."""
    body = _loop_body(block_scaled(monkeypatch, False))          # (before turns were added)
    assert SW.pingpong_groups(body, 256, many=False, promotion=True)
    assert all(SW.pingpong_groups(body, threads, many=True, promotion=True) is None for threads in (128, 512))
    from test_wgmma import _two_promotions_tile
    _, tile = _two_promotions_tile()
    monkeypatch.setattr(SW, "PINGPONG", False)
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", verify=True)
    body = _loop_body(fn)
    assert SW.promotes(body) and len([o for o in body.ops if o.op is SimtOp.WGMMA_COMMIT]) == 2
    assert SW.pingpong_groups(body, 256, many=True, promotion=True) is None      # (a barrier between them)
    # the same two promoted groups with nothing else between them: turns only with ``many``
    from tilejit import ir, simt
    acc_t = simt.RegType(D.float32, 64)
    ops, acc = [], ir.Value(acc_t)
    for _ in range(2):
        wg = ir.Operation(SimtOp.WGMMA, [acc, acc, acc], [acc_t])
        wait = ir.Operation(SimtOp.WGMMA_WAIT, [wg.result], [acc_t], simt.WaitAttrs(0))
        acc = ir.Operation(SimtOp.ELEMENTWISE, [wait.result, acc], [acc_t], simt.EwAttrs(TileOp.ADD))
        ops += [ir.Operation(SimtOp.WGMMA_FENCE, []), wg, ir.Operation(SimtOp.WGMMA_COMMIT, []), wait, acc]
        acc = acc.result
    two = ir.Block([], ops + [ir.Operation(SimtOp.YIELD, [acc])])
    assert SW.promotes(two)
    assert SW.pingpong_groups(two, 256, many=False, promotion=True) is None
    assert SW.pingpong_groups(two, 256, many=True, promotion=False) == [(0, 2), (5, 7)]


def test_a_product_carried_in_flight_is_not_a_promotion(monkeypatch):
    """A loop that issues the next K block's product before scaling this one (the rotated
    spelling of ``scripts/probes/fp8_prefetch.py``: ``p_next = dot(...); acc = fma(p, s, acc);
    p = p_next``) waits with a group in flight
    (``wgmma.wait_group 1``): ``promotes`` is False, so no turns are added to it."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "benchmarks"))       # (the probe imports common)
    try:
        spec = importlib.util.spec_from_file_location("fp8_prefetch", os.path.join(here, "..", "scripts", "probes",
                                                                                   "fp8_prefetch.py"))
        probe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(probe)
    finally:
        sys.path.pop(0)
    rotated = probe.rotated
    f8, f32 = ArraySpec(D.float8e4m3, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    tile = rotated.tile_ir((f8, f32, f8, f32, ArraySpec(D.bfloat16, 2, True, True, False)),
                           {"BM": 128, "BN": 128, "BK": 128})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    waits = [o.attrs.n for o in loop.regions[0].walk() if o.op is SimtOp.WGMMA_WAIT]
    assert waits and 0 not in waits
    assert not SW.promotes(loop.regions[0])
