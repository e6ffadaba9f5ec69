"""The CUDA driver through cuda-python: one ``check()``, per-device primary contexts, device facts.

``cuda.bindings.driver`` is imported on first use, never at ``import tilejit`` (it costs ~0.1 s).
Without the NVIDIA driver library, the bindings import but every call raises
``DynamicLibNotFoundError``: ``available()`` reports that as "no GPU" instead of crashing.
"""
from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass

from tilejit.errors import DeviceError, LaunchError

_lock = threading.Lock()
_contexts: dict[int, object] = {}      # device ordinal -> retained primary CUcontext


@functools.cache
def cuda():
    """The ``cuda.bindings.driver`` module (imported lazily)."""
    from cuda.bindings import driver
    return driver


# Which binding the driver calls go through unless TILEJIT_LAUNCH_BINDING says otherwise:
# "ctypes" (libcuda's C functions, ``runtime.libcuda``) or "cuda-python".  ctypes: on the H200
# (2026-12-05) a new process's cache hit to first launch done of the D128 attention took 38.6 ms
# against cuda-python's 53.9 (it imports no cuda-python), a bare cuLaunchKernel 6.04 against
# 5.96 µs and a tilejit launch 23.7 against 23.4 µs (bench_launch, launchers taking turns), and
# the GPU tests of the runtime, TMA, persistent, cluster and fast-launch kernels passed under it.
DEFAULT_BINDING = "ctypes"
BINDINGS = ("ctypes", "cuda-python")


def check_binding(name: str) -> str:
    """``name`` when it is one of ``BINDINGS``, else a LaunchError naming the variable."""
    if name not in BINDINGS:
        raise LaunchError(f"TILEJIT_LAUNCH_BINDING must be 'ctypes' or 'cuda-python', got {name!r}")
    return name


def binding_setting() -> str:
    """The binding TILEJIT_LAUNCH_BINDING asks for (LaunchError for one that does not exist)."""
    return check_binding(os.environ.get("TILEJIT_LAUNCH_BINDING", DEFAULT_BINDING))


@functools.cache
def lib():
    """The ctypes libcuda (``runtime.libcuda.Libcuda``) that devices, contexts and modules go
    through when the binding is "ctypes" and libcuda opens; None: cuda-python (chosen once per
    process)."""
    if binding_setting() != "ctypes":
        return None
    from tilejit.runtime.libcuda import Libcuda
    return Libcuda.open()


