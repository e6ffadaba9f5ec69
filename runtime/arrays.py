"""Device arrays and interop: ``DeviceArray``, and ``as_kernel_array`` which turns any supported
array (NumPy, DeviceArray, ``__cuda_array_interface__``, torch, CUDA ``__dlpack__``) into one
normalised ``KernelArray`` view (pointer, shape, strides in elements, dtype, device, stream)."""
from __future__ import annotations

import os
import sys
import weakref

import numpy as np

from tilejit import dtypes
from tilejit.dtypes import DType
from tilejit.specs import contiguous_strides  # noqa: F401  (re-exported)
from tilejit.errors import LaunchError
from tilejit.runtime import driver


class KernelArray:
    """What a launch needs from an array argument. ``host`` is the NumPy array it was copied from
    (None for device-resident inputs), so the caller can copy written results back; ``owner``
    keeps the memory alive for the duration of the launch."""
    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "stream", "host", "owner")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, dtype: DType, device: int | None,
                 stream: int | None = None, host: np.ndarray | None = None, owner=None):
        self.ptr, self.shape, self.strides, self.dtype = ptr, shape, strides, dtype
        self.device, self.stream, self.host, self.owner = device, stream, host, owner

    def copy_back(self, stream: int | None = None) -> None:
        """Copy the device data into ``host`` (the NumPy array the argument came from)."""
        self.host[...] = self.owner.numpy(stream=stream)

    def __repr__(self) -> str:
        return (f"KernelArray(ptr=0x{self.ptr:x}, shape={self.shape}, strides={self.strides}, "
                f"dtype={self.dtype}, device={self.device}, stream={self.stream})")


