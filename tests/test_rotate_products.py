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


@tj.kernel
def two_products(a, b, c, s, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        p = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)))
        r = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)))
        acc = tj.fma(p, s, acc) + tj.exp(r)
    tj.store(c, (0, 0), acc)


SCALED_SPECS = (BF16, BF16, F32, ScalarSpec(tj.float32))
SCALED_CONSTS = {"BM": 128, "BN": 128, "BK": 64}


def _rotate(monkeypatch, on=True):
    """Both forms of the pass on (or off): attention's at every head dim and the single-DOT
    GEMM's (``ROTATE_GEMM``)."""
    monkeypatch.setattr(R, "ROTATE", on)
    monkeypatch.setattr(R, "ROTATE_GEMM", on)
    monkeypatch.setattr(R, "ROTATE_MIN_N", 0 if on else 128)
    monkeypatch.setattr(R, "ROTATE_MAX_N", 1 << 20 if on else 128)


def loops(fn):
    return [o for o in fn.walk() if o.op is TileOp.FOR]


def test_the_product_is_carried_and_the_next_one_computed_in_the_body(monkeypatch):
    _rotate(monkeypatch, True)
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
    for on, in_flight, waits in ((False, 0, [0]), (True, 1, [0, 1, 0])):      # (the first product: wait 0)
        _rotate(monkeypatch, on)
        texts = {}
        fn = compile_to_simt(fp8.fp8_blockwise_matmul_kernel.tile_ir(FP8_SPECS, FP8_CONSTS), 8, "sm_90a",
                             dump=texts.__setitem__)
        assert f"wgmma_in_flight={in_flight}" in texts["plan_loops"]
        assert [o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT] == waits
        if on:
            # unrolled by two: the products alternate registers
            assert any(o.op is SimtOp.FOR and o.attrs and o.attrs.unroll for o in fn.walk())
            assert sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG) == [24, 240]  # specialised


def test_the_compiler_gives_the_plain_spelling_the_hand_rotated_schedule(monkeypatch):
    _rotate(monkeypatch, True)
    plans = []
    for kernel in (scaled, rotated_by_hand):
        texts = {}
        fn = compile_to_simt(kernel.tile_ir(SCALED_SPECS, SCALED_CONSTS), 8, "sm_90a", dump=texts.__setitem__)
        plans.append([line.split(": ", 1)[1] for line in texts["plan_loops"].splitlines() if line.startswith("#   for")])
        plans[-1].append(sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT))
        plans[-1].append(sum(o.op is SimtOp.WGMMA for o in fn.walk()))
    assert plans[0] == plans[1]


@pytest.mark.parametrize("case", ["hand-rotated", "carried acc", "stores", "two fresh", "off sm_90a", "switch off"])
def test_loops_it_leaves_alone(case, monkeypatch):
    """A product the loop already carries (the hand-rotated spelling), an accumulating DOT (a
    plain GEMM), a loop that stores, two products from zeros (which one?), mma.sync targets,
    the switch."""
    from tilejit.examples import matmul
    _rotate(monkeypatch, case != "switch off")
    kernel, specs, consts = {
        "hand-rotated": (rotated_by_hand, SCALED_SPECS, SCALED_CONSTS),
        "carried acc": (matmul.matmul_kernel.kernel, (BF16, BF16, BF16), {"BM": 128, "BN": 128, "BK": 64}),
        "stores": (stores_in_the_loop, SCALED_SPECS, SCALED_CONSTS),
        "two fresh": (two_products, SCALED_SPECS, SCALED_CONSTS),
    }.get(case, (scaled, SCALED_SPECS, SCALED_CONSTS))
    target = "sm_80" if case == "off sm_90a" else "sm_90a"
    fn = pipeline_until(kernel, specs, consts, "swap_small_dots", 8, target)

    def shape(f):
        return sum(o.op is TileOp.DOT for o in f.walk()), [len(loop.operands) for loop in loops(f)]
    was = shape(fn)
    assert shape(R.rotate_products(fn, 8, target)) == was


