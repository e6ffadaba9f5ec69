"""``passes.sink_transposes``: a tile whose transpose is what DOTs read is computed transposed
(``dot(a, b)ᵀ = dot(bᵀ, aᵀ)``, elementwise ops on transposed operands, ``m[:, None]`` as
``m[None, :]``); the IR before and after, the cases it leaves alone, NumPy equivalence on the
CPU backends, and FlashAttention's dK/dV loop written both ways reaching the same wgmma plan."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.ir import TileOp
from tilejit.passes import pipeline, sink_transposes as sink_module
from tilejit.passes.plans import CopyEngine, DotFamily
from tilejit.passes.sink_transposes import sink_transposes
from tilejit.specs import ArraySpec, NoneSpec

from examples import attention_backward as ab


@tj.kernel
def masked_gram_kernel(w, x, out, n, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """out = sum over row blocks of x of (mask ∘ exp(X Wᵀ - c))ᵀ X: the first DOT's product is
    read transposed, through a mask and a per-row broadcast."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    cols = tj.arange(0, BN)
    for m in range(0, x.shape[0], BM):
        xt = tj.load(x, (m, 0), (BM, BD))
        rows = m + tj.arange(0, BM)
        c = tj.load(n, (m,), (BM,))
        s = tj.dot(xt, wt.T) * 0.5
        p = tj.where((rows[:, None] < x.shape[0]) & (cols[None, :] < BN), tj.exp(s - c[:, None]), 0.0)
        acc += tj.dot(p.T.to(xt.dtype), xt)
    tj.store(out, (0, 0), acc)


