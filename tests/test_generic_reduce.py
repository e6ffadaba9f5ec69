"""``tj.reduce(t, axis, combine)`` and ``tj.associative_scan(t, axis, combine, reverse)`` with a
``@tj.func`` combine: against a left-to-right Python fold / scan on interpret and emulate (cuda
under ``-m gpu``), including a combine that does not commute, float corner values kept exactly,
and errors at the user's line."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj
from tilejit.specs import ArraySpec

from conftest import compile_source

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.func
def first_nonzero(a, b):            # associative, not commutative
    return tj.where(a != 0, a, b)


@tj.func
def xor(a, b):
    return a ^ b


@tj.func
def larger(a, b):                   # NaN-propagating max, so -0.0 / NaN must come through exactly
    return tj.maximum(a, b)


COMBINES = {"first_nonzero": (first_nonzero, lambda a, b: a if a != 0 else b),
            "xor": (xor, lambda a, b: a ^ b)}


@tj.kernel
def fold(x, y, z, R: tj.constexpr, C: tj.constexpr, AXIS: tj.constexpr, WHICH: tj.constexpr):
    t = tj.load(x, (0, 0), (R, C))
    if WHICH == "xor":
        r = tj.reduce(t, AXIS, xor)
        k = tj.reduce(t, AXIS, xor, keepdims=True)
    else:
        r = tj.reduce(t, AXIS, first_nonzero)
        k = tj.reduce(t, AXIS, first_nonzero, keepdims=True)
    tj.store(y, (0,), r)
    tj.store(z, (0, 0), k)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None)
@given(r=st.sampled_from([1, 2, 8]), c=st.sampled_from([1, 2, 16, 64]), axis=st.sampled_from([0, 1]),
       which=st.sampled_from(sorted(COMBINES)), warps=st.sampled_from([1, 4]), seed=st.integers(0, 99))
def test_integer_reductions_fold_left_to_right(backend, r, c, axis, which, warps, seed):
    rng = np.random.default_rng(seed)
    x = (rng.integers(-1, 2, (r, c)) * rng.integers(1, 9, (r, c))).astype(np.int32)
    out_len = c if axis == 0 else r
    y = np.zeros(out_len, np.int32)
    z = np.zeros((1, c) if axis == 0 else (r, 1), np.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        fold[(1,)](x, y, z, R=r, C=c, AXIS=axis, WHICH=which, num_warps=warps)
    py = COMBINES[which][1]
    lines = x.T if axis == 0 else x
    want = [functools.reduce(py, [int(v) for v in line]) for line in lines]
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(z.reshape(-1), want)


@tj.kernel
def float_max(x, y, C: tj.constexpr):
    tj.store(y, (0,), tj.reduce(tj.load(x, (0, 0), (4, C)), 1, larger))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_corner_values_pass_through_exactly(backend, monkeypatch):
    """-0.0, NaN and -inf are picked out of each pair bit for bit (the picking never adds)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.full((4, 8), -np.inf, np.float32)
    x[0, 3] = -0.0
    x[1, 5] = np.nan
    x[2] = np.arange(8) - 20.5
    y = np.zeros(4, np.float32)
    float_max[(1,)](x, y, C=8)
    assert np.signbit(y[0]) and y[0] == 0 and np.isnan(y[1]) and y[2] == -13.5 and y[3] == -np.inf


@pytest.mark.parametrize("body, message", [
    ("tj.reduce(t, 0, tj.maximum)", "combine must be a @tj.func"),
    ("tj.reduce(x, 0, pick)", "expected a tile"),
    ("tj.reduce(tj.zeros((3,), tj.float32), 0, pick)", "power-of-two axis"),
    ("tj.reduce(t, 0, bad)", "must return one tile of its arguments' shape"),
    ("tj.reduce(t, 2, pick)", "axis"),
])
def test_bad_reductions_are_errors_at_the_users_line(body, message):
    combine_error(body, message, "reduce_src.py")


@tj.func
def pick(a, b):
    return a


@tj.func
def bad(a, b):
    return tj.sum(a)


@tj.func
def widen(a, b):
    return a.to(tj.int32)


def combine_error(body: str, message: str, filename: str) -> None:
    """``body`` (after ``t = tj.load(x, (0,), (8,))``) fails to compile with ``message`` at its line."""
    src = "def k(x, y, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    " + body + "\n"
    with pytest.raises(tj.CompileError, match=message) as err:
        compile_source(src, [ArraySpec(tj.float32, 1)] * 2, {"B": 8}, filename, pick=pick, bad=bad, widen=widen)
    assert f"{filename}:3" in str(err.value)


@tj.kernel
def scan_kernel(x, y, R: tj.constexpr, C: tj.constexpr, AXIS: tj.constexpr, WHICH: tj.constexpr,
                REV: tj.constexpr):
    t = tj.load(x, (0, 0), (R, C))
    if WHICH == "xor":
        tj.store(y, (0, 0), tj.associative_scan(t, AXIS, xor, reverse=REV))
    else:
        tj.store(y, (0, 0), tj.associative_scan(t, AXIS, first_nonzero, reverse=REV))


def python_scan(fn, seq, reverse):
    """Inclusive scan, left to right in the sequence's order (reverse: suffixes x[i] + ... + x[-1])."""
    out, acc = [], None
    for v in (reversed(seq) if reverse else seq):
        acc = v if acc is None else (fn(v, acc) if reverse else fn(acc, v))
        out.append(acc)
    return out[::-1] if reverse else out


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None)
@given(r=st.sampled_from([1, 2, 8]), c=st.sampled_from([1, 2, 16, 64]), axis=st.sampled_from([0, 1]),
       which=st.sampled_from(sorted(COMBINES)), reverse=st.booleans(), warps=st.sampled_from([1, 4]),
       seed=st.integers(0, 99))
def test_associative_scans_match_a_python_scan(backend, r, c, axis, which, reverse, warps, seed):
    rng = np.random.default_rng(seed)
    x = (rng.integers(-1, 2, (r, c)) * rng.integers(1, 9, (r, c))).astype(np.int32)
    y = np.zeros_like(x)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        scan_kernel[(1,)](x, y, R=r, C=c, AXIS=axis, WHICH=which, REV=reverse, num_warps=warps)
    py = COMBINES[which][1]
    lines = x.T if axis == 0 else x
    want = np.array([python_scan(py, [int(v) for v in line], reverse) for line in lines])
    np.testing.assert_array_equal(y.T if axis == 0 else y, want)


@pytest.mark.parametrize("body, message", [
    ("tj.associative_scan(t, 0, tj.maximum)", "combine must be a @tj.func"),
    ("tj.associative_scan(tj.zeros((6,), tj.float32), 0, pick)", "power-of-two axis"),
    ("tj.associative_scan(t, 0, widen)", "shape \\(4,\\) and dtype float32"),
    ("tj.associative_scan(t, 0, pick, reverse=1)", "reverse must be True or False"),
])
def test_bad_scans_are_errors_at_the_users_line(body, message):
    combine_error(body, message, "scan_src.py")