def test_the_gemm_form_has_its_own_switch(monkeypatch):
    """``ROTATE_GEMM`` off (its default: the fp8 blockwise GEMM measured slower rotated): the
    single-DOT loop is left alone while attention's loop, whose later DOT retires the next
    product, is still rotated."""
    _rotate(monkeypatch, True)
    monkeypatch.setattr(R, "ROTATE_GEMM", False)
    fn = pipeline_until(scaled, SCALED_SPECS, SCALED_CONSTS, "swap_small_dots", 8, "sm_90a")
    dots = sum(o.op is TileOp.DOT for o in fn.walk())
    assert sum(o.op is TileOp.DOT for o in R.rotate_products(fn, 8, "sm_90a").walk()) == dots
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(), "rotate_products", num_warps=8)
    assert len([o for o in fn.body.ops if o.op is TileOp.DOT]) == 1                # the first product, before


@pytest.mark.parametrize("dim, rotated", [(128, True), (64, False), (256, False)])
def test_by_default_attention_rotates_at_head_dim_128_not_64(dim, rotated):
    """The defaults: on where it measured faster (D128: +3-4% on the H100), off where slower (D64)
    and where the second S tile spills (D256)."""
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(dim), "rotate_products", num_warps=8)
    assert (len([o for o in fn.body.ops if o.op is TileOp.DOT]) == 1) == rotated


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k", [(200, 256, 384), (128, 128, 128), (130, 384, 256)])
def test_the_rotated_fp8_blockwise_gemm_matches_float64(backend, m, n, k, monkeypatch):
    """Ragged M and N, one K block (the next product entirely past the end) and several."""
    _rotate(monkeypatch, True)
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
    _rotate(monkeypatch, True)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(k)
    a = rng.standard_normal((256, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, 128)).astype(tj.bfloat16.np)
    c = np.full((256, 128), np.nan, np.float32)
    scaled[(2,)](a, b, c, 0.5, BM=128, BN=128, BK=64, num_warps=8)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# ------------------------------------------------------------------------------------- attention
# FlashAttention-3's overlap within a warpgroup: the next block's QK^T is issued before this
# block's softmax, whose exponentials then run under it on the tensor cores.
ATT_SPECS = (ArraySpec(tj.bfloat16, 4, True, True, False),) * 4 + (ScalarSpec(tj.float32),)
ATT3_SPECS = (ArraySpec(tj.bfloat16, 3, True, True, False),) * 4 + (ScalarSpec(tj.float32),)


def att_consts(dim=128, causal=False, bm=128, bn=128):
    return {"BM": bm, "BN": bn, "BD": dim, "CAUSAL": causal}


@tj.func
def online_softmax_step(s, vt, m_i, l_i, acc):
    """One key block's share of the softmax and its product with the block's values."""
    m_new = tj.maximum(m_i, tj.max(s, axis=1))
    p = tj.exp(s - m_new[:, None])
    alpha = tj.exp(m_i - m_new)
    return m_new, l_i * alpha + tj.sum(p, axis=1), acc * alpha[:, None] + tj.dot(p.to(tj.bfloat16), vt)


