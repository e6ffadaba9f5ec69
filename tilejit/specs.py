"""Specialisation of a kernel's runtime arguments: what the compiler may assume about each."""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.dtypes import DType


@dataclass(frozen=True)
class ArraySpec:
    """An array argument. ``aligned16``: data pointer 16-byte aligned and every non-unit stride
    times the item size a multiple of 16 bytes. ``large``: it spans 2**31 elements or more, so
    its index arithmetic needs 64 bits.  ``tma``: a TMA descriptor can describe it (aligned16,
    no empty dim, the inner stride 1 and every other stride a positive multiple of 16 bytes,
    whatever its dim's size), so a kernel may copy from it with TMA and no runtime check."""
    dtype: DType
    rank: int
    unit_inner_stride: bool = True
    aligned16: bool = True
    large: bool = False
    tma: bool = True


@dataclass(frozen=True)
class ScalarSpec:
    """A scalar argument of ``dtype`` (Python int -> int32, or int64 if it does not fit).
    ``positive``: a float argument in float32's positive normal range (``positive_float``: not
    zero, negative, tiny, huge, infinite or NaN).  Float arguments are specialised on it, as
    integers are on their width: ``max(x * scale) == max(x) * scale`` holds for a positive
    ``scale`` only, and softmax scales are positive (``passes/fold_scale``)."""
    dtype: DType
    positive: bool = False


@dataclass(frozen=True)
class NoneSpec:
    """A runtime parameter passed ``None``: the kernel is specialised with the parameter bound to
    ``None`` at compile time (``if bias is not None:`` folds), and it is not a kernel parameter."""


ArgSpec = ArraySpec | ScalarSpec | NoneSpec
FLOAT32_MIN = 1.1754943508222875e-38         # float32's smallest positive normal and largest finite values
FLOAT32_MAX = 3.4028234663852886e38


def positive_float(value) -> bool:
    """``ScalarSpec.positive`` of a float argument, judged on the value as passed (a Python
    float's double: in this range it rounds to a float32 in it, so no launch is judged twice)."""
    return FLOAT32_MIN <= value <= FLOAT32_MAX


def contiguous_strides(shape: tuple) -> tuple:
    """C-order strides, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def array_spec_fields(dtype: DType, shape, strides, ptr: int) -> tuple:
    """``ArraySpec`` fields of an array from its dtype, shape, strides (in elements) and data
    address, as a plain tuple: the one rule the launch path and its fast re-launch path share
    (a tuple because building the frozen dataclass costs microseconds on every launch)."""
    item = dtype.itemsize
    aligned = ptr % 16 == 0
    span = size = 1
    last = len(shape) - 1
    for d, (n, s) in enumerate(zip(shape, strides)):
        size *= n
        span += (n - 1) * abs(s)
        if n > 1 and (s * item) % 16 and not (d == last and s == 1):   # only the unit inner stride is exempt
            aligned = False
    inner_unit = not shape or shape[-1] <= 1 or strides[-1] == 1
    tma = aligned and size > 0 and inner_unit and all(0 < s * item < 2**40 and (s * item) % 16 == 0 for s in strides[:-1]) \
        and all(n < 2**31 for n in shape)           # (TMA coordinates are 32-bit)
    return dtype, len(shape), inner_unit, aligned, size > 0 and max(span, size) >= 2**31, tma


def array_spec(dtype: DType, shape, strides, ptr: int) -> ArraySpec:
    """The spec of an array (see ``array_spec_fields``)."""
    return ArraySpec(*array_spec_fields(dtype, shape, strides, ptr))
