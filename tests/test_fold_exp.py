"""The ``fold_exp`` pass: IR text in -> out, the softmax/attention examples against NumPy with
the rewritten IR on the ``interpret`` and ``emulate`` backends, -inf and fully masked rows,
and the error bound of ``exp2(fma(a, L, -b*L))`` against ``np.exp(a - b)``."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import codegen, ir
from tilejit.backends import emulate, interpret
from tilejit import dtypes as D
from tilejit.codegen.host import host_eval
from tilejit.frontend import compile_tile_ir
from tilejit.backends.interpret import elementwise_fn
from tilejit.ir import TileOp
from tilejit.kernel import classify_argument
from tilejit.passes.canonicalize import canonicalize
from tilejit.passes.dce import dce
from tilejit.passes.fold_exp import LOG2E, fold_exp
from tilejit.passes.pipeline import PIPELINE, compile_to_simt
from tilejit.specs import ArraySpec
from tilejit.verifier import verify

softmax = pytest.importorskip("tilejit.examples.softmax")
attention = pytest.importorskip("tilejit.examples.attention")
F32 = D.float32


def tile_ir(pyfn, specs, **consts) -> ir.Function:
    return canonicalize(compile_tile_ir(pyfn, specs, consts))


def folded(fn: ir.Function) -> ir.Function:
    fn = dce(fold_exp(fn))
    verify(fn)
    return fn


def ops(fn: ir.Function) -> list[TileOp]:
    return [o.op for o in fn.walk()]


# ------------------------------------------------------------------------------ IR text in/out
def row_softmax(x, y, B: tj.constexpr):
    t = tj.load(x, (0, 0), (1, B), other=-tj.inf)
    tj.store(y, (0, 0), tj.exp(t - tj.max(t, axis=1, keepdims=True)))


def vector_softmax(x, y, B: tj.constexpr):
    t = tj.load(x, (0,), (B,), other=-tj.inf)
    tj.store(y, (0,), tj.exp(t - tj.max(t, axis=0)))


def not_softmax(x, y, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    u = tj.load(y, (0,), (B,))
    tj.store(y, (0,), tj.exp(t) + tj.exp(t - u) + tj.exp(t - tj.min(t, axis=0)))


def test_row_max_through_broadcast_is_folded_at_the_small_shape():
    fn = folded(tile_ir(row_softmax, [ArraySpec(F32, 2)] * 2, B=8))
    assert ir.print_function(fn) == """\
func @row_softmax(%0: array<2xfloat32>, %1: array<2xfloat32>) {
  %2 = constant {value=0} : int32
  %3 = constant {value=0} : int32
  %4 = load %0, %2, %3 {other=-inf} : tile<1x8xfloat32>
  %5 = reduce %4 {kind=max, axis=1, keepdims=True} : tile<1x1xfloat32>
  %6 = constant {value=-1.4426950216293335} : tile<1x1xfloat32>
  %7 = mul %5, %6 : tile<1x1xfloat32>
  %8 = broadcast %7 : tile<1x8xfloat32>
  %9 = constant {value=1.4426950216293335} : tile<1x8xfloat32>
  %10 = fma %4, %9, %8 : tile<1x8xfloat32>
  %11 = exp2 %10 : tile<1x8xfloat32>
  %12 = constant {value=0} : int32
  %13 = constant {value=0} : int32
  store %1, %12, %13, %11
}"""


def test_scalar_max_through_splat_is_folded_as_a_scalar():
    text = ir.print_function(folded(tile_ir(vector_softmax, [ArraySpec(F32, 1)] * 2, B=8)))
    assert """\
  %4 = reduce %3 {kind=max, axis=0, keepdims=False} : float32
  %5 = constant {value=-1.4426950216293335} : float32
  %6 = mul %4, %5 : float32
  %7 = splat %6 : tile<8xfloat32>
  %8 = constant {value=1.4426950216293335} : tile<8xfloat32>
  %9 = fma %3, %8, %7 : tile<8xfloat32>
  %10 = exp2 %9 : tile<8xfloat32>""" in text
    assert " exp " not in text and " sub " not in text


def test_exp_of_anything_but_a_maximum_is_untouched():
    fn = tile_ir(not_softmax, [ArraySpec(F32, 1)] * 2, B=8)
    before = ir.print_function(fn)
    assert ir.print_function(folded(fn)) == before
    assert ops(fn).count(TileOp.EXP) == 3 and TileOp.EXP2 not in ops(fn)


def safe_max_softmax(x, y, B: tj.constexpr):
    """A part's maximum read as 0 where it is -inf (cluster_rows writes it so): still a maximum."""
    t = tj.load(x, (0, 0), (1, B), other=-tj.inf)
    m = tj.max(t, axis=1, keepdims=True)
    tj.store(y, (0, 0), tj.exp(t - tj.where(m == -tj.inf, 0.0, m)))


