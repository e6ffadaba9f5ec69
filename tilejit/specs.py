"""Specialisation of a kernel's runtime arguments: what the compiler may assume about each."""
from __future__ import annotations

from dataclasses import dataclass

from tilejit.dtypes import DType


@dataclass(frozen=True)
class ArraySpec:
    """An array argument. ``aligned16``: data pointer 16-byte aligned and every non-unit stride
    times the item size a multiple of 16 bytes. ``large``: it spans 2**31 elements or more, so
    its index arithmetic needs 64 bits."""
    dtype: DType
    rank: int
    unit_inner_stride: bool = True
    aligned16: bool = True
    large: bool = False


@dataclass(frozen=True)
class ScalarSpec:
    """A scalar argument of ``dtype`` (Python int -> int32, or int64 if it does not fit)."""
    dtype: DType


ArgSpec = ArraySpec | ScalarSpec