@tj.kernel
def masked_gram_range_kernel(w, x, out, n, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """``masked_gram_kernel`` spelled otherwise: ``tj.range(stages=2)``, ``tj.trans`` for ``.T``,
    the mask's comparisons in the other order, the scale after the exponent's argument."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    cols = tj.arange(0, BN)
    for m in tj.range(0, x.shape[0], BM, stages=2):
        xt = tj.load(x, (m, 0), (BM, BD))
        rows = m + tj.arange(0, BM)
        c = tj.load(n, (m,), (BM,))
        s = tj.dot(xt, tj.trans(wt))
        keep = (cols[None, :] < BN) & (rows[:, None] < x.shape[0])
        p = tj.where(keep, tj.exp(0.5 * s - c[:, None]), 0.0)
        acc += tj.dot(tj.trans(p).to(xt.dtype), xt)
    tj.store(out, (0, 0), acc)


@tj.kernel
def stored_too_kernel(w, x, out, side, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """The product is also stored as it is: it stays untransposed (a transpose would only move)."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    for m in range(0, x.shape[0], BM):
        xt = tj.load(x, (m, 0), (BM, BD))
        s = tj.dot(xt, wt.T)
        tj.store(side, (m, 0), s)
        acc += tj.dot(s.T.to(xt.dtype), xt)
    tj.store(out, (0, 0), acc)


ARR = ArraySpec(D.bfloat16, 2, True, True, False)
F32_2, F32_1 = ArraySpec(D.float32, 2, True, True, False), ArraySpec(D.float32, 1, True, True, False)


def until(kernel, specs, consts, stop, warps=4):
    """The kernel's tile IR after the pipeline's stage ``stop``."""
    fn = pipeline.clone_function(kernel.tile_ir(specs, consts))
    opts = pipeline.Options(warps, "sm_90a")
    for stage in pipeline.PIPELINE:
        fn = stage.run(fn, opts)
        if stage.name == stop:
            return fn
    raise AssertionError(f"no stage {stop}")


def loop_ops(fn):
    return next(o for o in fn.walk() if o.op is TileOp.FOR).regions[0].ops


def transposes_of_computed_tiles(fn) -> int:
    """TRANS ops in the loop whose operand is not a (reshaped) load."""
    count = 0
    for o in loop_ops(fn):
        if o.op is TileOp.TRANS:
            src = o.operands[0].owner
            while src is not None and src.op is TileOp.RESHAPE:
                src = src.operands[0].owner
            count += src is None or src.op is not TileOp.LOAD
    return count


CONSTS = {"BN": 64, "BM": 32, "BD": 64}


def test_the_product_read_transposed_is_computed_transposed():
    before = until(masked_gram_kernel, (ARR, ARR, F32_2, F32_1), CONSTS, "dce")
    assert transposes_of_computed_tiles(before) == 1
    after = sink_transposes(pipeline.clone_function(before))
    assert transposes_of_computed_tiles(after) == 0
    dots = [o for o in loop_ops(after) if o.op is TileOp.DOT]
    first = dots[0]                            # sᵀ = W Xᵀ: (BN x BM), W as A, Xᵀ as B
    assert first.result.type.shape == (64, 32)
    assert first.operands[0].owner.op is TileOp.LOAD or first.operands[0].owner.op is TileOp.RESHAPE
    assert first.operands[1].owner.op is TileOp.TRANS
    reshapes = [o for o in loop_ops(after) if o.op is TileOp.RESHAPE and o.result.type.shape == (1, 32)]
    assert reshapes                            # c[:, None] became c[None, :], rows the same


@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("kernel", [masked_gram_kernel, masked_gram_range_kernel], ids=["range, .T", "tj.range, tj.trans"])
def test_both_spellings_compute_the_product_transposed_and_split_x(kernel, warps):
    """Either spelling, 4 or 8 warps: no transpose of a computed tile is left, and the block of
    x (read by both DOTs once p is computed transposed) is loaded once per DOT."""
    fn = until(kernel, (ARR, ARR, F32_2, F32_1), {"BN": 16 * warps, "BM": 32, "BD": 64}, "split_dot_loads", warps)
    assert transposes_of_computed_tiles(fn) == 0
    loads = [o for o in loop_ops(fn) if o.op is TileOp.LOAD and o.operands[0] is fn.args[1]]
    assert len(loads) == 2


def test_a_product_also_read_untransposed_is_left_alone():
    before = until(stored_too_kernel, (ARR, ARR, F32_2, F32_2), CONSTS, "dce")
    after = sink_transposes(pipeline.clone_function(before))
    assert transposes_of_computed_tiles(after) == 1


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(sink_module, "SINK_TRANSPOSES", False)
    before = until(masked_gram_kernel, (ARR, ARR, F32_2, F32_1), CONSTS, "dce")
    assert transposes_of_computed_tiles(sink_transposes(before)) == 1


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("kernel", [masked_gram_kernel, masked_gram_range_kernel], ids=["range, .T", "tj.range, tj.trans"])
@pytest.mark.parametrize("rows", [64, 75])
def test_masked_gram_matches_numpy(backend, rows, kernel, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(rows)
    w = (rng.standard_normal((64, 64)) / 8).astype(tj.bfloat16.np)
    x = (rng.standard_normal((rows, 64)) / 8).astype(tj.bfloat16.np)
    c = rng.standard_normal(rows).astype(np.float32)
    out = np.full((64, 64), np.nan, np.float32)
    kernel[(1,)](w, x, out, c, BN=64, BM=32, BD=64, num_warps=4)
    x64 = x.astype(np.float64)
    p = np.exp((x64 @ w.astype(np.float64).T).astype(np.float32) * 0.5 - c[:, None])
    want = p.astype(tj.bfloat16.np).astype(np.float64).T @ x64
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


# --- FlashAttention's dK/dV loop, written both ways ---------------------------------------------
@tj.kernel
def dkdv_transposed_kernel(q, k, v, do, lse, delta, dk, dv, scale: tj.constexpr,
                           BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    """One head's dK and dV with Sᵀ = K Qᵀ written out (FlashAttention-2's and Triton's
    tutorial's spelling); ``examples/attention_backward.py`` writes S = Q Kᵀ and reads ``p.T``."""
    start_n = tj.program_id(0) * BN
    seq_q, seq_k = q.shape[2], k.shape[2]
    kt = tj.load(k, (0, 0, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
    vt = tj.load(v, (0, 0, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
    cols = start_n + tj.arange(0, BN)
    dk_acc = tj.zeros((BN, BD), tj.float32)
    dv_acc = tj.zeros((BN, BD), tj.float32)
    for start_m in range(0, seq_q, BM):
        qt = tj.load(q, (0, 0, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
        dot_ = tj.load(do, (0, 0, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
        rows = start_m + tj.arange(0, BM)
        m = tj.load(lse, (0, 0, start_m), (1, 1, BM)).reshape((BM,))
        d = tj.load(delta, (0, 0, start_m), (1, 1, BM)).reshape((BM,))
        keep = (cols[:, None] < seq_k) & (rows[None, :] < seq_q)
        if CAUSAL:
            keep = keep & (cols[:, None] <= rows[None, :])
        pt = tj.where(keep, tj.exp(tj.dot(kt, qt.T) * scale - m[None, :]), 0.0)
        dv_acc += tj.dot(pt.to(dot_.dtype), dot_)
        dst = pt * (tj.dot(vt, dot_.T) - d[None, :])
        dk_acc += tj.dot(dst.to(qt.dtype), qt)
    tj.store(dk, (0, 0, start_n, 0), (dk_acc * scale).to(dk.dtype).reshape((1, 1, BN, BD)))
    tj.store(dv, (0, 0, start_n, 0), dv_acc.to(dv.dtype).reshape((1, 1, BN, BD)))


A4, S3 = ArraySpec(D.bfloat16, 4, True, True, False), ArraySpec(D.float32, 3, True, True, False)


def _dq_acc(kernel) -> tuple:
    """The example's dK/dV kernel takes dQ's float32 accumulator (None: its own dQ pass)."""
    return (NoneSpec(),) if kernel is ab.dkdv_kernel else ()


def dkdv_plan(kernel, causal, BM=32, BN=64, warps=4, dim=128):
    fn = until(kernel, (A4,) * 4 + (S3, S3, A4, A4) + _dq_acc(kernel),
               {"scale": dim ** -0.5, "BM": BM, "BN": BN, "BD": dim, "CAUSAL": causal}, "plan_loops", warps)
    loop = next(o for o in fn.walk() if o.op is TileOp.FOR)
    dots = [o for o in loop.regions[0].ops if o.op is TileOp.DOT]
    return fn.meta["loop_plans"][loop], [fn.meta["dot_plans"].family(d) for d in dots]


@pytest.mark.parametrize("tiles", [(32, 64, 4), (32, 128, 8)], ids=["32x64x4", "32x128x8"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", [ab.dkdv_kernel, dkdv_transposed_kernel], ids=["S=QKt", "St=KQt"])
def test_both_spellings_of_the_dkdv_loop_run_on_wgmma_from_tma_rings(kernel, causal, tiles):
    BM, BN, warps = tiles
    plan, families = dkdv_plan(kernel, causal, BM, BN, warps)
    assert families == [DotFamily.WGMMA] * 4
    assert len(plan.rings) == 4 and plan.engine is CopyEngine.TMA


def test_without_the_pass_the_plain_spelling_stays_on_mma_sync(monkeypatch):
    monkeypatch.setattr(sink_module, "SINK_TRANSPOSES", False)
    _, families = dkdv_plan(ab.dkdv_kernel, False)
    assert DotFamily.WGMMA not in families[1::2]          # the DOTs reading p.T and ds.T


@pytest.mark.parametrize("kernel", [ab.dkdv_kernel, dkdv_transposed_kernel, ab.dq_kernel], ids=["dkdv", "dkdv_t", "dq"])
def test_the_rewritten_ir_verifies_after_every_pass(kernel):
    specs = (A4,) * 4 + (S3, S3) + ((A4,) if kernel is ab.dq_kernel else (A4, A4)) + _dq_acc(kernel)
    for causal in (False, True):
        tile = kernel.tile_ir(specs, {"scale": 0.088, "BM": 32, "BN": 64, "BD": 128, "CAUSAL": causal})
        pipeline.compile_to_simt(tile, 4, "sm_90a", verify=True)


# --- a transpose of a tile loaded before the loop, spelled inside it ---------------------------
@tj.kernel
def weights_t_kernel(x, w, out, BM: tj.constexpr, BK: tj.constexpr, BN: tj.constexpr, SPELLING: tj.constexpr):
    """out = sum over k blocks of w.T @ x[k]: ``w`` (BK x BM) loaded once, transposed inside the
    loop (``.T``, ``tj.trans``, ``permute``) or once before it (``SPELLING == "hoisted"``)."""
    wt = tj.load(w, (0, 0), (BK, BM))
    w_t = wt.T
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, x.shape[0], BK):
        xt = tj.load(x, (k, 0), (BK, BN))
        if SPELLING == "T":
            a = wt.T
        elif SPELLING == "trans":
            a = tj.trans(wt)
        elif SPELLING == "permute":
            a = wt.permute(1, 0)
        else:
            a = w_t
        acc = tj.dot(a, xt, acc)
    tj.store(out, (0, 0), acc)


@pytest.mark.parametrize("spelling", ["hoisted", "T", "trans", "permute"])
def test_a_transpose_of_a_tile_from_before_the_loop_leaves_the_loop(spelling, monkeypatch):
    """Each spelling reaches the same plan: the transpose is computed once before the loop, and
    the DOT takes wgmma with its A staged once; the emulator agrees with NumPy."""
    B2 = ArraySpec(D.bfloat16, 2, True, True, False)
    F2 = ArraySpec(D.float32, 2, True, True, False)
    fn = until(weights_t_kernel, (B2, B2, F2), {"BM": 64, "BK": 64, "BN": 64, "SPELLING": spelling}, "plan_loops")
    loop = next(o for o in fn.walk() if o.op is TileOp.FOR)
    assert not [o for o in loop.regions[0].ops if o.op is TileOp.TRANS]
    dot = next(o for o in loop.regions[0].ops if o.op is TileOp.DOT)
    assert fn.meta["dot_plans"].family(dot) is DotFamily.WGMMA
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(4)
    bf = tj.bfloat16.np
    x, w = rng.standard_normal((192, 64)).astype(bf), rng.standard_normal((64, 64)).astype(bf)
    out = np.full((64, 64), np.nan, np.float32)
    weights_t_kernel[(1,)](x, w, out, BM=64, BK=64, BN=64, SPELLING=spelling, num_warps=4)
    xs = x.astype(np.float64).reshape(3, 64, 64)
    want = sum(w.astype(np.float64).T @ xs[i] for i in range(3))
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-1)