def other_where_softmax(x, y, B: tj.constexpr):
    t = tj.load(x, (0, 0), (1, B), other=-tj.inf)
    m = tj.max(t, axis=1, keepdims=True)
    u = tj.min(t, axis=1, keepdims=True)
    tj.store(y, (0, 0), tj.exp(t - tj.where(m == -tj.inf, 1.0, m)) + tj.exp(t - tj.where(m == 0.0, 0.0, m))
             + tj.exp(t - tj.where(u == -tj.inf, 0.0, u)) + tj.exp(t - tj.where(m == -tj.inf, 0.0, u)))


def test_a_maximum_read_as_0_where_minus_inf_is_still_a_maximum():
    fn = folded(tile_ir(safe_max_softmax, [ArraySpec(F32, 2)] * 2, B=8))
    assert TileOp.EXP not in ops(fn) and ops(fn).count(TileOp.EXP2) == 1
    fn = folded(tile_ir(other_where_softmax, [ArraySpec(F32, 2)] * 2, B=8))
    assert ops(fn).count(TileOp.EXP) == 4 and TileOp.EXP2 not in ops(fn)     # 1.0, == 0.0, a min, m vs u


def test_float16_exp_is_untouched():
    fn = tile_ir(row_softmax, [ArraySpec(D.float16, 2)] * 2, B=8)
    before = ir.print_function(fn)
    assert ir.print_function(folded(fn)) == before and TileOp.EXP in ops(fn)


def attention_ir(causal=True, dtype=D.float16, block=16):
    specs = [ArraySpec(dtype, 4)] * 4 + [tj.specs.ScalarSpec(F32)]
    return tile_ir(attention.attention_kernel, specs, BM=block, BN=block, BD=16, CAUSAL=causal)


def test_attention_alpha_and_p_share_one_scaled_max_and_keep_the_exp_loc():
    fn = attention_ir()
    exp_locs = [o.loc for o in fn.walk() if o.op is TileOp.EXP]
    fn = folded(fn)
    assert TileOp.EXP not in ops(fn) and ops(fn).count(TileOp.EXP2) == 2
    assert ops(fn).count(TileOp.FMA) == 2
    scaled = [o for o in fn.walk() if o.op is TileOp.MUL and o.operands[0].owner is not None
              and o.operands[0].owner.op is TileOp.MAXIMUM]
    assert len(scaled) == 1 and scaled[0].result.type.shape == (16,)     # -m*L once, per row
    alpha, p = [o for o in fn.walk() if o.op is TileOp.FMA]
    assert alpha.operands[2] is scaled[0].result                         # m_i*L - m_new*L
    assert p.operands[2].owner.op is TileOp.BROADCAST                   # s*L + bcast(-m_new*L)
    assert [o.loc for o in fn.walk() if o.op is TileOp.EXP2] == exp_locs
    assert {o.loc for o in fn.walk() if o.op is TileOp.FMA} == set(exp_locs)


def test_registered_right_after_canonicalize():
    names = [s.name for s in PIPELINE]
    assert names.index("fold_exp") == names.index("canonicalize") + 1


def test_ptx_has_one_fma_and_one_ex2_per_softmax_element():
    fn = compile_to_simt(compile_tile_ir(row_softmax, [ArraySpec(F32, 2)] * 2, {"B": 128}), 1)
    ptx = codegen.compile_ptx(fn, "sm_90a")
    assert ptx.count("ex2.approx.ftz.f32") == 4 and ptx.count("fma.rn.f32") == 4   # 128 / 32 lanes


# -------------------------------------------------------------------------- running the examples
def launch(backend, pyfn, args, grid, num_warps=1, **consts):
    """Run ``pyfn`` with fold_exp applied: the folded tile IR interpreted, or the whole pipeline
    (which holds fold_exp) emulated.  Returns how many EXP2 the folded tile IR has."""
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    fn = tile_ir(pyfn, specs, **consts)
    if backend == "interpret":
        fn = folded(fn)
        interpret.run(fn, grid, args)
        return ops(fn).count(TileOp.EXP2)
    seen = {}
    simt_fn = compile_to_simt(fn, num_warps, dump=lambda name, text: seen.setdefault(name, text))
    emulate.run(simt_fn, grid, args)
    return seen["fold_exp"].count(" exp2 ")