@tj.kernel
def plain_attention(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    """Triton's spelling: a plain ``range``, ``k.T``, the rows' bound by a ``where``."""
    start_m, head = tj.program_id(0) * BM, tj.program_id(1)
    qt = tj.load(q, (head, start_m, 0), (1, BM, BD)).reshape((BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    for n in range(0, k.shape[1], BN):
        kt = tj.load(k, (head, n, 0), (1, BN, BD)).reshape((BN, BD))
        s = tj.where((n + tj.arange(0, BN))[None, :] < k.shape[1], tj.dot(qt, kt.T) * scale, -tj.inf)
        vt = tj.load(v, (head, n, 0), (1, BN, BD)).reshape((BN, BD))
        m_i, l_i, acc = online_softmax_step(s, vt, m_i, l_i, acc)
    tj.store(o, (head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, BM, BD)))


@tj.kernel
def attention_rotated_by_hand(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    """``plain_attention`` with the user's own rotation: the first block's QK^T before the loop,
    the next one's first in each iteration."""
    start_m, head = tj.program_id(0) * BM, tj.program_id(1)
    qt = tj.load(q, (head, start_m, 0), (1, BM, BD)).reshape((BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    qk = tj.dot(qt, tj.load(k, (head, 0, 0), (1, BN, BD)).reshape((BN, BD)).T)
    for n in range(0, k.shape[1], BN):
        qk_next = tj.dot(qt, tj.load(k, (head, n + BN, 0), (1, BN, BD)).reshape((BN, BD)).T)
        s = tj.where((n + tj.arange(0, BN))[None, :] < k.shape[1], qk * scale, -tj.inf)
        vt = tj.load(v, (head, n, 0), (1, BN, BD)).reshape((BN, BD))
        m_i, l_i, acc = online_softmax_step(s, vt, m_i, l_i, acc)
        qk = qk_next
    tj.store(o, (head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, BM, BD)))


def test_attention_issues_the_next_blocks_qk_first(monkeypatch):
    _rotate(monkeypatch, True)
    fn = pipeline_until(attention.attention_kernel, ATT_SPECS, att_consts(), "rotate_products", num_warps=8)
    [loop] = loops(fn)
    body = loop.regions[0]
    iv, start, step = body.args[0], loop.operands[0], loop.operands[2]
    [first] = [o for o in fn.body.ops if o.op is TileOp.DOT]
    qk, pv = [o for o in body.ops if o.op is TileOp.DOT]
    assert loop.operands[-1] is first.result and body.ops[-1].operands[-1] is qk.result
    assert qk.operands[0] is first.operands[0]                                  # the same q
    k_next = qk.operands[1].owner.operands[0].owner.operands[0].owner           # trans(reshape(load))
    assert k_next.op is TileOp.LOAD and k_next.operands[3].owner.operands == [iv, step]
    assert first.operands[1].owner.operands[0].owner.operands[0].owner.operands[3] is start
    carried = body.args[-1]
    readers = [i for i, o in enumerate(body.ops) if any(carried in x.operands for x in (o, *(
        w for r in o.regions for w in r.walk())))]
    assert readers and min(readers) > body.ops.index(qk)                        # the softmax, after it
    assert pv.operands[2].owner.op is not TileOp.CONSTANT                       # PV still accumulates


def _schedule(kernel, specs, consts, num_warps=8):
    texts = {}
    fn = compile_to_simt(kernel.tile_ir(specs, consts), num_warps, "sm_90a", dump=texts.__setitem__)
    families = [line.split(": ", 1)[1].split()[0] for line in texts["plan_loops"].split("# dot plans")[1].splitlines()
                if ": " in line]
    engines = [line.split("engine=")[1] for line in texts["plan_loops"].splitlines() if "engine=" in line]
    return fn, families, engines, [o.attrs.n for o in fn.walk() if o.op is SimtOp.WGMMA_WAIT], \
        sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG)


@pytest.mark.parametrize("causal", [False, True])
def test_the_rotated_attention_keeps_wgmma_tma_and_its_producer_warpgroup(causal, monkeypatch):
    """The first product before the loop takes wgmma too (its operands staged by the threads),
    the loop keeps its TMA rings and producer warpgroup (the rings' bytes their own: the first
    product's staged K would otherwise share them), the next product's group stays in flight
    until the PV product's wait (``wait_group 2``: its wgmmas are skipped on the last trip, and
    ptxas fills that empty group with a wgmma of its own after the join), and the consumers get
    240 registers (the producer 24)."""
    _rotate(monkeypatch, False)
    _, families, engines, waits, regs = _schedule(attention.attention_kernel, ATT_SPECS, att_consts(causal=causal))
    assert (families, engines, waits, regs) == (["wgmma"] * 2, ["tma"], [0, 0], [40, 232])
    _rotate(monkeypatch, True)
    fn, families, engines, waits, regs = _schedule(attention.attention_kernel, ATT_SPECS, att_consts(causal=causal))
    assert (families, engines, waits, regs) == (["wgmma"] * 3, ["tma"], [0, 2, 0], [24, 240])
    assert not any(o.op is SimtOp.FOR and o.attrs and o.attrs.unroll for o in fn.walk())  # nothing in flight at the back edge
    # the next block's QK^T (its 8 k steps) is skipped on the last trip by one branch around the group
    guarded = [o for o in fn.walk() if o.op is SimtOp.WGMMA and len(o.operands) == 4]
    assert len(guarded) == 8 and len({id(o.operands[3]) for o in guarded}) == 1
    from tilejit import codegen
    ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
    before = ptx[:ptx.index("wgmma.wait_group.sync.aligned \t2")]
    group = before[before.rindex("wgmma.fence"):]
    assert group.count("wgmma.mma_async") == 8 and "bra" in group.split("wgmma.mma_async")[0]
    assert all("bra" not in x for x in group.split("wgmma.mma_async")[1:-1])     # straight-line inside
    from tilejit.backends.cuda import assemble_hinted
    from tilejit.codegen import ptxas
    if ptxas.whole_program_available():
        asm = assemble_hinted(fn, "sm_90a", whole_program=True)[0]
        assert asm.spills == 0 and "serialized" not in asm.log, asm.log


def test_the_hand_rotated_attention_gets_the_same_schedule(monkeypatch):
    _rotate(monkeypatch, True)
    consts = {"BM": 128, "BN": 128, "BD": 128}
    plain, by_hand = (_schedule(kernel, ATT3_SPECS, consts)[1:] for kernel in (plain_attention, attention_rotated_by_hand))
    assert plain == by_hand == (["wgmma"] * 3, ["tma"], [0, 2, 0], [24, 240])


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dim, causal, config", [(128, False, (128, 128, 8)), (128, True, (128, 128, 8)),
                                                 (64, True, (64, 128, 4)), (64, False, (128, 64, 8))])
def test_the_rotated_attention_matches_float64(backend, dim, causal, config, monkeypatch):
    """A ragged length (the next block past the end reads zeros), GQA 4 / 2, two batches."""
    _rotate(monkeypatch, True)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    bm, bn, warps = config
    q, k, v = attention.example_inputs(np.random.default_rng(dim + causal), batch=2, heads=4, kv_heads=2, seq=200,
                                       dim=dim, dtype=tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    attention.attention_kernel[(tj.cdiv(200, bm), 8)](q, k, v, o, dim ** -0.5, **att_consts(dim, causal, bm, bn),
                                                       num_warps=warps)
    ref = attention.reference(q, k, v, causal)
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=2e-2, atol=4e-3)


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_hand_rotated_attention_matches_float64(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 200, 128)).astype(tj.bfloat16.np) for _ in range(3))
    for kernel in (plain_attention, attention_rotated_by_hand):
        o = np.full_like(q, np.nan)
        kernel[(2, 2)](q, k, v, o, 128 ** -0.5, BM=128, BN=128, BD=128, num_warps=8)
        ref = attention.reference(q[None], k[None], v[None])[0]
        np.testing.assert_allclose(o.astype(np.float64), ref, rtol=2e-2, atol=4e-3)