def span(shape: tuple, strides: tuple) -> int:
    """Elements between the first and one past the last element (0 for an empty array)."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def gather_strided(buf: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    """A C-ordered copy of the elements of the flat ``buf`` at ``shape`` and ``strides`` (in
    elements). ``as_strided`` goes through ``__array_interface__``, whose typestr (``'<f1'``)
    NumPy cannot read back for ml_dtypes' float8_e5m2: stride the bits as unsigned ints, then
    view them as the dtype again."""
    item = buf.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(buf.view(f"u{item}"), shape, tuple(s * item for s in strides))
    return np.array(view).view(buf.dtype)


class _Allocation:
    """``nbytes`` of device memory on ``device``, freed when the last user is collected."""

    def __init__(self, nbytes: int, device: int):
        driver.activate(device)
        self.ptr = int(driver.check(driver.cuda().cuMemAlloc(nbytes), "cuMemAlloc"))
        self.device, self.nbytes = device, nbytes
        finalizer = weakref.finalize(self, _free, self.ptr, device)
        finalizer.atexit = False        # the process exit releases everything anyway


def _free(ptr: int, device: int) -> None:
    try:
        driver.activate(device)
        driver.cuda().cuMemFree(ptr)
    except Exception:                   # never raise from a finaliser (driver torn down, ...)
        pass


class DeviceArray:
    """An array in GPU memory: ``tj.empty``, ``tj.to_device``, or a view of foreign memory.

    ``strides`` are in elements. With ``ptr=None`` the memory is allocated on ``device`` (the
    current device by default); otherwise ``owner`` keeps the foreign memory alive.
    Example: ``d = tj.to_device(x); add[grid](d, d, d, BLOCK=1024); d.numpy()``."""

    def __init__(self, shape, dtype, strides=None, ptr: int | None = None, owner=None,
                 device: int | None = None):
        self._shape = tuple(int(n) for n in shape)
        self._dtype = _tile_dtype(dtype)
        self._strides = contiguous_strides(self._shape) if strides is None else tuple(strides)
        if len(self._strides) != len(self._shape) or any(s < 0 for s in self._strides):
            raise LaunchError(f"bad strides {self._strides} for shape {self._shape}")
        if ptr is None:
            device = driver.current_device() if device is None else device
            nbytes = span(self._shape, self._strides) * self._dtype.itemsize
            owner = _Allocation(nbytes, device) if nbytes else None
            ptr = owner.ptr if owner else 0
        elif device is None:
            device = driver.pointer_device(ptr) if ptr else driver.current_device()
            if device is None:
                raise LaunchError(f"pointer 0x{ptr:x} is host memory, not GPU memory")
        self._ptr, self._owner, self._device = int(ptr), owner, device

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    strides = property(lambda self: self._strides, doc="strides in elements")
    ptr = property(lambda self: self._ptr, doc="device address of element [0, 0, ...]")
    device = property(lambda self: self._device, doc="device ordinal")
    ndim = property(lambda self: len(self._shape))

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    def __len__(self) -> int:
        return self._shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self._shape}, dtype={self._dtype}, device={self._device})"

    @property
    def __cuda_array_interface__(self) -> dict:
        """Version 3 of the CUDA Array Interface (CuPy, numba, torch.as_tensor read it)."""
        item = self._dtype.itemsize
        contiguous = self._strides == contiguous_strides(self._shape)
        return {"shape": self._shape, "typestr": self._dtype.np.str, "version": 3,
                "data": (self._ptr, False),
                "strides": None if contiguous else tuple(s * item for s in self._strides),
                "stream": None}     # no pending work of ours to synchronise with

    def numpy(self, stream: int | None = None) -> np.ndarray:
        """A NumPy copy. Waits for ``stream`` if given, else for all work on the device."""
        extent = span(self._shape, self._strides)
        buf = np.empty(extent, self._dtype.np)
        if extent:
            driver.activate(self._device)
            cu = driver.cuda()
            if stream is None:
                driver.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
                driver.check(cu.cuMemcpyDtoH(buf.ctypes.data, self._ptr, buf.nbytes), "cuMemcpyDtoH")
            else:
                driver.check(cu.cuMemcpyDtoHAsync(buf.ctypes.data, self._ptr, buf.nbytes, stream),
                             "cuMemcpyDtoHAsync")
                driver.check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
        return gather_strided(buf, self._shape, self._strides)     # own, C-ordered memory

    def copy_from_host(self, array: np.ndarray, stream: int | None = None) -> None:
        """Copy a NumPy array of the same shape and dtype in (asynchronously on ``stream``)."""
        if self._strides != contiguous_strides(self._shape):
            raise LaunchError("copy_from_host needs a contiguous DeviceArray")
        host = np.ascontiguousarray(array, dtype=self._dtype.np)
        if host.shape != self._shape:
            raise LaunchError(f"shape mismatch: host {host.shape} vs device {self._shape}")
        if host.nbytes:
            driver.activate(self._device)
            cu = driver.cuda()
            if stream is None:
                driver.check(cu.cuMemcpyHtoD(self._ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
            else:       # pageable source: the driver stages it before returning, so `host` may die
                driver.check(cu.cuMemcpyHtoDAsync(self._ptr, host.ctypes.data, host.nbytes, stream),
                             "cuMemcpyHtoDAsync")


class HostArray(np.ndarray):
    """What ``tj.empty`` and ``tj.to_device`` give where kernels run on the CPU (``TILEJIT_BACKEND``
    interpret or emulate, or no GPU): a NumPy array with a DeviceArray's ``numpy()`` and
    ``copy_from_host``, so that code written for the GPU runs unchanged on the CPU backends."""

    device = None

    def numpy(self, stream: int | None = None) -> np.ndarray:
        """A NumPy copy."""
        return np.array(self, copy=True).view(np.ndarray)

    def copy_from_host(self, array, stream: int | None = None) -> None:
        """Copy a NumPy array of the same shape in."""
        host = np.asarray(array, dtype=self.dtype)
        if host.shape != self.shape:
            raise LaunchError(f"shape mismatch: host {host.shape} vs device {self.shape}")
        self[...] = host


def on_the_cpu() -> bool:
    """Whether kernels run on a CPU backend: ``TILEJIT_BACKEND`` says interpret or emulate, or it is
    unset and there is no GPU (the rule ``backends.selected`` follows)."""
    name = os.environ.get("TILEJIT_BACKEND", "").strip().lower()
    return name in ("interpret", "emulate") or (not name and not driver.available())


def empty(shape, dtype, device: int | None = None) -> DeviceArray | HostArray:
    """An uninitialised contiguous DeviceArray (a ``HostArray`` where kernels run on the CPU).
    Example: ``out = tj.empty((n,), tj.float32)``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if on_the_cpu():
        return np.empty(shape, _tile_dtype(dtype).np).view(HostArray)
    return DeviceArray(shape, dtype, device=device)


def to_device(array, device: int | None = None, stream: int | None = None) -> DeviceArray | HostArray:
    """Copy a NumPy array (or anything ``np.asarray`` accepts) to a new DeviceArray (a
    ``HostArray`` copy where kernels run on the CPU).
    Example: ``d = tj.to_device(np.arange(8.0))``."""
    host = np.asarray(array)
    dtype = _tile_dtype(host.dtype)
    if on_the_cpu():
        return np.array(host, dtype=dtype.np, copy=True).view(HostArray)
    out = DeviceArray(host.shape, dtype, device=device)
    out.copy_from_host(host, stream)
    return out


def _tile_dtype(dtype) -> DType:
    """A DType from a DType, name or NumPy dtype; LaunchError for unsupported ones (float64)."""
    try:
        return dtypes.lookup(dtype)
    except TypeError as e:
        raise LaunchError(str(e)) from None


