"""The CUDA driver's C functions through ctypes, for what loading and launching a compiled kernel
needs: devices and their attributes, primary contexts, modules and functions, TMA descriptors
and ``cuLaunchKernel``.

    Libcuda.open() -> Libcuda | None        (None where libcuda.so.1 cannot be opened)

Importing cuda-python's driver module costs 40-50 ms the first time, which was most of a new
process's cache hit to first launch; with ``TILEJIT_LAUNCH_BINDING=ctypes`` a cache hit on torch
tensors imports nothing of cuda-python (``runtime.driver.lib``).  Handles (contexts, modules,
functions) are plain ints, which cuda-python's functions also accept.  Arguments go without
``argtypes``: ctypes then passes Python ints as C ints and ctypes objects as they are, so every
pointer and 64-bit value below is wrapped (``c_void_p``, ``c_size_t``) and every output is a
``byref`` of a ctypes value.  The enum values are cuda.h's (a test checks them against
cuda-python's where it is installed).
"""
from __future__ import annotations

import ctypes
import functools

from tilejit.errors import DeviceError

# CUdevice_attribute
DEV_MAX_THREADS_PER_BLOCK = 1
DEV_MAX_GRID_DIM = (5, 6, 7)
DEV_MAX_SHARED_MEMORY_PER_BLOCK = 8
DEV_MULTIPROCESSOR_COUNT = 16
DEV_COMPUTE_CAPABILITY = (75, 76)
DEV_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
# CUfunction_attribute
FUNC_MAX_THREADS_PER_BLOCK = 0
FUNC_SHARED_SIZE_BYTES = 1
FUNC_NUM_REGS = 4
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# CUjit_option
JIT_INFO_LOG_BUFFER = 3
JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
JIT_ERROR_LOG_BUFFER = 5
JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
JIT_LOG_VERBOSE = 12
# CUtensorMap: 16 64-bit words, 64-byte aligned; CU_TENSOR_MAP_L2_PROMOTION_L2_256B
TENSOR_MAP_WORDS = 16
L2_PROMOTION_256B = 3

_VOID, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t


