"""Reading a CUDA ``__dlpack__`` capsule without copying (for producers without
``__cuda_array_interface__``; torch tensors take a faster path in ``arrays.py``)."""
from __future__ import annotations

import ctypes

from tilejit import dtypes
from tilejit.errors import LaunchError
from tilejit.specs import contiguous_strides

KDL_CUDA, KDL_CUDA_MANAGED = 2, 13           # DLDeviceType values for GPU-addressable memory
LEGACY_DEFAULT_STREAM = 1                    # DLPack's (and the driver's) name for the legacy stream

# DLDataType.code -> dtype name by bit width (DLPack 1.1: 0 int, 1 uint, 2 float, 4 bfloat,
# 6 bool, 10 float8_e4m3fn, 12 float8_e5m2)
_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
           (1, 8): "uint8", (1, 32): "uint32", (2, 16): "float16", (2, 32): "float32",
           (4, 16): "bfloat16", (6, 8): "bool", (10, 8): "float8e4m3", (12, 8): "float8e5m2"}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    """DLTensor, the first member of the (unversioned) DLManagedTensor in a "dltensor" capsule."""
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_view(obj):
    """``(ptr, shape, strides_in_elements, dtype, device, stream, keepalive)`` of a CUDA array.

    We ask the producer to order its pending work before the legacy default stream and launch
    there. The capsule is not consumed (not renamed), so its destructor frees it when the
    returned ``keepalive`` (the capsule and the producer) is collected."""
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise LaunchError(f"a {type(obj).__name__} in host memory (DLPack device type "
                          f"{int(device_type)}) was passed where GPU memory is needed")
    capsule = obj.__dlpack__(stream=LEGACY_DEFAULT_STREAM)
    tensor = _Tensor.from_address(_get_pointer(capsule, b"dltensor"))
    code = (tensor.dtype.code, tensor.dtype.bits)
    if code not in _DTYPES or tensor.dtype.lanes != 1:
        raise LaunchError(f"DLPack dtype code={code[0]} bits={code[1]} lanes="
                          f"{tensor.dtype.lanes} is not supported by tilejit")
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:                                   # NULL strides mean C-contiguous
        strides = contiguous_strides(shape)
    ptr = (tensor.data or 0) + tensor.byte_offset
    return (ptr, shape, strides, dtypes.BY_NAME[_DTYPES[code]], int(device_id),
            LEGACY_DEFAULT_STREAM, (capsule, obj))
