"""tj.bitcast(t, dtype) and t.to(dtype, bitcast=True): the same bits as another dtype of the same
width, equal to NumPy's ``view`` on every backend."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilejit as tj

PAIRS = [(np.float32, np.int32), (np.float32, np.uint32), (np.int32, np.float32), (np.float16, np.int16),
         (ml_dtypes.bfloat16, np.int16), (np.int16, ml_dtypes.bfloat16), (ml_dtypes.float8_e4m3fn, np.uint8),
         (np.int8, ml_dtypes.float8_e5m2), (np.uint8, np.int8), (np.float16, ml_dtypes.bfloat16)]


@tj.kernel
def view_as(x, y, BLOCK: tj.constexpr):
    t = tj.load(x, (0,), (BLOCK,))
    tj.store(y, (0,), tj.bitcast(t, y.dtype))


@tj.kernel
def exponent_and_abs(x, e, a, BLOCK: tj.constexpr):
    i = tj.load(x, (0,), (BLOCK,)).to(tj.int32, bitcast=True)
    tj.store(e, (0,), (i >> 23) & 255)                                   # the biased exponent
    tj.store(a, (0,), tj.bitcast(i & 0x7FFFFFFF, tj.float32))            # |x|: the sign cleared


def bits_of(dtype, n, seed):
    raw = np.random.default_rng(seed).integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype)


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("src, dst", PAIRS, ids=lambda d: np.dtype(d).name)
def test_bitcast_is_numpys_view(backend, src, dst, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = bits_of(src, 64, 3)                # every bit pattern, NaNs with payloads included
    y = np.zeros(64, dst)
    view_as[(1,)](x, y, BLOCK=64)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_bit_tricks_on_float32(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.array([1.0, -2.0, 0.5, -0.0, 3e38, -1e-40, np.inf, -np.nan], np.float32)
    e, a = np.zeros(8, np.int32), np.zeros(8, np.float32)
    exponent_and_abs[(1,)](x, e, a, BLOCK=8)
    np.testing.assert_array_equal(e, (x.view(np.int32) >> 23) & 255)
    np.testing.assert_array_equal(a.view(np.int32), x.view(np.int32) & 0x7FFFFFFF)


def test_bad_bitcasts_are_compile_errors(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")

    @tj.kernel
    def widths(x, y, BLOCK: tj.constexpr):
        tj.store(y, (0,), tj.bitcast(tj.load(x, (0,), (BLOCK,)), tj.int16))

    @tj.kernel
    def of_bool(x, y, BLOCK: tj.constexpr):
        tj.store(y, (0,), tj.bitcast(tj.load(x, (0,), (BLOCK,)) > 0, tj.int8))

    @tj.kernel
    def flag(x, y, BLOCK: tj.constexpr):
        tj.store(y, (0,), tj.load(x, (0,), (BLOCK,)).to(tj.int32, bitcast=1))

    x = np.zeros(8, np.float32)
    for kernel, out, message in [(widths, np.zeros(8, np.int16), "float32 .32 bits. and int16 .16 bits."),
                                 (of_bool, np.zeros(8, np.int8), "must be non-bool types"),
                                 (flag, np.zeros(8, np.int32), "bitcast must be True or False")]:
        with pytest.raises(tj.CompileError, match=message):
            kernel[(1,)](x, out, BLOCK=8)


def test_bitcast_assembles_for_the_gpu():
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    for src, dst in PAIRS:
        x, y = np.zeros(64, src), np.zeros(64, dst)
        specs, consts, _ = view_as.specialise(view_as.bind((x, y), {"BLOCK": 64}))
        assert view_as.compile(specs, consts, None, "cuda").artifact.spills == 0