class Libcuda:
    """One loaded libcuda; each method is one driver call (DeviceError naming it on failure)."""

    def __init__(self, lib):
        self.lib = lib

    @classmethod
    @functools.cache
    def open(cls) -> "Libcuda | None":
        try:       # the driver's soname, found as the system finds it (find_library would run ldconfig)
            return cls(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            return None

    # --- errors ------------------------------------------------------------------------------
    def error_string(self, status: int) -> str:
        """``CUDA_ERROR_NAME (description)``, as ``driver.error_string`` words it."""
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self.lib.cuGetErrorName(int(status), ctypes.byref(name)) or not name.value:
            return f"CUresult {int(status)}"
        if self.lib.cuGetErrorString(int(status), ctypes.byref(text)) or not text.value:
            return name.value.decode(errors="replace")
        return f"{name.value.decode(errors='replace')} ({text.value.decode(errors='replace')})"

    def call(self, name: str, *args, what: str | None = None) -> None:
        err = getattr(self.lib, name)(*args)
        if err:
            raise DeviceError(f"{what or name} failed: {self.error_string(err)}")

    def _int_out(self, name: str, *args, what: str | None = None) -> int:
        out = _INT()
        self.call(name, ctypes.byref(out), *args, what=what)
        return out.value

    def _handle_out(self, name: str, *args, what: str | None = None) -> int:
        out = _VOID()
        self.call(name, ctypes.byref(out), *args, what=what)
        return out.value or 0

    # --- devices -----------------------------------------------------------------------------
    def init(self) -> int:
        """cuInit's status (0: a driver and a device are usable)."""
        return self.lib.cuInit(0)

    def device_count(self) -> int:
        return self._int_out("cuDeviceGetCount")

    def device(self, ordinal: int) -> int:
        return self._int_out("cuDeviceGet", int(ordinal))

    def attribute(self, attribute: int, device: int) -> int:
        return self._int_out("cuDeviceGetAttribute", attribute, device, what=f"cuDeviceGetAttribute({attribute})")

    def device_name(self, device: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, device)
        return buf.value.decode(errors="replace")

    def driver_version(self) -> int:
        return self._int_out("cuDriverGetVersion")

    # --- contexts ----------------------------------------------------------------------------
    def primary_context(self, device: int) -> int:
        return self._handle_out("cuDevicePrimaryCtxRetain", device)

    def set_current(self, context: int) -> None:
        self.call("cuCtxSetCurrent", _VOID(context))

    def current(self) -> int:
        return self._handle_out("cuCtxGetCurrent")

    def current_device(self) -> int:
        return self._int_out("cuCtxGetDevice")

    # --- modules and functions -----------------------------------------------------------------
    def load_module(self, image: bytes, log_bytes: int) -> tuple[int, int, str]:
        """cuModuleLoadDataEx of ``image`` with error and info logs: (status, module, the logs)."""
        error_log, info_log = ctypes.create_string_buffer(log_bytes), ctypes.create_string_buffer(log_bytes)
        options = (_INT * 5)(JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES, JIT_INFO_LOG_BUFFER,
                             JIT_INFO_LOG_BUFFER_SIZE_BYTES, JIT_LOG_VERBOSE)
        values = (_VOID * 5)(ctypes.addressof(error_log), log_bytes, ctypes.addressof(info_log), log_bytes, 1)
        module = _VOID()
        err = self.lib.cuModuleLoadDataEx(ctypes.byref(module), ctypes.c_char_p(image), 5, options, values)
        logs = "\n".join(t for t in (_text(error_log), _text(info_log)) if t)
        return err, module.value or 0, logs

    def unload_module(self, module: int) -> None:
        self.call("cuModuleUnload", _VOID(module))

    def function(self, module: int, name: str) -> int:
        return self._handle_out("cuModuleGetFunction", _VOID(module), ctypes.c_char_p(name.encode()),
                                what=f"cuModuleGetFunction({name!r})")

    def function_attribute(self, attribute: int, function: int) -> int:
        return self._int_out("cuFuncGetAttribute", attribute, _VOID(function), what="cuFuncGetAttribute")

    def set_function_attribute(self, function: int, attribute: int, value: int) -> None:
        self.call("cuFuncSetAttribute", _VOID(function), attribute, int(value),
                  what=f"cuFuncSetAttribute({attribute})")

    def occupancy(self, function: int, block_threads: int, shared_bytes: int) -> int:
        """CTAs of ``block_threads`` threads per SM (cuOccupancyMaxActiveBlocksPerMultiprocessor)."""
        return self._int_out("cuOccupancyMaxActiveBlocksPerMultiprocessor", _VOID(function), int(block_threads),
                             _SIZE(shared_bytes))

    # --- TMA descriptors -----------------------------------------------------------------------
    def encode_tiled(self, args) -> bytes:
        """The 128-byte CUtensorMap of ``tensormap.TiledArgs`` ``args`` (cuTensorMapEncodeTiled)."""
        buf = ctypes.create_string_buffer(TENSOR_MAP_WORDS * 8 + 64)
        at = -ctypes.addressof(buf) % 64                      # the map must be 64-byte aligned
        u64, u32 = ctypes.c_uint64 * args.rank, ctypes.c_uint32 * args.rank
        strides = ctypes.c_uint64 * max(1, args.rank - 1)
        err = self.lib.cuTensorMapEncodeTiled(
            _VOID(ctypes.addressof(buf) + at), args.data_type, args.rank, _VOID(args.address), u64(*args.dims),
            strides(*args.strides), u32(*args.box), u32(*([1] * args.rank)), 0, args.swizzle,
            L2_PROMOTION_256B, 0)
        if err:
            raise DeviceError(f"cuTensorMapEncodeTiled failed: {self.error_string(err)} for {args}")
        return buf.raw[at:at + TENSOR_MAP_WORDS * 8]


def _text(buf) -> str:
    return buf.value.decode(errors="replace").strip()
