"""``tj.cumsum`` / ``tj.cumprod`` (``reverse=``) along any axis, against NumPy on interpret and
emulate (cuda under ``-m gpu``), plus dtypes, errors, the IR text and the PTX."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import ir
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, body_error

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def scans(x, s, p, R: tj.constexpr, C: tj.constexpr, AXIS: tj.constexpr, REV: tj.constexpr):
    t = tj.load(x, (0, 0), (R, C))
    tj.store(s, (0, 0), tj.cumsum(t, axis=AXIS, reverse=REV))
    tj.store(p, (0, 0), tj.cumprod(t, AXIS, REV))


def want(fn, x, axis, reverse, dtype):
    x = np.flip(x, axis) if reverse else x
    r = fn(x, axis=axis, dtype=dtype)
    return np.flip(r, axis) if reverse else r


@pytest.mark.parametrize("backend", BACKENDS)
@given(r=st.sampled_from([1, 2, 8]), c=st.sampled_from([1, 4, 32, 128]), axis=st.sampled_from([0, 1, -1]),
       reverse=st.booleans(), warps=st.sampled_from([1, 2, 4]), seed=st.integers(0, 99))
def test_integer_scans_match_numpy(backend, r, c, axis, reverse, warps, seed):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        x = np.random.default_rng(seed).integers(-3, 4, (r, c)).astype(np.int32)
        s, p = np.zeros_like(x), np.zeros_like(x)
        scans[(1,)](x, s, p, R=r, C=c, AXIS=axis, REV=reverse, num_warps=warps)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(s, want(np.cumsum, x, axis, reverse, np.int32))
        np.testing.assert_array_equal(p, want(np.cumprod, x, axis, reverse, np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.bool_])
def test_scans_of_narrow_and_float_dtypes(backend, dtype, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(1)
    x = (rng.uniform(0.5, 1.5, (4, 64)) if np.dtype(dtype).kind == "f" else rng.integers(0, 2, (4, 64))).astype(dtype)
    out = np.float32 if np.dtype(dtype).kind == "f" else np.int32    # 16-bit floats scan in float32
    s, p = np.zeros(x.shape, out), np.zeros(x.shape, out)
    scans[(1,)](x, s, p, R=4, C=64, AXIS=1, REV=False)
    np.testing.assert_allclose(s, np.cumsum(x.astype(out), axis=1), rtol=1e-5)
    np.testing.assert_allclose(p, np.cumprod(x.astype(out), axis=1), rtol=1e-5)


@tj.kernel
def long_scan(x, y, N: tj.constexpr):
    tj.store(y, (0,), tj.cumsum(tj.load(x, (0,), (N,))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_long_row_scans_across_warps(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.random.default_rng(2).integers(-100, 100, 3000).astype(np.int64)
    y = np.zeros(3000, np.int64)                     # the tile's 1096 elements past the edge: not stored
    long_scan[(1,)](x, y, N=4096, num_warps=8)
    np.testing.assert_array_equal(y, np.cumsum(x))


@pytest.mark.parametrize("body, message", [
    ("tj.cumsum(t, axis=2)", "axis 2 is out of range|axis"),
    ("tj.cumsum(t, reverse=1)", "reverse must be a compile-time bool"),
    ("tj.cumprod(3)", "expected a tile"),
])
def test_bad_scans_are_errors_at_the_users_line(body, message):
    body_error(f"tj.store(y, (0, 0), {body})", message, [ArraySpec(tj.float32, 2)] * 2, {"B": 4},
               head="    t = tj.load(x, (0, 0), (B, B))\n")


def test_the_ir_text_round_trips_and_the_ptx_assembles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    consts = {"R": 8, "C": 64, "AXIS": 1, "REV": True}
    fn = scans.tile_ir([ArraySpec(tj.float32, 2)] * 3, consts)
    text = ir.print_function(fn)
    assert "scan" in text and "reverse=True" in text
    assert ir.print_function(ir.parse_function(text)) == text
    args = (np.zeros((8, 64), np.float32),) * 3
    specs, c, _ = scans.specialise(scans.bind(args, consts))
    assemble_or_skip(scans.compile(specs, c, 4, "cuda").artifact.ptx, "sm_90a")


@tj.kernel
def sorts(x, up, down, R: tj.constexpr, C: tj.constexpr, AXIS: tj.constexpr):
    t = tj.load(x, (0, 0), (R, C))
    tj.store(up, (0, 0), tj.sort(t, axis=AXIS))
    tj.store(down, (0, 0), tj.sort(t, AXIS, descending=True))


@pytest.mark.parametrize("backend", BACKENDS)
@given(r=st.sampled_from([1, 2, 8]), c=st.sampled_from([1, 4, 32, 128]), axis=st.sampled_from([0, 1]),
       warps=st.sampled_from([1, 2, 4]), dtype=st.sampled_from([np.float32, np.int32, np.uint8, np.float16]),
       seed=st.integers(0, 99))
def test_bitonic_sorts_match_numpy(backend, r, c, axis, warps, dtype, seed):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal((r, c)) * 50).astype(dtype) if np.dtype(dtype).kind == "f" \
            else rng.integers(0, 100, (r, c)).astype(dtype)
        up, down = np.zeros_like(x), np.zeros_like(x)
        sorts[(1,)](x, up, down, R=r, C=c, AXIS=axis, num_warps=warps)
    np.testing.assert_array_equal(up, np.sort(x, axis=axis))
    np.testing.assert_array_equal(down, np.flip(np.sort(x, axis=axis), axis))


def test_a_bad_sort_is_an_error_at_the_users_line():
    body_error("tj.store(y, (0, 0), tj.sort(t, descending=1))", "descending must be a compile-time bool",
               [ArraySpec(tj.float32, 2)] * 2, {"B": 4}, head="    t = tj.load(x, (0, 0), (B, B))\n")


@tj.kernel
def counts(x, out, N: tj.constexpr, BINS: tj.constexpr):
    t = tj.load(x, (tj.program_id(0) * N,), (N,), other=BINS)    # past the end: not counted
    tj.store(out, (tj.program_id(0), 0), tj.histogram(t, BINS)[None, :])


@pytest.mark.parametrize("backend", BACKENDS)
@given(n=st.sampled_from([1, 8, 64, 256]), bins=st.sampled_from([1, 3, 16, 64]), total=st.integers(1, 600),
       warps=st.sampled_from([1, 4]), dtype=st.sampled_from([np.int32, np.int8, np.uint16, np.int64]),
       seed=st.integers(0, 99))
def test_histograms_match_numpy(backend, n, bins, total, warps, dtype, seed):
    """Counts of 0..bins-1 per program (values outside the bins and past the array are not
    counted), against NumPy, for every program of a ragged grid."""
    if n * bins > 1 << 16:
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        lo = 0 if np.dtype(dtype).kind == "u" else -2
        x = np.random.default_rng(seed).integers(lo, bins + 2, total).astype(dtype)
        programs = -(-total // n)
        out = np.full((programs, bins), -7, np.int32)
        counts[(programs,)](x, out, N=n, BINS=bins, num_warps=warps)
    for p in range(programs):
        part = x[p * n:(p + 1) * n].astype(np.int64)
        np.testing.assert_array_equal(out[p], [np.sum(part == k) for k in range(bins)])


@pytest.mark.parametrize("body, message", [
    ("tj.histogram(t, 4)", "must be integers"),
    ("tj.histogram(t.to(tj.int32), 0)", "bins must be a positive compile-time int"),
    ("tj.histogram(t.to(tj.int32), x.shape[0])", "bins must be a positive compile-time int"),
    ("tj.histogram(t.to(tj.int32)[None, :], 4)", "expected a 1-D tile"),
    ("tj.histogram(t.to(tj.int32), 1024)", "over 65536 compares"),
])
def test_bad_histograms_are_errors_at_the_users_line(body, message):
    body_error(body, message, [ArraySpec(tj.float32, 1)] * 2, {"B": 128}, head="    t = tj.load(x, (0,), (B,))\n")
