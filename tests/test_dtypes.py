"""The dtype helpers the frontend and the runtime rely on, each pinned at its edges (the mutation
run of ``tilejit/dtypes.py`` found these unasserted: tests/README.md)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilejit import dtypes as D


@pytest.mark.parametrize("value,want", [(0, D.int32), (2**31 - 1, D.int32), (-2**31, D.int32),
                                        (2**31, D.int64), (-2**31 - 1, D.int64), (2**40, D.int64),
                                        (True, D.bool_), (False, D.bool_), (0.5, D.float32)])
def test_a_python_scalar_takes_int32_exactly_while_it_fits(value, want):
    assert D.python_scalar_dtype(value) is want


def test_a_python_scalar_of_another_type_is_refused():
    with pytest.raises(TypeError, match="not a Python scalar"):
        D.python_scalar_dtype("3")
    with pytest.raises(TypeError, match="not a Python scalar"):
        D.weak_promote(D.int8, None)


@pytest.mark.parametrize("dt", [D.int8, D.int16, D.int32, D.int64, D.uint8, D.uint32])
def test_fits_is_inclusive_at_both_ends_of_an_integer_range(dt):
    info = np.iinfo(dt.np)
    lo, hi = int(info.min), int(info.max)
    assert D.fits(lo, dt) and D.fits(hi, dt) and D.fits(0, dt)
    assert not D.fits(lo - 1, dt) and not D.fits(hi + 1, dt)


def test_fits_for_bool_and_float():
    assert D.fits(1, D.bool_) and D.fits(0, D.bool_) and not D.fits(2, D.bool_)
    assert D.fits(1e300, D.float16) and D.fits(0.5, D.int8)


@pytest.mark.parametrize("strong,value,want", [
    (D.int8, True, D.int8), (D.bool_, True, D.bool_), (D.bool_, 3, D.int32), (D.uint8, 300, D.uint8),
    (D.bool_, 1.5, D.float32), (D.int16, 1.5, D.float32), (D.bfloat16, 1.5, D.bfloat16)])
def test_weak_promotion_keeps_the_strong_type(strong, value, want):
    assert D.weak_promote(strong, value) is want


def test_float_result_keeps_floats_and_gives_the_rest_float32():
    assert D.float_result(D.float16) is D.float16 and D.float_result(D.bfloat16) is D.bfloat16
    assert D.float_result(D.int64) is D.float32 and D.float_result(D.bool_) is D.float32


@pytest.mark.parametrize("name,want", [("float16", D.float16), ("torch.bfloat16", D.bfloat16),
                                       ("numpy.int8", D.int8), ("bool_", D.bool_), ("bool", D.bool_),
                                       ("torch.bool", D.bool_)])
def test_lookup_reads_names_with_a_module_prefix(name, want):
    assert D.lookup(name) is want


@pytest.mark.parametrize("dt,want", [(np.float16, D.float16), (ml_dtypes.bfloat16, D.bfloat16),
                                     (ml_dtypes.float8_e4m3fn, D.float8e4m3), (ml_dtypes.float8_e5m2, D.float8e5m2),
                                     (np.bool_, D.bool_), (np.uint32, D.uint32)])
def test_from_numpy_maps_every_supported_dtype(dt, want):
    assert D.from_numpy(dt) is want and D.lookup(np.dtype(dt)) is want


def test_from_numpy_maps_float64_and_refuses_what_tiles_cannot_hold():
    assert D.from_numpy(np.float64) is D.float64 and D.lookup("torch.float64") is D.float64
    with pytest.raises(TypeError, match="complex128 is not supported"):
        D.from_numpy(np.complex128)


def test_itemsize_and_kinds():
    assert [d.itemsize for d in (D.bool_, D.int8, D.float16, D.bfloat16, D.float32, D.int64, D.float8e4m3)] == \
        [1, 1, 2, 2, 4, 8, 1]
    assert D.bool_.is_bool and not D.bool_.is_int and not D.bool_.is_float
    assert D.float8e5m2.is_float and D.uint8.is_int and not D.uint8.is_float


def test_dtypes_are_immutable():
    with pytest.raises(Exception):
        D.float32.bits = 16


@pytest.mark.parametrize("a,b,want", [(D.int8, D.int16, D.int16), (D.int16, D.int8, D.int16),
                                      (D.uint8, D.int8, D.int16), (D.int8, D.uint8, D.int16),
                                      (D.uint32, D.int32, D.int64), (D.int32, D.uint8, D.int32),
                                      (D.uint8, D.uint32, D.uint32), (D.float16, D.float32, D.float32),
                                      (D.float32, D.float16, D.float32), (D.float16, D.bfloat16, D.float32),
                                      (D.bool_, D.int8, D.int8), (D.int8, D.bool_, D.int8),
                                      (D.int64, D.float16, D.float16), (D.float16, D.int64, D.float16)])
def test_promotion_of_pairs_at_the_branch_edges(a, b, want):
    assert D.promote(a, b) is want


def test_lookup_refuses_names_tiles_cannot_hold():
    for name in ("torch.complex64", "numpy.float128", "int4"):
        with pytest.raises(TypeError, match="not supported"):
            D.lookup(name)
    assert D.lookup("numpy.uint64") is D.uint64 and D.lookup("torch.uint16") is D.uint16


def test_bits_are_the_numpy_storage_width():
    for d in D.ALL:
        assert d.bits == (1 if d.is_bool else np.dtype(d.np).itemsize * 8), d
