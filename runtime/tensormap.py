"""TMA descriptors (``CUtensorMap``) for the kernels' ``tensor_map`` parameters.

    tiled_args(ptr, shape, strides, dtype, box, swizzle) -> TiledArgs | None
    encode(array, desc) -> bytes            (128 bytes; cached per array view, box and swizzle)

A ``ParamDesc`` of kind TENSOR_MAP names the array argument, the ``box`` one copy moves
(elements per array dim, in the array's order) and the ``swizzle`` span in bytes.  The driver's
``cuTensorMapEncodeTiled`` wants every list innermost dim first, and strides in bytes for all but
the innermost dim, which must be contiguous.  Elements outside the array read as zero
(``OOB_FILL_NONE``), which is a load's ``other=0``.

An array that breaks TMA's rules (``tiled_args`` returns None: a non-unit inner stride, a base
address or stride that is not a multiple of 16 bytes, a negative stride, an empty dim) gets 128
zero bytes.  No kernel reads such a map: the specialisation checks the same rules
(``specs.ArraySpec.tma``), and a launch with such an array gets a kernel without TMA.
"""
from __future__ import annotations

import collections
import struct
import threading
from dataclasses import dataclass

from tilejit.abi import TENSOR_MAP_BYTES
from tilejit.errors import LaunchError
from tilejit.runtime.libcuda import L2_PROMOTION_256B

# CUtensorMapDataType by dtype name (bfloat16 and float8 have their own codes or are bytes)
_DATA_TYPE = {"uint8": 0, "int8": 0, "bool": 0, "float8e4m3": 0, "float8e5m2": 0, "uint16": 1, "int16": 1,
              "uint32": 2, "int32": 3, "uint64": 4, "int64": 5, "float16": 6, "float32": 7, "float64": 8,
              "bfloat16": 9}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}            # CU_TENSOR_MAP_SWIZZLE_NONE / 32B / 64B / 128B
ZEROS = bytes(TENSOR_MAP_BYTES)
CACHE_SIZE = 256


@dataclass(frozen=True)
class TiledArgs:
    """The arguments of ``cuTensorMapEncodeTiled``, innermost dim first."""
    data_type: int
    rank: int
    address: int
    dims: tuple          # elements
    strides: tuple       # bytes, dims 1.. (the innermost dim's stride is the element size)
    box: tuple           # elements
    swizzle: int         # CUtensorMapSwizzle


def tiled_args(ptr: int, shape: tuple, strides: tuple, dtype, box: tuple, swizzle: int) -> TiledArgs | None:
    """The encoding of a ``box`` copy from the array at ``ptr`` (``shape``, ``strides`` in
    elements), or None when the array breaks TMA's rules (see the module docstring)."""
    item = dtype.itemsize
    rank = len(shape)
    if rank != len(box) or not 1 <= rank <= 5:
        raise ValueError(f"a tensor map of rank {rank} with a box of {len(box)} dims")
    if ptr % 16 or (rank and strides[-1] != 1 and shape[-1] != 1) or any(n == 0 for n in shape):
        return None
    outer = [s * item for s in strides[:-1]]
    if any(s <= 0 or s % 16 or s >= 1 << 40 for s in outer) or any(n >= 1 << 31 for n in shape):
        return None
    return TiledArgs(_DATA_TYPE[dtype.name], rank, ptr, tuple(reversed(shape)), tuple(reversed(outer)),
                     tuple(reversed(box)), _SWIZZLE[swizzle])


_lock = threading.Lock()
_cache: collections.OrderedDict = collections.OrderedDict()


def encode(array, desc) -> bytes:
    """The 128-byte ``CUtensorMap`` of ``desc`` for ``array`` (a ``KernelArray``)."""
    key = (array.ptr, array.shape, array.strides, desc.dtype.name, desc.box, desc.swizzle)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    args = tiled_args(array.ptr, tuple(array.shape), tuple(array.strides), desc.dtype, desc.box, desc.swizzle)
    try:
        value = ZEROS if args is None else _encode_tiled(args)
    except LaunchError:
        raise
    except Exception as e:          # the bindings refusing an argument: say which map it was
        raise LaunchError(f"cannot build the TMA descriptor {args}: {type(e).__name__}: {e}") from None
    with _lock:
        _cache[key] = value
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return value


def driver_args(cuda, args: TiledArgs) -> tuple:
    """``cuTensorMapEncodeTiled``'s arguments as cuda-python wants them (its sized integer
    types; plain ints are refused)."""
    u64, u32 = cuda.cuuint64_t, cuda.cuuint32_t
    return (cuda.CUtensorMapDataType(args.data_type), args.rank, args.address, [u64(d) for d in args.dims],
            [u64(s) for s in args.strides], [u32(b) for b in args.box], [u32(1)] * args.rank,
            cuda.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cuda.CUtensorMapSwizzle(args.swizzle),
            cuda.CUtensorMapL2promotion(L2_PROMOTION_256B),
            cuda.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def _encode_tiled(args: TiledArgs) -> bytes:
    from tilejit.runtime import driver
    if driver.lib() is not None:
        return driver.lib().encode_tiled(args)
    cuda = driver.cuda()
    result = cuda.cuTensorMapEncodeTiled(*driver_args(cuda, args))
    if result[0] != 0:
        raise LaunchError(f"cuTensorMapEncodeTiled failed: {driver.error_string(result[0])} for {args}")
    return struct.pack("<16Q", *(int(x) for x in result[1].opaque))
