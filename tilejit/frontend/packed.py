"""4-bit data (``tj.int4``, ``tj.uint4``, ``tj.float4e2m1``) packed two values per uint8 byte,
low nibble first: ``tj.unpack`` and ``tj.pack`` as compositions of the tile ops that
``semantics`` builds (masks and shifts, the e2m1 decode through float32's bits, the nearest-e2m1 encode,
and an interleave through a unit axis)."""
from __future__ import annotations

from tilejit import dtypes
from tilejit.dtypes import DType
from tilejit.frontend.semantics import (arange, binary, bitcast_to, cast, constant, describe, expand_dims, fail,
                                        reduce, reshape, unary, where)
from tilejit.ir import Builder, ReduceKind, TileType, Value

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)      # float4e2m1 magnitudes by their 3 low bits


def _packed_arg(b: Builder, t, dtype, what: str) -> tuple[Value, DType]:
    if not isinstance(t, Value) or not t.type.shape:
        fail(b, f"{what}: expected a tile, got {describe(t)}")
    try:
        dt = dtypes.lookup(dtype) if not (isinstance(dtype, DType) and dtype in dtypes.PACKED) else dtype
    except (TypeError, KeyError):
        dt = None
    if dt is None or dt not in dtypes.PACKED:
        names = ", ".join(f"tj.{d.name}" for d in dtypes.PACKED)
        fail(b, f"{what}: the packed dtype must be one of {names}, got {describe(dtype)}")
    return t, dt


def unpack(b: Builder, t, dtype) -> Value:
    """uint8 (…, n) -> (…, 2n) values of the 4-bit ``dtype`` (see ``tj.unpack``)."""
    t, dt = _packed_arg(b, t, dtype, "unpack")
    if t.type.dtype != dtypes.uint8:
        fail(b, f"unpack: the packed tile must be uint8, got {t.type}")
    nibbles = [binary(b, "&", t, 15), binary(b, ">>", t, 4)]             # low first
    if dt == dtypes.int4:
        nibbles = [cast(b, binary(b, "-", binary(b, "^", n, 8), 8), dtypes.int8) for n in nibbles]
    elif dt == dtypes.float4e2m1:
        nibbles = [_e2m1_value(b, n) for n in nibbles]
    return _interleave(b, nibbles[0], nibbles[1])


def _e2m1_value(b: Builder, n: Value) -> Value:
    """A nibble's float4e2m1 value: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0.  Its
    bits moved to float32's sign (31), exponent (24-23) and mantissa (22) read as
    2**(e - 127) * (1 + m / 2), or m * 2**-127 for e = 0 (a float32 subnormal); times 2**126
    (exact: a power of two) that is the e2m1 value, -0.0 for the code 8."""
    n32 = cast(b, n, dtypes.uint32)
    bits = binary(b, "|", binary(b, "<<", binary(b, "&", n32, 8), 28), binary(b, "<<", binary(b, "&", n32, 7), 22))
    return binary(b, "*", bitcast_to(b, bits, dtypes.float32), 2.0 ** 126)


def _interleave(b: Builder, even: Value, odd: Value) -> Value:
    """(…, n) and (…, n) -> (…, 2n) with ``even`` at even positions of the last axis."""
    shape = even.type.shape
    pick = binary(b, "==", reshape(b, arange(b, 0, 2), (1,) * len(shape) + (2,)), 0)
    pair = where(b, pick, expand_dims(b, even, len(shape)), expand_dims(b, odd, len(shape)))
    return reshape(b, pair, shape[:-1] + (2 * shape[-1],))


def pack(b: Builder, t, dtype) -> Value:
    """(…, 2n) 4-bit values -> uint8 (…, n), low nibble first (see ``tj.pack``)."""
    t, dt = _packed_arg(b, t, dtype, "pack")
    shape = t.type.shape
    if shape[-1] % 2:
        fail(b, f"pack: the last dimension must be even, got {t.type}")
    if dt == dtypes.float4e2m1:
        if not t.type.dtype.is_float:
            fail(b, f"pack: float4e2m1 values must be a float tile, got {t.type}")
        t = _e2m1_code(b, cast(b, t, dtypes.float32))
    elif t.type.dtype.is_float or t.type.dtype.is_bool:
        fail(b, f"pack: {dt.name} values must be an integer tile, got {t.type}")
    codes = cast(b, binary(b, "&", t, 15), dtypes.uint8)
    pairs = reshape(b, codes, shape[:-1] + (shape[-1] // 2, 2))
    low = binary(b, "==", reshape(b, arange(b, 0, 2), (1,) * len(shape) + (2,)), 0)
    lo = reduce(b, ReduceKind.SUM, where(b, low, pairs, 0), -1)
    hi = reduce(b, ReduceKind.SUM, where(b, low, 0, pairs), -1)
    return cast(b, binary(b, "|", lo, binary(b, "<<", hi, 4)), dtypes.uint8)


def _e2m1_code(b: Builder, x: Value) -> Value:
    """The nibble of the e2m1 value nearest ``x`` (ties to the even code; saturating at 6)."""
    magnitude = unary(b, "abs", x)
    code = constant(b, 0, TileType(x.type.shape, dtypes.int32))
    for i in range(1, 8):          # past the midpoint to value i (ties: the even code wins)
        mid = (E2M1[i - 1] + E2M1[i]) / 2
        code = where(b, binary(b, ">" if i % 2 else ">=", magnitude, mid), i, code)
    negative = binary(b, "<", bitcast_to(b, x, dtypes.int32), 0)           # the sign bit: -0.0 too
    return binary(b, "|", code, where(b, negative, 8, 0))


BUILTINS = {"unpack": unpack, "pack": pack}       # joined to semantics.BUILTINS by the call dispatcher