_TORCH_NAMES = {"float8_e4m3fn": "float8e4m3", "float8_e5m2": "float8e5m2", "bool": "bool"}


def _torch_view(t) -> KernelArray:
    if not t.is_cuda:
        raise LaunchError(f"a torch tensor on {t.device} was passed where GPU memory is needed; "
                          "move it with .cuda() first")
    dtype = _torch_dtype(t.dtype)
    if dtype is None:
        raise LaunchError(f"torch dtype {t.dtype} is not supported by tilejit")
    torch = sys.modules["torch"]
    stream = torch.cuda.current_stream(t.device).cuda_stream
    return KernelArray(t.data_ptr(), tuple(t.shape), tuple(t.stride()), dtype, t.device.index,
                       stream, owner=t)


def _interface_view(obj) -> KernelArray:
    try:
        cai = obj.__cuda_array_interface__
        shape = tuple(int(n) for n in cai["shape"])
        typestr = np.dtype(cai["typestr"])
        int(cai["data"][0] or 0)
    except Exception as err:          # a broken or partial interface dict
        raise LaunchError(f"a {type(obj).__name__}'s __cuda_array_interface__ cannot be read "
                          f"({type(err).__name__}: {err})") from None
    dtype = _tile_dtype(typestr)
    item = dtype.itemsize
    if cai.get("strides") is None:
        strides = contiguous_strides(shape)
    else:
        if any(s % item for s in cai["strides"]):
            raise LaunchError(f"strides {cai['strides']} (bytes) are not multiples of the "
                              f"item size {item}")
        strides = tuple(s // item for s in cai["strides"])
    ptr = int(cai["data"][0] or 0)
    device = driver.pointer_device(ptr) if ptr else None
    if ptr and device is None:
        raise LaunchError("a __cuda_array_interface__ object points at host memory; "
                          "GPU memory is needed")
    return KernelArray(ptr, shape, strides, dtype, device, cai.get("stream"), owner=obj)


def is_torch_tensor(obj) -> bool:
    """True for torch tensors, without importing torch (a tensor implies torch is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def as_kernel_array(obj, device: int | None = None, stream: int | None = None) -> KernelArray:
    """A KernelArray for any supported array; NumPy input is copied to ``device`` (the current
    device by default) on ``stream``, and the view keeps it in ``host`` for copying back.

    Device-resident inputs are used in place. Host memory other than NumPy -> LaunchError."""
    if isinstance(obj, DeviceArray):
        return KernelArray(obj.ptr, obj.shape, obj.strides, obj.dtype, obj.device, owner=obj)
    if isinstance(obj, np.ndarray):
        copy = to_device(obj, device, stream)
        return KernelArray(copy.ptr, copy.shape, copy.strides, copy.dtype, copy.device,
                           host=obj, owner=copy)
    if is_torch_tensor(obj):
        return _torch_view(obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _interface_view(obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        from tilejit.runtime.dlpack import dlpack_view     # ctypes structs: only when needed
        ptr, shape, strides, dtype, dev, stream_used, keep = dlpack_view(obj)
        return KernelArray(ptr, shape, strides, dtype, dev, stream_used, owner=keep)
    raise LaunchError(f"cannot pass a {type(obj).__name__} as an array argument (expected a NumPy "
                      "array, tj.DeviceArray, torch tensor, or an object with "
                      "__cuda_array_interface__ or CUDA __dlpack__)")


_TORCH_DTYPES: dict = {}      # torch.dtype -> tile DType (None: unsupported), filled on first sight


def _torch_dtype(torch_dtype) -> DType | None:
    """The tile dtype of a torch dtype, or None if tilejit has none (cached: launch path)."""
    if torch_dtype not in _TORCH_DTYPES:
        name = str(torch_dtype).rsplit(".", 1)[-1]
        try:
            _TORCH_DTYPES[torch_dtype] = dtypes.lookup(_TORCH_NAMES.get(name, name))
        except TypeError:
            _TORCH_DTYPES[torch_dtype] = None
    return _TORCH_DTYPES[torch_dtype]


def fast_device_view(obj) -> KernelArray | None:
    """A KernelArray for a device-resident DeviceArray or CUDA torch tensor, read with as few
    calls as possible (the re-launch fast path); None for anything else (take the full path)."""
    if type(obj) is DeviceArray:
        return KernelArray(obj.ptr, obj.shape, obj.strides, obj.dtype, obj.device, owner=obj)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor) or not obj.is_cuda:
        return None
    dtype = _torch_dtype(obj.dtype)
    if dtype is None:
        return None
    device = obj.get_device()
    return KernelArray(obj.data_ptr(), obj.shape, obj.stride(), dtype, device,
                       torch._C._cuda_getCurrentRawStream(device), owner=obj)