def check(result, call: str):
    """Unwrap a cuda-python result: ``(CUresult, *values)`` or a bare ``CUresult``.

    Returns None, the single value, or a tuple of values; raises DeviceError naming ``call`` and
    the driver's description of the error otherwise."""
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if status != 0:                     # CUresult is an int-valued enum; 0 is CUDA_SUCCESS
        raise DeviceError(f"{call} failed: {error_string(status)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def error_string(status) -> str:
    """``CUDA_ERROR_NAME (description)`` for a CUresult (or its int), without raising."""
    if type(status) is int and lib() is not None:
        return lib().error_string(status)
    name = getattr(status, "name", str(status))
    try:
        err, text = cuda().cuGetErrorString(status)
        if err == 0 and text:
            return f"{name} ({text.decode(errors='replace')})"
    except Exception:       # the description is a courtesy; the name alone still identifies it
        pass
    return name


@functools.cache
def available() -> bool:
    """Whether a CUDA driver and at least one device are present (computed once)."""
    from tilejit.runtime.libcuda import Libcuda
    if Libcuda.open() is None:          # no driver library: no GPU (and no cuda-python import to say so)
        return False
    c = lib()                           # (a TILEJIT_LAUNCH_BINDING naming no binding: LaunchError)
    try:
        if c is not None:
            return c.init() == 0 and c.device_count() > 0
        driver = cuda()
        if driver.cuInit(0)[0] != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == 0 and count > 0
    except Exception:   # DynamicLibNotFoundError (no driver library), missing bindings, ...
        return False


def require() -> None:
    """Raise LaunchError unless a GPU is usable (the hint depends on what TILEJIT_BACKEND says)."""
    if not available():
        chosen = os.environ.get("TILEJIT_BACKEND", "").strip()
        hint = (f"TILEJIT_BACKEND={chosen} asks for the GPU: set it to emulate (or interpret) to run on the CPU"
                if chosen else "set TILEJIT_BACKEND=emulate (or interpret) to run on the CPU")
        raise LaunchError(f"no CUDA device is available (no NVIDIA driver or no GPU found); {hint}")


def device_count() -> int:
    require()
    if lib() is not None:
        return lib().device_count()
    return check(cuda().cuDeviceGetCount(), "cuDeviceGetCount")


def context(device: int):
    """The primary context of ``device``, retained once per process (thread-safe)."""
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    require()
    with _lock:
        if device not in _contexts:
            count = device_count()
            if not 0 <= device < count:
                raise LaunchError(f"CUDA device {device} does not exist ({count} device(s) present)")
            c = lib()
            if c is not None:
                _contexts[device] = c.primary_context(c.device(device))
            else:
                handle = check(cuda().cuDeviceGet(device), "cuDeviceGet")
                _contexts[device] = check(cuda().cuDevicePrimaryCtxRetain(handle),
                                          "cuDevicePrimaryCtxRetain")
        return _contexts[device]


def activate(device: int) -> None:
    """Make ``device``'s primary context current on the calling thread.

    Set unconditionally (a cheap thread-local write in the driver): another library on this
    thread (torch, CuPy) may have switched the current context since our last call."""
    if lib() is not None:
        return lib().set_current(int(context(device)))
    check(cuda().cuCtxSetCurrent(context(device)), "cuCtxSetCurrent")


def current_device() -> int:
    """The device of the calling thread's current context, or 0 when none is current."""
    require()
    c = lib()
    if c is not None:
        return c.current_device() if c.current() else 0
    ctx = check(cuda().cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        return 0
    return int(check(cuda().cuCtxGetDevice(), "cuCtxGetDevice"))


@dataclass(frozen=True)
class DeviceProperties:
    """What the runtime checks launches against, and what the cache key records."""
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_block: int
    max_shared_per_block: int           # without opt-in (48 KiB)
    max_shared_per_block_optin: int     # with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
    max_grid: tuple[int, int, int]
    driver_version: int                 # e.g. 12080 for CUDA 12.8

    @property
    def target(self) -> str:
        """The PTX target name, e.g. ``sm_90a`` on Hopper (arch-specific features on sm_90)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


@functools.cache
def device_properties(device: int) -> DeviceProperties:
    """Properties of ``device`` (queried once per process)."""
    require()
    c = lib()
    if c is not None:
        from tilejit.runtime import libcuda as L
        handle = c.device(device)
        return DeviceProperties(
            name=c.device_name(handle),
            compute_capability=tuple(c.attribute(a, handle) for a in L.DEV_COMPUTE_CAPABILITY),
            sm_count=c.attribute(L.DEV_MULTIPROCESSOR_COUNT, handle),
            max_threads_per_block=c.attribute(L.DEV_MAX_THREADS_PER_BLOCK, handle),
            max_shared_per_block=c.attribute(L.DEV_MAX_SHARED_MEMORY_PER_BLOCK, handle),
            max_shared_per_block_optin=c.attribute(L.DEV_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, handle),
            max_grid=tuple(c.attribute(a, handle) for a in L.DEV_MAX_GRID_DIM),
            driver_version=c.driver_version())
    driver = cuda()
    handle = check(driver.cuDeviceGet(device), "cuDeviceGet")
    attr = driver.CUdevice_attribute

    def get(name: str) -> int:
        return check(driver.cuDeviceGetAttribute(getattr(attr, name), handle),
                     f"cuDeviceGetAttribute({name})")

    raw_name = check(driver.cuDeviceGetName(256, handle), "cuDeviceGetName")
    return DeviceProperties(
        name=raw_name.split(b"\0", 1)[0].decode(errors="replace"),
        compute_capability=(get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                            get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
        sm_count=get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        max_threads_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
        max_shared_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
        max_shared_per_block_optin=get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        max_grid=tuple(get(f"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{axis}") for axis in "XYZ"),
        driver_version=check(driver.cuDriverGetVersion(), "cuDriverGetVersion"),
    )


def pointer_device(ptr: int) -> int | None:
    """The device ordinal holding device pointer ``ptr``; None for host memory.

    Raises LaunchError when the driver does not know the pointer (plain host memory)."""
    driver = cuda()
    if int(check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
        activate(0)                     # the pointer query needs some current context
    attrs = driver.CUpointer_attribute
    err, mem_type = driver.cuPointerGetAttribute(attrs.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err != 0:
        raise LaunchError(f"pointer 0x{ptr:x} is not CUDA memory ({error_string(err)})")
    if int(mem_type) == int(driver.CUmemorytype.CU_MEMORYTYPE_HOST):
        return None
    return int(check(driver.cuPointerGetAttribute(attrs.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
                     "cuPointerGetAttribute(DEVICE_ORDINAL)"))
