"""float64 ``tj.exp``, ``tj.exp2``, ``tj.log`` and ``tj.log2`` (``tilejit/frontend/mathlib.py``:
arithmetic, round, bitcast and integer shifts on every backend), against NumPy in long double
over the whole range: subnormal results and arguments, overflow, zeros, infinities and NaN."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tilejit as tj

ALL = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]
N = 2048


@tj.kernel
def exp_log(x, e, e2, lg, lg2):
    t = tj.load(x, (0,), (2048,))
    tj.store(e, (0,), tj.exp(t))
    tj.store(e2, (0,), tj.exp2(t))
    a = tj.abs(t)
    tj.store(lg, (0,), math.log(a))
    tj.store(lg2, (0,), tj.log2(a))


def ulps(got, exact) -> float:
    """The largest error in ulps of the float64 nearest ``exact`` (long double), finite nonzero results."""
    exact64 = exact.astype(np.float64)
    ok = np.isfinite(exact64) & (exact64 != 0)
    return float((np.abs(got[ok].astype(np.longdouble) - exact[ok]) / np.spacing(np.abs(exact64[ok]))).max())


@pytest.mark.parametrize("backend", ALL)
def test_float64_exp_and_log_within_an_ulp_or_two(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(-760, 720, N // 2),
                        rng.choice([-1, 1], N // 2) * 10.0 ** rng.uniform(-320, 308, N // 2)])
    x[:12] = [0, 1, -1, 709.78, -745.1, 1e-310, -1e-320, np.nan, np.inf, -np.inf, 0.5, 1024]
    x[12:76] = 1 + np.arange(-32, 32) * 2.0 ** -52            # log near 1: every mantissa bit counts
    outs = [np.full(N, -7.0) for _ in range(4)]
    exp_log[(1,)](x, *outs)
    e, e2, lg, lg2 = outs
    xl, al = x.astype(np.longdouble), np.abs(x).astype(np.longdouble)
    with np.errstate(all="ignore"):
        # measured on the CPU backends (6 seeds; log near 1 too): 1.04 / 1.08 / 0.56 / 1.31 ulp
        assert ulps(e, np.exp(xl)) <= 1.5 and ulps(e2, np.exp2(xl)) <= 1.5
        assert ulps(lg, np.log(al)) <= 1 and ulps(lg2, np.log2(al)) <= 1.5
        for got, ref in ((e, np.exp(x)), (e2, np.exp2(x)), (lg, np.log(np.abs(x))), (lg2, np.log2(np.abs(x)))):
            special = ~np.isfinite(ref) | (ref == 0)
            np.testing.assert_array_equal(got[special], ref[special])


def test_float64_exp_compiles_to_ptx_that_assembles():
    x = np.zeros(N)
    info = exp_log.inspect(x, x, x, x, x)
    if info.backend != "cuda":
        pytest.skip("no nvJitLink here")
    assert "cvt.rni.f64" in info.ptx and "shl.b64" in info.ptx and info.spills == 0


@tj.kernel
def hyperbolic(x, l1p, em1, sh, ch, th, sg):
    t = tj.load(x, (0,), (2048,))
    tj.store(l1p, (0,), tj.log1p(tj.abs(t)))
    tj.store(em1, (0,), tj.expm1(t))
    tj.store(sh, (0,), tj.sinh(t))
    tj.store(ch, (0,), tj.cosh(t))
    tj.store(th, (0,), tj.tanh(t))
    tj.store(sg, (0,), tj.sigmoid(t))


@pytest.mark.parametrize("backend", ALL)
def test_float64_functions_built_on_exp_and_log(backend, monkeypatch):
    """log1p, expm1, sinh, cosh, tanh and sigmoid of float64 tiles reuse the float32 compositions
    on the float64 exp and log (measured: 1.8 / 1.6 / 2.8 / 2.4 / 2.1 / 1.9 ulp)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.uniform(-700, 700, N // 4), rng.choice([-1, 1], 3 * N // 4) * 10.0 ** rng.uniform(-300, 2.8, 3 * N // 4)])
    x[:6] = [0, 1e-300, -1e-300, 709, -709, 0.5]
    outs = [np.zeros(N) for _ in range(6)]
    hyperbolic[(1,)](x, *outs)
    xl = x.astype(np.longdouble)
    with np.errstate(all="ignore"):
        refs = [np.log1p(np.abs(xl)), np.expm1(xl), np.sinh(xl), np.cosh(xl), np.tanh(xl), 1 / (1 + np.exp(-xl))]
        for got, ref, bound in zip(outs, refs, (2.5, 2.5, 3.5, 3, 3, 2.5)):
            assert ulps(got, ref) <= bound


@tj.kernel
def erf64(x, y, z):
    t = tj.load(x, (0,), (2048,))
    tj.store(y, (0,), tj.erf(t))
    tj.store(z, (0,), math.erf(t))


@pytest.mark.parametrize("backend", ALL)
def test_float64_erf_within_3_ulp_of_math_erf(backend, monkeypatch):
    """float64 erf: Taylor below 1.5, 1 - erfc (``tj.erfc``'s float64 form) up to 6, 1 above
    (measured against ``math.erf``: at most 2 ulp; 1 below |x| = 1)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-7, 7, N // 2), rng.choice([-1, 1], N // 2) * 10.0 ** rng.uniform(-320, 1, N // 2)])
    x[:10] = [0, -0.0, np.inf, -np.inf, np.nan, 1.5, 6.0, 5.999999, 1.4999999, 5e-324]
    y, z = np.full(N, -7.0), np.full(N, -7.0)
    erf64[(1,)](x, y, z)
    np.testing.assert_array_equal(y, z)
    ref = np.array([math.erf(v) for v in x])
    fin = np.isfinite(x) & (ref != 0)
    assert (np.abs(y[fin] - ref[fin]) / np.spacing(np.abs(ref[fin]))).max() <= 3
    np.testing.assert_array_equal(y[:5], ref[:5])
    assert np.signbit(y[1]) and y[9] == ref[9]


def exact_erfc(x: float) -> float:
    """erfc in 60-digit decimals: 1 - erf's Taylor series below 3, exp(-x²) / (sqrt(pi) times
    the continued fraction x + (1/2) / (x + 1 / (x + (3/2) / ...)), 300 terms, from 3 on."""
    from decimal import Decimal, localcontext
    with localcontext() as ctx:
        ctx.prec = 60
        a = Decimal(abs(x))
        root_pi = (Decimal(_pi_times(220)) / Decimal(2) ** 220).sqrt()
        if a < 3:
            total, n, term = Decimal(0), 0, a
            while n < 8 or abs(term) > Decimal(10) ** -58:
                term = (-1) ** n * a ** (2 * n + 1) / (math.factorial(n) * (2 * n + 1))
                total, n = total + term, n + 1
            r = 1 - 2 * total / root_pi
        else:
            f = a
            for k in range(300, 0, -1):
                f = a + Decimal(k) / 2 / f
            r = (-a * a).exp() / (root_pi * f)
        return float(2 - r if x < 0 else r)


@tj.kernel
def erfc64(x, y, B: tj.constexpr):
    tj.store(y, (0,), tj.erfc(tj.load(x, (0,), (B,))))


@pytest.mark.parametrize("backend", ALL)
def test_float64_erfc_within_3_ulp_down_to_the_subnormals(backend, monkeypatch):
    """float64 erfc: 1 - erf below 1/2, exp(-x²) times Taylor pieces of exp(x²) erfc(x) to 4, its
    continued fraction from 4 (3 ulp measured against mpmath; ``math.erfc`` itself is 2.4 ulp
    off in places), a subnormal result within one of its units, 2 - erfc(-x) below 0."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(9)
    n = 512
    x = np.concatenate([rng.uniform(-6, 6, n // 2), rng.uniform(0, 27.5, n // 4),
                        rng.choice([-1, 1], n // 4) * np.exp(rng.uniform(-40, 1, n // 4))])
    x[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, 4.0, 26.6, 3.75, 27.3]
    y = np.full(n, -7.0)
    erfc64[(1,)](x, y, B=n)
    np.testing.assert_array_equal(y[:5], [1.0, 1.0, 0.0, 2.0, np.nan])
    ref = np.array([exact_erfc(float(v)) for v in x[5:]])
    got = y[5:]
    normal = ref >= np.finfo(np.float64).tiny
    assert (np.abs(got[normal] - ref[normal]) / np.spacing(ref[normal])).max() <= 3
    assert (np.abs(got[~normal] - ref[~normal]) <= 5e-324).all() and (~normal).any()


@tj.kernel
def fma64_kernel(a, b, c, y):
    tj.store(y, (0,), tj.fma(tj.load(a, (0,), (64,)), tj.load(b, (0,), (64,)), tj.load(c, (0,), (64,))))


def exact_fma(a, b, c):
    from fractions import Fraction
    return float(Fraction(a) * Fraction(b) + Fraction(c))


@pytest.mark.parametrize("backend", ALL)
def test_float64_fma_rounds_once(backend, monkeypatch):
    """float64 ``tj.fma``: DFMA on the GPU; on the CPU backends ``math.fma`` (3.13) or exact
    rationals.  a * b + c in floats rounds twice and differs on the first rows."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(9)
    a, b, c = (rng.standard_normal(64) * 10.0 ** rng.uniform(-20, 20, 64) for _ in range(3))
    e = 2.0 ** -30
    rows = [(1 + e, 1 - e, -1.0), (1 + 2 ** -52, 1 + 2 ** -52, -1.0), (1e308, 1.9, -1e308),   # a * b overflows
            (0.0, -1.0, 0.0), (-0.0, 1.0, -0.0), (1.0, 1.0, -1.0), (np.inf, 0.0, 1.0), (np.nan, 1.0, 1.0),
            (np.inf, 1.0, -np.inf), (3.0, 1e-310, 1e-320)]
    for i, row in enumerate(rows):
        a[i], b[i], c[i] = row
    y = np.zeros(64)
    fma64_kernel[(1,)](a, b, c, y)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    with np.errstate(all="ignore"):
        want = np.array([exact_fma(*v) if f else v[0] * v[1] + v[2] for v, f in zip(zip(a, b, c), finite)])
        assert np.isinf(a[2] * b[2]) and a[0] * b[0] + c[0] == 0.0
    np.testing.assert_array_equal(y, want)
    assert y[0] == -2.0 ** -60                                         # rounded once, not twice
    assert y[2] == exact_fma(1e308, 1.9, -1e308) and np.signbit(y[4]) and not np.signbit(y[3]) and not np.signbit(y[5])


@tj.kernel
def powers64(x, p0, p1, p2, pm1, ph):
    t = tj.load(x, (0,), (64,))
    tj.store(p0, (0,), t ** 0)
    tj.store(p1, (0,), t ** 1)
    tj.store(p2, (0,), t ** 2.0)
    tj.store(pm1, (0,), t ** -1)
    tj.store(ph, (0,), t ** 0.5)


@pytest.mark.parametrize("backend", ALL)
def test_float64_constant_powers_are_numpys(backend, monkeypatch):
    """``x ** 0 / 1 / 2 / -1 / 0.5`` on float64 tiles: one rounding each, bit for bit NumPy's
    ``np.power`` (whose fast paths give -0 and NaN for -0 and -inf under 0.5); other exponents are
    refused, naming these."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(10)
    x = rng.choice([-1, 1], 64) * 10.0 ** rng.uniform(-200, 200, 64)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-320, -4.0, 1e200]
    outs = [np.full(64, -7.0) for _ in range(5)]
    powers64[(1,)](x, *outs)
    with np.errstate(all="ignore"):
        for got, y in zip(outs, (0, 1, 2.0, -1, 0.5)):
            np.testing.assert_array_equal(got, np.power(x, y))
            np.testing.assert_array_equal(np.signbit(got), np.signbit(np.power(x, y)))


@tj.kernel
def power64(x, y, z, B: tj.constexpr):
    tj.store(z, (0,), tj.load(x, (0,), (B,)) ** tj.load(y, (0,), (B,)))


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("seed", [0, 1])
def test_float64_powers_within_an_ulp_or_two_and_cs_special_cases(backend, seed, monkeypatch):
    """Any float64 ``x ** y``: ln|x| and y ln|x| in double-double (measured: within 1 ulp of
    mpmath), subnormal results to their last unit, overflow to inf, and NumPy's results (C's pow)
    for every pair of zeros, ones, infinities, NaN and negative bases, signs included."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(seed)
    n = 1024
    x = np.concatenate([np.exp(rng.uniform(-700, 700, n // 4)), rng.uniform(0, 3, n // 4),
                        1 + rng.uniform(-1e-6, 1e-6, n // 4), -rng.uniform(0, 10, n // 4)])
    y = np.concatenate([rng.uniform(-1, 1, n // 4), rng.uniform(-300, 300, n // 4), rng.uniform(-1e8, 1e8, n // 4),
                        np.round(rng.uniform(-30, 30, n // 4))])
    special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, -2.0, 0.5]
    a, b = np.meshgrid(special, special + [3.0, -3.0, -0.5, 1023.5, -1074.0, 1e300])
    x[:a.size], y[:a.size] = a.ravel(), b.ravel()
    z = np.full(n, -7.0)
    power64[(1,)](x, y, z, B=n)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float64).tiny)
    assert (np.abs(z[normal] - want[normal]) / np.spacing(np.abs(want[normal]))).max() <= 2
    exact = np.isinf(want) | (want == 0)
    np.testing.assert_array_equal(z[exact], want[exact])
    np.testing.assert_array_equal(np.signbit(z[exact]), np.signbit(want[exact]))
    subnormal = ~normal & ~exact & ~np.isnan(want)
    assert subnormal.any() and (np.abs(z[subnormal] - want[subnormal]) <= 5e-324).all()
    np.testing.assert_array_equal(np.isnan(z), np.isnan(want))
    assert np.isinf(want).sum() > 10


@tj.kernel
def matmul64(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float64)
    for k in range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


@pytest.mark.parametrize("backend", ALL)
def test_float64_dot_accumulates_in_float64(backend, monkeypatch):
    """``tj.dot`` of float64 tiles into a float64 accumulator (FMAs in float64; ragged edges):
    within a few ulps of NumPy's float64 matmul, far below float32's 1e-7."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((40, 70)), rng.standard_normal((70, 24))
    c = np.full((40, 24), np.nan)
    matmul64[(3, 2)](a, b, c, BM=16, BN=16, BK=16)
    np.testing.assert_allclose(c, a @ b, rtol=0, atol=1e-13)
    assert matmul64.inspect(a, b, c, BM=16, BN=16, BK=16).num_warps == 4


def test_a_float32_accumulator_for_float64_operands_is_refused():
    from conftest import body_error
    from tilejit.specs import ArraySpec
    body_error("tj.store(y, (0, 0), tj.dot(t, t, tj.zeros((16, 16), tj.float32)))", r"dot: acc must be a tile<16x16xfloat64>, got tile<16x16xfloat32>",
               [ArraySpec(tj.float64, 2)] * 2, {"B": 16}, head="    t = tj.load(x, (0, 0), (16, 16))\n")


def _pi_times(bits: int) -> int:
    """floor(pi * 2**bits) by Takano's formula (not the Machin formula the codegen's table uses)."""
    n = bits + 64

    def atan_inverse(k: int) -> int:
        total, term, i, sign = 0, (1 << n) // k, 1, 1
        while term:
            total, term, i, sign = total + sign * (term // i), term // (k * k), i + 2, -sign
        return total
    return 4 * (12 * atan_inverse(49) + 32 * atan_inverse(57) - 5 * atan_inverse(239) + 12 * atan_inverse(110443)) >> 64


PI_BITS = 1400
PI = Fraction(_pi_times(PI_BITS), 1 << PI_BITS)


def exact_sin_cos(x: float) -> tuple:
    """sin and cos of a finite float64 to about half an ulp: x reduced by pi/2 exactly in
    rationals, then the C library's sin and cos on the reduced value (|y| <= pi/4, where they are
    accurate) with its tail folded in."""
    v = Fraction(x) * 2 / PI
    q = round(v)
    y = (v - q) * PI / 2
    y0 = float(y)
    y1 = float(y - Fraction(y0))
    s, c = math.sin(y0) + math.cos(y0) * y1, math.cos(y0) - math.sin(y0) * y1
    return [(s, c), (c, -s), (-s, -c), (-c, s)][q % 4]


def trig_arguments(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-10, 10, n // 4), rng.uniform(-2.0 ** 21, 2.0 ** 21, n // 4),
                        rng.choice([-1, 1], n // 2) * np.exp(rng.uniform(-30, 709, n // 2))])
    # near multiples of pi/2 (the reductions' hardest), float64's largest, the path boundary
    x[:8] = [math.pi / 2, math.pi, 6381956970095103 * 2.0 ** 797, 1.7976931348623157e308, 2.0 ** 20,
             np.nextafter(2.0 ** 20, 0), 5.319372648326541e+255, 1e22]
    return x


def trig_ulps(got: np.ndarray, want: np.ndarray) -> float:
    return float((np.abs(got - want) / np.spacing(np.abs(want))).max())


@pytest.mark.parametrize("seed", [0, 1])
def test_float64_sin_and_cos_llvm_within_an_ulp_on_the_host(seed):
    """The GPU's LLVM for float64 sin and cos, run on the host: within an ulp of the exact values
    from 2**-30 to float64's largest (Payne-Hanek with 1,280 bits of 2/pi above 2**20)."""
    from tilejit.codegen.host import host_eval
    from tilejit.ir import TileOp
    x = trig_arguments(seed, 1024)
    want = np.array([exact_sin_cos(float(v)) for v in x])
    # measured: 0.77 / 0.71 ulp against mpmath (NumPy's own cos is off by 8 ulp at 5.3e255)
    assert trig_ulps(host_eval(TileOp.SIN, tj.float64, x), want[:, 0]) <= 1.2
    assert trig_ulps(host_eval(TileOp.COS, tj.float64, x), want[:, 1]) <= 1.2
    special = np.array([0.0, -0.0, 5e-324, -1e-300, np.inf, -np.inf, np.nan])
    with np.errstate(invalid="ignore"):
        for op, ref in ((TileOp.SIN, np.sin), (TileOp.COS, np.cos)):
            got = host_eval(op, tj.float64, special)
            np.testing.assert_array_equal(got, ref(special))
            np.testing.assert_array_equal(np.signbit(got[:4]), np.signbit(ref(special[:4])))   # sin(-0) = -0


@tj.kernel
def sin_cos(x, s, c, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    tj.store(s, (0,), tj.sin(t))
    tj.store(c, (0,), math.cos(t))


@pytest.mark.parametrize("backend", ALL)
def test_float64_sin_and_cos_in_a_kernel(backend, monkeypatch):
    """float64 tiles keep float64 through sin and cos on every backend (the CPU backends use
    NumPy's, the GPU the LLVM above), within an ulp or two of the exact values."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = trig_arguments(7, 512)
    s, c = np.zeros(512), np.zeros(512)
    sin_cos[(1,)](x, s, c, B=512)
    want = np.array([exact_sin_cos(float(v)) for v in x])
    assert trig_ulps(s, want[:, 0]) <= 1.2
    # NumPy's cos (the CPU backends) is 8 ulp off at 5.3e255: the bound is the GPU's elsewhere
    assert trig_ulps(c[x != 5.319372648326541e+255], want[x != 5.319372648326541e+255, 1]) <= 1.2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_float64_sin_ptx_reads_the_two_over_pi_table_and_assembles(arch):
    from tilejit.backends import cuda
    from conftest import assemble_or_skip
    x = np.zeros(256)
    specs, consts, _ = sin_cos.specialise(sin_cos.bind((x, x, x), {"B": 256}))
    ptx = cuda.build(sin_cos.tile_ir(specs, consts), 4, arch, stop_after="ptx")["ptx"]
    assert ".global .align 8 .b8 tilejit_two_over_pi[176]" in ptx and "cvt.rni.f64.f64" in ptx
    assert "sin.approx" not in ptx and "cvt.rn.f32.f64" not in ptx
    assemble_or_skip(ptx, arch)


@tj.kernel
def arc_tangents(x, y, a, s, c, t2, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    u = tj.load(y, (0,), (B,))
    tj.store(a, (0,), tj.atan(t))
    v = tj.where(tj.abs(t) <= 1, t, 1.0 / t)
    tj.store(s, (0,), tj.asin(v))
    tj.store(c, (0,), math.acos(v))
    tj.store(t2, (0,), tj.atan2(u, t))


@pytest.mark.parametrize("backend", ALL)
def test_float64_atan_asin_acos_atan2(backend, monkeypatch):
    """fdlibm's atan in float64 (the same composition on every backend), and asin / acos / atan2
    from it: within 1 / 2 / 2 / 1 ulp of NumPy's, with its NaNs, infinities and zeros."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(4)
    n = 2048
    x = np.concatenate([rng.uniform(-3, 3, n // 4), rng.choice([-1, 1], n // 4) * np.exp(rng.uniform(-40, 40, n // 4)),
                        rng.uniform(-1, 1, n // 4), 1 - np.exp(rng.uniform(-36, -1, n // 4))])
    y = rng.permutation(x) * np.exp(rng.uniform(-3, 3, n))
    x[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e300, 5e-324, 0.4375, 2.4375, 2.0 ** 66]
    outs = [np.full(n, -7.0) for _ in range(4)]
    arc_tangents[(1,)](x, y, *outs, B=n)
    with np.errstate(all="ignore"):
        v = np.where(np.abs(x) <= 1, x, 1 / x)
        refs = [np.arctan(x), np.arcsin(v), np.arccos(v), np.arctan2(y, x)]
    for got, ref, bound in zip(outs, refs, (1, 2, 2, 1)):
        ok = np.isfinite(ref) & (ref != 0)
        assert (np.abs(got[ok] - ref[ok]) / np.spacing(np.abs(ref[ok]))).max() <= bound
        np.testing.assert_array_equal(got[~ok], ref[~ok])


def test_float64_arc_tangents_stay_float64_in_the_ptx_and_assemble():
    from tilejit.backends import cuda
    from conftest import assemble_or_skip
    x = np.zeros(256)
    specs, consts, _ = arc_tangents.specialise(arc_tangents.bind((x,) * 6, {"B": 256}))
    ptx = cuda.build(arc_tangents.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    assert "div.rn.f64" in ptx and "cvt.rn.f32.f64" not in ptx
    assemble_or_skip(ptx, "sm_90a")


def test_the_float64_power_assembles_without_spills():
    from tilejit.backends import cuda
    from conftest import assemble_or_skip
    x = np.zeros(512)
    specs, consts, _ = power64.specialise(power64.bind((x, x, x), {"B": 512}))
    ptx = cuda.build(power64.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    assert "cvt.rn.f32.f64" not in ptx and "mul.rn.f64" in ptx and "fma.rn.f64" not in ptx   # Dekker, no fusion
    assert assemble_or_skip(ptx, "sm_90a").spills == 0
