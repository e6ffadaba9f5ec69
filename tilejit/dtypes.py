"""Tile dtypes and the type-promotion rules shared by the frontend, interpreter and codegen.

Promotion follows NumPy 2 (NEP 50: Python scalars are *weak*) with documented deviations that
keep integer data out of float64 (which tiles hold when the data is float64):
  * integer (or bool) with float -> that float (NumPy would widen to float64);
  * float math on integers (``/``, ``exp``, ...) yields float32, not float64;
  * a weak Python float meeting an integer tile gives float32.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """A tile dtype (``tj.float32``, ``tj.bfloat16``, ``tj.int8``, ...): its name, kind ("b", "i",
    "u", "f") and width in bits.
    Example: ``acc.to(tj.bfloat16)``; ``tj.zeros((BM, BN), tj.float32)``; ``x.dtype == tj.float16``."""
    name: str      # user-facing name: "float32", "bfloat16", ...
    kind: str      # "b" bool, "i" signed, "u" unsigned, "f" float
    bits: int

    @property
    def np(self) -> np.dtype:
        return _NUMPY[self.name] if self.name in _NUMPY else _ml_dtypes()[self.name]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __hash__(self) -> int:          # names are unique; hashing the name alone is cheaper
        return hash(self.name)            # on the launch path than the generated field hash

    def __repr__(self) -> str:
        return f"tj.{self.name}"

    __str__ = lambda self: self.name  # noqa: E731  (IR text uses the bare name)

    def __call__(self, *args, **kwargs):
        from tilejit.errors import outside_kernel
        outside_kernel(f"tj.{self.name}(...)")


bool_ = DType("bool", "b", 1)
int8, int16, int32, int64 = (DType(f"int{b}", "i", b) for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (DType(f"uint{b}", "u", b) for b in (8, 16, 32, 64))
float16, bfloat16, float32 = DType("float16", "f", 16), DType("bfloat16", "f", 16), DType("float32", "f", 32)
float64 = DType("float64", "f", 64)
float8e4m3, float8e5m2 = DType("float8e4m3", "f", 8), DType("float8e5m2", "f", 8)

# 4-bit storage formats: two per byte, the low nibble first, held in uint8 arrays and tiles.  They
# are not tile dtypes (no tile holds them); ``tj.unpack`` / ``tj.pack`` convert to and from them.
int4, uint4, float4e2m1 = DType("int4", "i", 4), DType("uint4", "u", 4), DType("float4e2m1", "f", 4)
PACKED = (int4, uint4, float4e2m1)

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64,
       float8e4m3, float8e5m2)
BY_NAME = {d.name: d for d in ALL}
_NUMPY = {
    "bool": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16), "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
}
_FROM_NUMPY = {v: BY_NAME[k] for k, v in _NUMPY.items()}
_ML_NAMES = {"bfloat16": "bfloat16", "float8e4m3": "float8_e4m3fn", "float8e5m2": "float8_e5m2"}


@functools.cache
def _ml_dtypes() -> dict[str, np.dtype]:
    """NumPy dtypes of bfloat16/float8 from ml_dtypes, imported on first use: the import costs
    about a second, which a process that only launches float32 or torch tensors should not pay."""
    import ml_dtypes
    table = {name: np.dtype(getattr(ml_dtypes, ml)) for name, ml in _ML_NAMES.items()}
    _FROM_NUMPY.update({v: BY_NAME[k] for k, v in table.items()})
    return table


def from_numpy(dt) -> DType:
    """The tile dtype of a NumPy dtype; TypeError for dtypes tiles cannot hold (float64, ...)."""
    dt = np.dtype(dt)
    if dt not in _FROM_NUMPY and dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        _ml_dtypes()
    if dt in _FROM_NUMPY:
        return _FROM_NUMPY[dt]
    raise TypeError(f"dtype {dt} is not supported by tilejit (supported: {', '.join(BY_NAME)})")


def lookup(x) -> DType:
    """Accept a DType, a name, a NumPy dtype or a torch-style name like 'torch.float16'."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        name = x.rsplit(".", 1)[-1]
        if name in BY_NAME:
            return BY_NAME[name]
        if name == "bool_":
            return bool_
        try:
            x = np.dtype(name)             # "numpy.uint64", "torch.float64": the name without its module
        except TypeError:
            raise TypeError(f"dtype {x!r} is not supported by tilejit (supported: {', '.join(BY_NAME)})") from None
    return from_numpy(x)


def _int_promote(a: DType, b: DType) -> DType:
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if s.bits > u.bits:
        return s
    bits = min(64, 2 * u.bits)        # NumPy: uint8+int8 -> int16, uint32+int32 -> int64; uint64 with a
                                      # signed int is int64 here (NumPy: float64, which tiles lack)
    return BY_NAME[f"int{max(bits, 16)}"]


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op between two strongly typed operands."""
    if a == b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_float and b.is_float:
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return float32                  # float16 with bfloat16 (or two float8 kinds)
    if a.is_float:
        return a                        # deviation: NumPy widens int+float to float64
    if b.is_float:
        return b
    return _int_promote(a, b)


def weak_promote(strong: DType, value) -> DType:
    """Result dtype of ``strong <op> value`` where value is a Python bool/int/float (NEP 50)."""
    if isinstance(value, bool):
        return strong
    if isinstance(value, int):
        return int32 if strong.is_bool else strong
    if isinstance(value, float):
        return strong if strong.is_float else float32
    raise TypeError(f"not a Python scalar: {value!r}")


def python_scalar_dtype(value) -> DType:
    """Dtype a Python scalar takes when it must become a runtime value on its own."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int32 if -2**31 <= value < 2**31 else int64
    if isinstance(value, float):
        return float32
    raise TypeError(f"not a Python scalar: {value!r}")


def float_result(dt: DType) -> DType:
    """Dtype of float math (exp, sqrt, /) on ``dt``: floats keep theirs, the rest get float32."""
    return dt if dt.is_float else float32


def fits(value, dt: DType) -> bool:
    """Whether a weak Python scalar is representable in ``dt`` (NEP 50 raises otherwise)."""
    if dt.is_float or isinstance(value, float):
        return True
    if dt.is_bool:
        return value in (0, 1)
    info = np.iinfo(dt.np)
    return info.min <= value <= info.max
