"""Packing launch arguments into the driver's ``kernelParams`` (an array of pointers to each
parameter's bytes), laid out by the kernel's ``ParamDesc`` list.

The fast path per launch is one generated tuple expression (reading pointers, shapes, strides
and scalars from the argument list) and one ``struct.pack_into`` into a per-thread buffer whose
pointer array was built once; the driver copies the values during ``cuLaunchKernel``, so the
buffer can be reused by the next launch."""
from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np

from tilejit.abi import TENSOR_MAP_BYTES, ParamKind
from tilejit.errors import LaunchError
from tilejit.runtime import tensormap

SLOT_BYTES = 8          # each parameter gets its own 8-byte-aligned slot in the value buffer
MAP_ALIGN = 64          # ... but a tensor map (128 bytes) a 64-byte-aligned one

# the C type of a scalar parameter, as a struct format; bfloat16 and float8 have no struct
# format, so their raw bits are packed as unsigned integers of the same width
_SCALAR_FORMAT = {"bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q",
                  "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q", "float16": "e", "float32": "f",
                  "bfloat16": "H", "float8e4m3": "B", "float8e5m2": "B"}
_RAW_BITS = {"bfloat16": np.uint16, "float8e4m3": np.uint8, "float8e5m2": np.uint8}
_MISSING = object()


def param_format(param) -> str:
    """The struct format of one ParamDesc: "ptr" -> u64 device address, "dim" and
    "stride" -> i32 or i64 per ``param.dtype``, "scalar" -> its dtype's C type (bool: 1 byte),
    "tensor_map" -> its 128 bytes."""
    if param.kind is ParamKind.TENSOR_MAP:
        return f"{TENSOR_MAP_BYTES}s"
    if param.kind in (ParamKind.PTR, ParamKind.WORKSPACE):
        return "Q"
    if param.kind in (ParamKind.DIM, ParamKind.STRIDE):
        return "q" if param.dtype.bits == 64 else "i"
    if param.kind is ParamKind.SCALAR:
        return _SCALAR_FORMAT[param.dtype.name]
    raise ValueError(f"unknown ParamDesc kind {param.kind!r}")


def _value_expr(param, param_index: int) -> str:
    """Python expression reading ``param`` (number ``param_index``)'s value from the argument
    list ``a``."""
    arg = f"a[{param.arg}]"
    if param.kind in (ParamKind.PTR, ParamKind.WORKSPACE):
        return f"{arg}.ptr"
    if param.kind is ParamKind.DIM:
        return f"{arg}.shape[{param.axis}]"
    if param.kind is ParamKind.STRIDE:
        return f"{arg}.strides[{param.axis}]"
    if param.kind is ParamKind.TENSOR_MAP:
        return f"encode_map({arg}, params[{param_index}])"
    if param.dtype.name in _RAW_BITS:
        return f"raw_bits_{param.dtype.name}({arg})"
    return arg


def _raw_bits(dtype):
    bits_type = _RAW_BITS[dtype.name]
    return lambda value: int(np.asarray(value, dtype=dtype.np).view(bits_type))


def slot_offsets(formats) -> tuple[list[int], int]:
    """Where each parameter's value starts in the value buffer, and the buffer's size: 8-byte
    slots, a tensor map's 64-byte aligned."""
    offsets, at = [], 0
    for f in formats:
        size = struct.calcsize(f)
        align = MAP_ALIGN if size == TENSOR_MAP_BYTES else SLOT_BYTES
        at = -(-at // align) * align
        offsets.append(at)
        at += max(size, SLOT_BYTES)
    return offsets, at


class _ParamBuffers:
    """The value buffer and the pointer array into it (one pair per thread)."""

    def __init__(self, nbytes: int, offsets: list[int]):
        self.data = ctypes.create_string_buffer(max(nbytes, 1) + MAP_ALIGN)
        base = -(-ctypes.addressof(self.data) // MAP_ALIGN) * MAP_ALIGN
        self.start = base - ctypes.addressof(self.data)
        count = len(offsets)
        self.pointers = (ctypes.c_void_p * max(count, 1))(*[base + o for o in offsets])
        self.address = ctypes.addressof(self.pointers) if count else None


class ArgPacker:
    """Packs arguments for one ParamDesc list; ``pack(args)`` returns the kernelParams address."""

    def __init__(self, params, kernel: str | None = None):
        self.params, self.kernel = tuple(params), kernel
        self.formats = [param_format(p) for p in self.params]
        self.offsets, size = slot_offsets(self.formats)
        layout, at = "", 0
        for f, o in zip(self.formats, self.offsets):
            layout += f"{o - at}x{f}" if o > at else f
            at = o + struct.calcsize(f)
        self.struct = struct.Struct("<" + layout + f"{size - at}x")
        namespace = {f"raw_bits_{p.dtype.name}": _raw_bits(p.dtype) for p in self.params
                     if p.kind is ParamKind.SCALAR and p.dtype.name in _RAW_BITS}
        namespace.update(encode_map=tensormap.encode, params=self.params)
        source = "lambda a: (" + "".join(_value_expr(p, i) + ", " for i, p in enumerate(self.params)) + ")"
        self.values = eval(source, namespace)    # e.g. lambda a: (a[0].ptr, a[0].shape[0], a[1], )
        self._local = threading.local()          # launches from several threads must not share

    def pack(self, args) -> int | None:
        """Write the values into this thread's buffer; the address of its pointer array."""
        try:
            buffers = self._local.buffers
        except AttributeError:
            buffers = self._local.buffers = _ParamBuffers(self.struct.size, self.offsets)
        try:
            self.struct.pack_into(buffers.data, buffers.start, *self.values(args))
        except (struct.error, TypeError, AttributeError, IndexError, ValueError, OverflowError):
            raise self._explain(args) from None
        return buffers.address

    def _explain(self, args) -> LaunchError:
        """Name the first parameter whose value cannot be packed."""
        for i, (param, fmt) in enumerate(zip(self.params, self.formats)):
            what = f"parameter {param.kind.value}" + ("" if param.axis is None else f"[axis {param.axis}]")
            value = _MISSING
            try:
                value = eval(_value_expr(param, i), dict(self.values.__globals__), {"a": args})
                struct.pack("<" + fmt, value)
            except (struct.error, TypeError, AttributeError, IndexError, ValueError,
                    OverflowError) as e:
                shown = "a missing value" if value is _MISSING else repr(value)
                return LaunchError(f"argument {param.arg}: {what} of C type '{fmt}' cannot take "
                                   f"{shown} ({e})", kernel=self.kernel)
        return LaunchError(f"{len(args)} arguments do not match the kernel's parameters",
                           kernel=self.kernel)