def test_unroll_ahead_gives_the_two_products_registers_of_their_own(monkeypatch):
    """``wgmma.UNROLL_AHEAD``: the rotated attention loop at head dim 64 is unrolled by two, so the
    product issued ahead and the one the softmax reads alternate registers (no copy of the S tile
    at the back edge): two copies of the next block's QK^T group in the loop, and no spill."""
    from tilejit import codegen
    from tilejit.passes import wgmma
    _rotate(monkeypatch, True)
    counts = {}
    for unroll in (False, True):
        monkeypatch.setattr(wgmma, "UNROLL_AHEAD", unroll)
        specs = ATT_SPECS[:4] + (ScalarSpec(tj.float32, True),)      # (a positive scale, as launches give)
        fn = _schedule(attention.attention_kernel, specs, att_consts(dim=64))[0]
        assert any(o.op is SimtOp.FOR and o.attrs and o.attrs.unroll for o in fn.walk()) == unroll
        ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
        counts[unroll] = ptx.count("wgmma.mma_async.sync.aligned.m64n128k16")
    assert counts == {False: 8, True: 12}       # 4 k steps: the first product, then one / two in the loop
    from tilejit.backends.cuda import assemble_hinted
    from tilejit.codegen import ptxas
    if ptxas.whole_program_available():
        assert assemble_hinted(fn, "sm_90a", whole_program=True)[0].spills == 0
