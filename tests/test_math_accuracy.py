"""Accuracy of the float32 math the compiler emits, in units in the last place (ulp) of the
float32 result, against NumPy in float64.

On the CPU the codegen's own LLVM runs on the host (``host_eval``: exact where the GPU has an
approximate instruction), which checks range reductions and polynomials; on the GPU (``-m gpu``)
the real kernels are swept over random and edge inputs and the table is printed.  The bounds
are those of the README's accuracy table."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.codegen.host import host_eval
from tilejit.ir import TileOp

EDGES = np.float32([0.0, -0.0, 1e-8, -1e-8, 1e-30, 1.4e-45, -1.4e-45, 1.1754944e-38, 0.5, 1.0, np.pi / 4,
                    np.pi / 2, np.pi, 3 * np.pi / 2, 1e5, 2 ** 20 - 1, 2 ** 20, 1e6, 123456.789, 1e10,
                    1e20, 3.4e38, -3.4e38, 88.7, -103.9, 89.0, -87.3])


def inputs(n: int = 40000, seed: int = 0) -> np.ndarray:
    """Edges, plus values spread over every float32 exponent (subnormals included)."""
    rng = np.random.default_rng(seed)
    mags = rng.random(n) * np.float64(10.0) ** rng.uniform(-45, 38.5, n)
    x = (mags * rng.choice([-1, 1], n)).astype(np.float32)
    return np.concatenate([EDGES, x[np.isfinite(x)]])


def max_ulp(got: np.ndarray, exact: np.ndarray) -> float:
    """The largest |got - exact| in ulps of the float32 nearest to ``exact`` (float64)."""
    exact32 = exact.astype(np.float32)
    ok = np.isfinite(exact) & np.isfinite(exact32)
    unit = np.spacing(np.abs(exact32[ok])).astype(np.float64)
    unit = np.maximum(unit, np.spacing(np.float32(0)))          # subnormal results: their own ulp
    err = np.abs(got[ok].astype(np.float64) - exact[ok]) / unit
    return float(err.max()) if err.size else 0.0


SPECIALS = np.float32([np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("op,ref", [(TileOp.SIN, np.sin), (TileOp.COS, np.cos)], ids=["sin", "cos"])
def test_sin_and_cos_are_within_one_ulp_over_the_whole_range(op, ref):
    x = inputs()
    with np.errstate(all="ignore"):
        assert max_ulp(host_eval(op, D.float32, x), ref(x.astype(np.float64))) <= 1.0
    assert np.isnan(host_eval(op, D.float32, SPECIALS)).all()


@pytest.mark.parametrize("op,ref", [(TileOp.LOG, np.log), (TileOp.LOG2, np.log2)], ids=["log", "log2"])
def test_log_is_within_one_ulp(op, ref):
    x = np.abs(inputs())
    with np.errstate(all="ignore"):
        assert max_ulp(host_eval(op, D.float32, x), ref(x.astype(np.float64))) <= 1.0


def test_tanh_is_within_one_ulp():
    x = np.concatenate([inputs(), (np.random.default_rng(5).standard_normal(20000) * 3).astype(np.float32)])
    with np.errstate(all="ignore"):
        assert max_ulp(host_eval(TileOp.TANH, D.float32, x), np.tanh(x.astype(np.float64))) <= 1.0
    got = host_eval(TileOp.TANH, D.float32, np.float32([-0.0, np.inf, -np.inf, np.nan]))
    assert np.signbit(got[0]) and got[1] == 1 and got[2] == -1 and np.isnan(got[3])


def test_exp_is_within_one_ulp_over_the_whole_range():
    """FMAs only (no approximate instruction), so the host run is what the GPU computes."""
    x = np.concatenate([inputs(), (np.random.default_rng(3).standard_normal(40000) * 30).astype(np.float32),
                        np.float32([88.72, 88.73, -103.97, -87.34, 0.34657359, -0.34657359])])
    with np.errstate(all="ignore"):
        assert max_ulp(host_eval(TileOp.EXP, D.float32, x), np.exp(x.astype(np.float64))) <= 1.0
    got = host_eval(TileOp.EXP, D.float32, np.float32([np.inf, -np.inf, np.nan, -0.0, 89.0, -104.0]))
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2]) and got[3] == 1
    assert got[4] == np.inf and got[5] == 0


def test_exp_has_no_flushed_subnormal_results():
    x = np.float32([-87.5, -90.0, -95.0, -100.0, -103.0])
    got = host_eval(TileOp.EXP, D.float32, x)
    assert (got > 0).all() and max_ulp(got, np.exp(x.astype(np.float64))) <= 2


def test_sin_keeps_tiny_arguments_and_the_sign_of_zero():
    got = host_eval(TileOp.SIN, D.float32, np.float32([1e-8, -1e-8, 1.4e-45, -0.0, 0.0]))
    np.testing.assert_array_equal(got, np.float32([1e-8, -1e-8, 1.4e-45, -0.0, 0.0]))
    assert np.signbit(got[3]) and not np.signbit(got[4])


# ------------------------------------------------------------------------------------ on the GPU
# bound per function: the README's table.  CUDA's documented float32 maxima (CUDA Math API, full
# range) are sin/cos/exp/tanh 2, log 1, sqrt and / 0.5 (correctly rounded), pow 4, erf 2.
BOUNDS = {"sin": 1, "cos": 1, "exp": 1, "log": 1, "tanh": 1, "sqrt": 0.5, "div": 0.5, "pow": 1, "erf": 1}


@tj.kernel
def math_kernel(x, y, out, B: tj.constexpr):
    i = tj.program_id(0) * B
    t = tj.load(x, (i,), (B,))
    u = tj.load(y, (i,), (B,))
    tj.store(out, (0, i), (tj.sin(t))[None, :])
    tj.store(out, (1, i), (tj.cos(t))[None, :])
    tj.store(out, (2, i), (tj.exp(t))[None, :])
    tj.store(out, (3, i), (tj.log(t))[None, :])
    tj.store(out, (4, i), (tj.tanh(t))[None, :])
    tj.store(out, (5, i), (tj.sqrt(t))[None, :])
    tj.store(out, (6, i), (t / u)[None, :])
    tj.store(out, (7, i), (tj.abs(t) ** (u * 4))[None, :])
    tj.store(out, (8, i), (tj.erf(t))[None, :])


@pytest.mark.gpu
def test_gpu_math_ulp_table():
    x = inputs(200000)
    small = (np.random.default_rng(1).standard_normal(x.size) * 30).astype(np.float32)
    x = np.concatenate([x, small])                       # where exp, tanh and log are interesting
    y = np.random.default_rng(2).standard_normal(x.size).astype(np.float32)
    out = np.zeros((9, x.size), np.float32)
    math_kernel[(tj.cdiv(x.size, 1024),)](x, y, out, B=1024)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = {"sin": np.sin(xd), "cos": np.cos(xd), "exp": np.exp(xd), "log": np.log(xd),
                 "tanh": np.tanh(xd), "sqrt": np.sqrt(xd), "div": xd / yd,
                 "pow": np.abs(xd) ** (yd * 4), "erf": np.frompyfunc(math.erf, 1, 1)(xd).astype(np.float64)}
    table = {name: max_ulp(out[i], exact[name]) for i, name in enumerate(exact)}
    print("\nfloat32 max ulp on the GPU:", {k: round(v, 2) for k, v in table.items()})
    assert np.isnan(out[0][np.isnan(exact["sin"])]).all()
    over = {k: v for k, v in table.items() if v > BOUNDS[k]}
    assert not over, f"over CUDA's bounds {BOUNDS}: {over}"


@tj.kernel
def sine(x, y, B: tj.constexpr):
    tj.store(y, (0,), tj.sin(tj.load(x, (0,), (B,))))


def test_fast_math_is_a_launch_option_that_selects_the_approximate_instructions(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs, consts, _ = sine.specialise(sine.bind((np.zeros(8, np.float32),) * 2, {"B": 128}))
    accurate = sine.compile(specs, consts, 4, "cuda").artifact.ptx
    fast = sine.compile(specs, consts, 4, "cuda", fast_math=True).artifact.ptx
    assert "sin.approx" not in accurate and "sin.approx" in fast
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x, y = np.float32([1e-8, 0.5, 3.0]), np.zeros(3, np.float32)
    sine[(1,)](x, y, B=4, fast_math=True)            # the CPU backends stay exact
    np.testing.assert_allclose(y, np.sin(x), rtol=1e-6)
    with pytest.raises(tj.LaunchError, match="fast_math"):
        sine[(1,)](x, y, B=4, fast_math="yes")


@tj.kernel
def narrow_math(x, y, out, B: tj.constexpr):
    i = tj.program_id(0) * B
    t = tj.load(x, (i,), (B,))
    u = tj.load(y, (i,), (B,))
    tj.store(out, (0, i), (tj.exp(t))[None, :])
    tj.store(out, (1, i), (t / u)[None, :])


@pytest.mark.parametrize("dtype,fast,approx", [(np.float32, False, False), (np.float32, True, True),
                                               (tj.bfloat16.np, False, True), (np.float16, False, True)])
def test_exp_takes_ex2_approx_only_when_asked_or_when_rounded_to_16_bits(dtype, fast, approx, monkeypatch, tmp_path):
    """float32 exp is FMAs only (1 ulp) unless ``fast_math``; a 16-bit result hides ex2.approx's
    few float32 ulps, so it takes the cheap form (and division takes div.full, not div.rn)."""
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs, consts, _ = narrow_math.specialise(narrow_math.bind((np.zeros(8, dtype),) * 2 + (np.zeros((2, 8), dtype),),
                                                               {"B": 128}))
    ptx = narrow_math.compile(specs, consts, 4, "cuda", fast_math=fast).artifact.ptx
    assert ("ex2.approx" in ptx) == approx
    assert ("div.full.f32" in ptx) == (dtype != np.float32) and ("div.rn.f32" in ptx) == (dtype == np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [tj.bfloat16, tj.float16], ids=["bf16", "f16"])
def test_gpu_16_bit_exp_and_division_round_like_the_exact_values(dtype):
    """The cheap forms for 16-bit results (ex2.approx, div.full) give the correctly rounded
    16-bit value but for near-ties: at most one 16-bit ulp apart, and rarely (0.14% of these
    inputs on the H200, 2026-12-03)."""
    rng = np.random.default_rng(4)
    n = 1 << 18
    x = (rng.standard_normal(n) * (30 if dtype is tj.bfloat16 else 4)).astype(dtype.np)
    y = rng.standard_normal(n).astype(dtype.np)
    y[y == 0] = 1
    out = np.zeros((2, n), dtype.np)
    narrow_math[(n // 1024,)](x, y, out, B=1024)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = [np.exp(xd).astype(dtype.np), (xd / yd).astype(dtype.np)]
    for got, want in zip(out, exact):
        ok = np.isfinite(want.astype(np.float64))
        g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
        ulp = np.spacing(np.abs(w).astype(dtype.np)).astype(np.float64)
        assert (np.abs(g - w) <= ulp).all() and (g != w).mean() < 1e-2


def _division_operands(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random bit patterns (every exponent, subnormals, NaN, inf), every pair of special values,
    quotients that overflow or underflow, and ordinary normals."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, (2, n), dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -3.0, 7.0, 0.1, 1e-45, -1e-40,
                        1.1754944e-38, 3.4028235e38, -3.4028235e38], np.float32)
    sa, sb = (g.ravel() for g in np.meshgrid(special, special))
    big = rng.random(n, np.float32) * np.float32(3e38)
    tiny = rng.random(n, np.float32) * np.float32(1e-3)
    normal = rng.standard_normal((2, n)).astype(np.float32)
    return (np.concatenate([bits[0], sa, big, tiny, normal[0]]),
            np.concatenate([bits[1], sb, tiny, big, normal[1]]))


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


def test_inline_division_is_correctly_rounded():
    """One-register float32 divisions (a row's mean) divide in float64 from a 22-bit reciprocal
    estimate (the host stands in for rcp.approx.ftz.f64 with 22 bits): the float32 result must
    be NumPy's to the bit, signed zeros, infinities and NaN included."""
    a, b = _division_operands(200000, 5)
    with np.errstate(all="ignore"):
        want = a / b
    got = host_eval(TileOp.TRUEDIV, D.float32, a, b, inline_division=True)
    assert _same_bits(got, want).all(), [(x, y) for x, y in zip(a[~_same_bits(got, want)][:5], b[~_same_bits(got, want)][:5])]


@tj.kernel
def mean_and_scale(x, y, out, n):
    t = tj.load(x, (tj.program_id(0),), (1,))
    u = tj.load(y, (tj.program_id(0),), (1,))
    tj.store(out, (tj.program_id(0),), t / u)               # one register: the inline form
    tj.store(out, (tj.program_id(0) + n,), tj.load(x, (0,), (256,)).sum(0, keepdims=True) / n)


def test_scalar_division_has_no_call_and_costs_layernorm_fewer_registers(tmp_path, monkeypatch):
    """ptxas expands div.rn.f32 with a call; with two scalar divisions (mean and variance by n),
    a 256-column bf16 layernorm needed 62 registers (1 warp, 8 to a CTA: 4 CTAs per SM)."""
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    import sys
    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/examples")
    from layernorm import layernorm_kernel
    x, w = np.zeros((64, 256), tj.bfloat16.np), np.zeros(256, tj.bfloat16.np)
    specs, consts, _ = layernorm_kernel.specialise(layernorm_kernel.bind((x, w, w, x, 1e-5), {"BLOCK": 256}))
    art = layernorm_kernel.compile(specs, consts, None, "cuda").artifact
    assert "div.rn.f32" not in art.ptx and "rcp.approx.ftz.f64" in art.ptx
    if art.registers:
        assert art.registers <= 48, art.registers


@pytest.mark.gpu
@pytest.mark.parametrize("operands", [lambda: _division_operands(1 << 16, 6), lambda: _fast_range_operands(1 << 20, 8)],
                         ids=["special and random", "fast range, a million"])
def test_gpu_scalar_division_is_correctly_rounded(operands):
    """Special and random operands (the float64 path and the fast one), and a million quotients
    on the fast path with the hardware's reciprocal estimate (MUFU.RCP): NumPy's bits."""
    a, b = operands()
    out = np.zeros(2 * len(a), np.float32)
    mean_and_scale[(len(a),)](a, b, out, len(a))
    with np.errstate(all="ignore"):
        want = a / b
    assert _same_bits(out[:len(a)], want).all()


def test_pow_is_within_one_ulp_and_keeps_c_pows_special_values():
    """x ** y in float64 from log2 |x| (about 47 bits) and one rounding: even results near 2**128,
    where y log2 x is large, stay within an ulp (the float32 ex2.approx form was ~110 ulp there;
    it is now the fast_math=True form)."""
    rng = np.random.default_rng(7)
    x = np.concatenate([np.abs(inputs(60000)), rng.uniform(0, 4, 60000).astype(np.float32),
                        rng.uniform(0.9, 1.1, 60000).astype(np.float32)])
    y = np.concatenate([(rng.standard_normal(60000 + EDGES.size) * 4).astype(np.float32),
                        rng.uniform(-60, 60, 60000).astype(np.float32),
                        rng.uniform(-900, 900, 60000).astype(np.float32)])[:x.size]
    with np.errstate(all="ignore"):
        assert max_ulp(host_eval(TileOp.POW, D.float32, x, y),
                       np.power(x.astype(np.float64), y.astype(np.float64))) <= 1.0
        special = np.float32([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1.4e-45, np.inf, -np.inf, np.nan])
        sx, sy = (a.ravel() for a in np.meshgrid(special, np.float32([0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5,
                                                                       -0.5, 1e10, -1e10, np.inf, -np.inf, np.nan])))
        got, want = host_eval(TileOp.POW, D.float32, sx, sy), np.power(sx, sy)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    assert same.all(), [(a, b, g, w) for a, b, g, w, ok in zip(sx, sy, got, want, same) if not ok]


def test_erf_is_within_one_ulp_and_keeps_its_special_values():
    x = np.concatenate([inputs(), (np.random.default_rng(4).standard_normal(40000) * 2).astype(np.float32),
                        np.float32([0.99999994, 1.0, 1.0000001, 3.9999998, 4.0, 3.83, -3.83])])
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert max_ulp(host_eval(TileOp.ERF, D.float32, x), exact) <= 1.0
    got = host_eval(TileOp.ERF, D.float32, np.float32([0.0, -0.0, 1.4e-45, -1.4e-45, np.inf, -np.inf, np.nan, 40.0]))
    np.testing.assert_array_equal(got[:6], np.float32([0.0, -0.0, 1.4e-45, -1.4e-45, 1.0, -1.0]))
    assert np.signbit(got[1]) and np.isnan(got[6]) and got[7] == 1


@tj.kernel
def erf_two_ways(x, y, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    tj.store(y, (0, 0), tj.erf(t)[None, :])
    tj.store(y, (1, 0), math.erf(t)[None, :])                 # math.erf on a tile is tj.erf


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_erf_matches_math_erf_on_the_cpu_backends(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.concatenate([(np.random.default_rng(6).standard_normal(120) * 2), [0.0, -0.0, 5.0, -np.inf]]).astype(np.float32)
    y = np.zeros((2, x.size), np.float32)
    erf_two_ways[(1,)](x, y, B=x.size)
    want = np.float32([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_array_equal(y[0], want)
    np.testing.assert_array_equal(y[1], want)


def _fast_range_operands(n: int, seed: int):
    rng = np.random.default_rng(seed)
    a, b = (((rng.random(n) + 1) * np.exp2(rng.integers(-70, 71, n).astype(np.float64))
             * rng.choice([-1, 1], n)).astype(np.float32) for _ in range(2))
    b[:n // 20] = np.float32(1) - np.float32(2 ** -24) * rng.integers(1, 64, n // 20).astype(np.float32)
    a[n // 20:n // 20 + 100] = np.float32(2.0 ** -60)         # the fast range's edges
    b[n // 20 + 100:n // 20 + 200] = np.float32(2.0 ** 60)
    return a, b


def test_inline_division_fast_range_is_correctly_rounded():
    """Operands of magnitude 2**-70 to 2**70 (most on the fast path, ``Ctx.fast_div_f32``: a
    reciprocal estimate of 22 bits here, one Newton step, two residual corrections; the rest on
    the float64 path), divisors just under 1 (all-ones significands) among them: NumPy's bits."""
    a, b = _fast_range_operands(400000, 7)
    with np.errstate(all="ignore"):
        want = a / b
    got = host_eval(TileOp.TRUEDIV, D.float32, a, b, inline_division=True)
    assert _same_bits(got, want).all()