BACKENDS = ["interpret", "emulate"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, cols", [(np.float32, 37), (np.float32, 64), (np.float16, 20)])
def test_softmax_example(backend, dtype, cols):
    x = (np.random.default_rng(cols).standard_normal((3, cols)) * 4).astype(dtype)
    y = np.empty_like(x)
    exp2s = launch(backend, softmax.softmax_kernel, [x, y], (3,), 2, BLOCK=tj.next_power_of_2(cols))
    assert exp2s == (1 if dtype == np.float32 else 0)      # float16 exp is computed as before
    tj.testing.assert_close(y, softmax.reference(x))


def max_outside_loop(x, y, B: tj.constexpr):
    """A maximum defined outside a loop and an exp inside it: -max*L is computed outside."""
    t = tj.load(x, (0,), (B,), other=-tj.inf)
    m = tj.max(t, axis=0)
    acc = tj.zeros((B,), tj.float32)
    for i in tj.range(0, 3):
        acc += tj.exp(t - m) * (i + 1)
    tj.store(y, (0,), acc)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pyfn", [vector_softmax, max_outside_loop])
def test_scalar_maximum_through_splat_runs(backend, pyfn):
    x = np.random.default_rng(1).standard_normal(27).astype(np.float32) * 5
    y = np.empty_like(x)
    assert launch(backend, pyfn, [x, y], (1,), 1, B=32) == 1
    want = np.exp(x.astype(np.float64) - x.max()) * (6 if pyfn is max_outside_loop else 1)
    np.testing.assert_allclose(y, want, rtol=0, atol=2e-6 * 6)


def test_maximum_outside_a_loop_is_scaled_once_outside_it():
    fn = folded(tile_ir(max_outside_loop, [ArraySpec(F32, 1)] * 2, B=32))
    loop = next(o for o in fn.body.ops if o.op is TileOp.FOR)
    scaled = next(o for o in fn.body.ops if o.op is TileOp.MUL)           # -m*L, once, outside
    fma = next(o for o in loop.regions[0].ops if o.op is TileOp.FMA)
    splat = fma.operands[2].owner
    assert splat in loop.regions[0].ops and splat.operands == [scaled.result]


ATTENTION_CASES = [  # backend, dtype, causal, seq, (batch, heads, kv_heads, dim)
    ("interpret", np.float16, True, 37, (2, 4, 2, 16)),
    ("interpret", np.float32, False, 37, (1, 2, 1, 12)),
    ("interpret", np.float32, True, 16, (1, 2, 2, 16)),
    ("emulate", np.float16, True, 20, (1, 2, 1, 16)),
    ("emulate", np.float32, False, 20, (1, 1, 1, 16)),
]


@pytest.mark.parametrize("backend, dtype, causal, seq, shape", ATTENTION_CASES)
def test_attention_example(backend, dtype, causal, seq, shape):
    batch, heads, kv_heads, dim = shape
    q, k, v = attention.example_inputs(np.random.default_rng(seq), batch, heads, kv_heads, seq, dim, dtype)
    o = np.empty_like(q)
    scale, block = 1.0 / math.sqrt(dim), 16
    args = [q, k, v, o, np.float32(scale)]
    grid = (-(-seq // block), batch * heads)
    exp2s = launch(backend, attention.attention_kernel, args, grid, 1,
                   BM=block, BN=block, BD=tj.next_power_of_2(dim), CAUSAL=causal)
    assert exp2s == 2
    tj.testing.assert_close(o, attention.reference(q, k, v, causal))


# ------------------------------------------------------------------- -inf and fully masked rows
def online_step(x, p_out, alpha_out, B: tj.constexpr):
    """One step of an online softmax from m_i = -inf: rows of x that are all -inf are fully masked."""
    s = tj.load(x, (0, 0), (B, B), other=-tj.inf)
    m_i = tj.full((B,), -tj.inf, tj.float32)
    m_new = tj.maximum(m_i, tj.max(s, axis=1))
    tj.store(alpha_out, (0,), tj.exp(m_i - m_new))
    tj.store(p_out, (0, 0), tj.exp(s - m_new[:, None]))


def masked_scores(rng, b=8):
    x = rng.standard_normal((b, b)).astype(np.float32) * 3
    x[0] = -np.inf                                    # fully masked row: m = -inf
    x[1, ::2] = -np.inf                               # partly masked row
    x[2, 1:] = -np.inf                                # one score left
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_row_gives_what_exp_of_s_minus_m_gave(backend):
    x = masked_scores(np.random.default_rng(0))
    before = [np.empty_like(x), np.empty(8, np.float32)]
    specs = [classify_argument("a", a)[0] for a in [x, *before]]
    interpret.run(tile_ir(online_step, specs, B=8), (1,), [x, *before])       # unfolded
    after = [np.empty_like(x), np.empty(8, np.float32)]
    assert launch(backend, online_step, [x, *after], (1,), 1, B=8) == 2
    p_before, alpha_before = before
    p, alpha = after
    assert np.isnan(p_before[0]).all() and np.isnan(alpha_before[0])        # -inf - (-inf) = NaN
    assert np.isnan(p[0]).all() and np.isnan(alpha[0])
    assert (p[1, ::2] == 0).all() and (p[2, 1:] == 0).all()                  # exp2(-inf) = 0 exactly
    assert (alpha[1:] == 0).all() and (alpha_before[1:] == 0).all()          # exp(-inf - m) = 0
    np.testing.assert_array_equal(np.isnan(p), np.isnan(p_before))
    np.testing.assert_allclose(p[1:], p_before[1:], rtol=0, atol=2e-6)


def test_minus_inf_times_log2e_plus_finite_stays_minus_inf():
    fma = elementwise_fn(TileOp.FMA, F32, [F32] * 3)
    a = np.array([-np.inf, -np.inf, -np.inf, 1.0], np.float32)
    nb = np.array([0.0, -3.0e38, np.inf, -np.inf], np.float32)
    with np.errstate(invalid="ignore"):                # -inf + inf: the NaN is the point
        folded_by_numpy = fma(a, np.float32(LOG2E), nb)
    for t in (folded_by_numpy, host_eval(TileOp.FMA, F32, a, np.full(4, LOG2E), nb)):
        assert t[0] == t[1] == -np.inf and np.isnan(t[2]) and t[3] == -np.inf
        assert list(np.exp2(t)[[0, 1, 3]]) == [0.0, 0.0, 0.0]


# -------------------------------------------------------------------------------- error bound
def fast_exp(a, b):
    """exp(a - b) as the folded IR computes it, with the interpreter's semantics and with the
    codegen's LLVM run on the host (ex2.approx swapped for an exact exp2)."""
    n = len(a)
    nb = (b * np.float32(-LOG2E)).astype(np.float32)
    reference = elementwise_fn(TileOp.EXP2, F32, [F32])(
        elementwise_fn(TileOp.FMA, F32, [F32] * 3)(a, np.float32(LOG2E), nb))
    t = host_eval(TileOp.FMA, F32, a, np.full(n, LOG2E, np.float32), nb)
    return reference, host_eval(TileOp.EXP2, F32, t)


@given(row_max=st.floats(-40, 40, width=32), seed=st.integers(0, 2**32 - 1))
def test_fast_form_within_2e_6_of_exp_on_minus_100_to_0(row_max, seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-100, 0, 2000), rng.uniform(-2, 0, 2000), [0.0, -1e-7, -100.0]])
    b = np.full(len(x), row_max, np.float32)
    a = (b + x).astype(np.float32)                     # a <= b: b is a row maximum
    exact = np.exp(a.astype(np.float64) - b.astype(np.float64))
    for got in fast_exp(a, b):
        assert np.abs(got - exact).max() <= 2e-6


@given(row_max=st.floats(-1e4, 1e4, width=32), seed=st.integers(0, 2**32 - 1))
def test_error_grows_only_with_the_row_max(row_max, seed):
    """The documented bound |b| * 2**-24 (+ 2e-7) holds for large maxima too."""
    x = np.random.default_rng(seed).uniform(-20, 0, 2000)
    b = np.full(len(x), row_max, np.float32)
    a = (b + x).astype(np.float32)
    exact = np.exp(a.astype(np.float64) - b.astype(np.float64))
    for got in fast_exp(a, b):
        assert np.abs(got - exact).max() <= abs(float(row_max)) * 2**-24 + 2e-7
