"""Loading PTX/cubin into a device's context and launching it, with arguments packed by the
kernel's ``ParamDesc`` list. The runtime never needs to know how the code was made."""
from __future__ import annotations

import ctypes
import numbers
import os
import threading
import weakref

import numpy as np

from tilejit.abi import ASSERT_SYMBOL, ASSERT_WORDS, ParamKind
from tilejit.errors import DeviceError, LaunchError
from tilejit.runtime import driver
from tilejit.runtime.arrays import as_kernel_array
from tilejit.runtime.packing import ArgPacker

JIT_LOG_BYTES = 1 << 16
_ELF_MAGIC, _FATBIN_MAGIC = b"\x7fELF", b"\x50\xed\x55\xba"


class LoadedKernel:
    """One kernel function loaded on one device: check limits, pack arguments, launch.

    ``launch_fn(kernel, grid, block_threads, stream, kernel_params_address)`` does the driver
    call; tests inject a fake to inspect the packed parameters without a GPU."""

    def __init__(self, function, device: int, name: str, shared_bytes: int, max_grid: tuple,
                 max_threads: int, num_regs: int = 0, launch_fn=None):
        self.function, self.device, self.name = function, device, name
        self.shared_bytes, self.max_grid = shared_bytes, tuple(max_grid)
        self.max_threads, self.num_regs = max_threads, num_regs
        self._launch_fn = launch_fn or _driver_launch
        self.context = None                 # set by load(): the device's primary context
        self._last = (None, None)           # (params list last seen, its packer): one attribute,
        self._packers: dict[tuple, ArgPacker] = {}      # so threads read a consistent pair
        self._resident: dict[int, int] = {}             # block threads -> resident CTAs (resident_ctas)
        self.dependent_launch = False       # launch with programmatic stream serialization (it waits)

    def launch(self, grid, block_threads: int, args, params, stream: int | None = None) -> None:
        """Launch on ``grid`` (3 ints) with ``block_threads`` threads per block.

        ``args`` holds one entry per runtime argument: a ``KernelArray`` (anything with ``ptr``,
        ``shape``, ``strides``) for arrays, a number for scalars; ``params`` is the kernel's
        ``ParamDesc`` list. Re-launching with the same ``params`` object reuses its packer."""
        mx, my, mz = self.max_grid
        if not (len(grid) == 3 and 0 < grid[0] <= mx and 0 < grid[1] <= my and 0 < grid[2] <= mz
                and 0 < block_threads <= self.max_threads):
            if self._check_geometry(grid, block_threads):
                return                                  # an empty grid: nothing to run
        last_params, packer = self._last
        if params is not last_params:
            packer = self._packer_for(params)
            self._last = (params, packer)
        self._launch_fn(self, grid, block_threads, stream, packer.pack(args))

    def resident_ctas(self, block_threads: int) -> int:
        """CTAs of ``block_threads`` threads that the device runs at once (SMs times the driver's
        occupancy for this function), queried once per block size: a persistent kernel's grid."""
        if block_threads not in self._resident:
            driver.activate(self.device)
            if driver.lib() is not None:
                per_sm = driver.lib().occupancy(int(self.function), block_threads, self.shared_bytes)
            else:
                per_sm = driver.check(driver.cuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    self.function, block_threads, self.shared_bytes), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            self._resident[block_threads] = max(1, int(per_sm)) * driver.device_properties(self.device).sm_count
        return self._resident[block_threads]

    def _packer_for(self, params) -> ArgPacker:
        key = tuple(params)
        if key not in self._packers:
            self._packers[key] = ArgPacker(key, kernel=self.name)
        return self._packers[key]

    def _check_geometry(self, grid, block_threads: int) -> bool:
        """Raise LaunchError for an impossible launch; True if the grid is empty."""
        if len(grid) != 3 or any(not isinstance(g, numbers.Integral) or g < 0 for g in grid):
            raise LaunchError(f"grid must be 3 non-negative ints, got {grid}", kernel=self.name)
        for axis, (g, limit) in enumerate(zip(grid, self.max_grid)):
            if g > limit:
                raise LaunchError(f"grid {tuple(grid)} exceeds the device limit {self.max_grid} "
                                  f"along axis {axis} ({g} > {limit})", kernel=self.name)
        if not 0 < block_threads <= self.max_threads:
            why = (f"the kernel uses {self.num_regs} registers per thread, so"
                   if self.num_regs else "")
            raise LaunchError(f"{block_threads} threads per block cannot run: {why} at most "
                              f"{self.max_threads} threads per block fit".replace("  ", " "),
                              kernel=self.name)
        return 0 in grid


def _driver_launch(kernel: LoadedKernel, grid, block_threads: int, stream, params_address) -> None:
    """Launch through cuda-python, or through libcuda's C functions (``LibcudaLaunch``) with
    ``TILEJIT_LAUNCH_BINDING=ctypes``; ``use_binding`` picks one."""
    if _driver_launch_impl is None:
        use_binding(driver.binding_setting())
    _driver_launch_impl(kernel, grid, block_threads, stream, params_address)


# CUlaunchAttributeID: the launched grid may start while the stream's previous kernel runs; it
# waits for that kernel's results with griddepcontrol.wait (tj.wait_prior_kernels)
PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: a 4-byte id, padding to 8, then a 64-byte union (its first 4
    bytes: ``programmaticStreamSerializationAllowed``)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int),
                ("value_rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``, the first argument of ``cuLaunchKernelEx``."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def dependent_launch_config(grid, block_threads: int, shared_bytes: int, stream) -> LaunchConfig:
    """The ``cuLaunchKernelEx`` configuration of a launch with programmatic stream serialization
    (the attribute lives as long as the config: ``config._attribute``)."""
    attribute = LaunchAttribute(PROGRAMMATIC_STREAM_SERIALIZATION, 0, 1)
    config = LaunchConfig(grid[0], grid[1], grid[2], block_threads, 1, 1, shared_bytes, stream or None,
                          ctypes.pointer(attribute), 1)
    config._attribute = attribute
    return config


def _cuda_python_launch(kernel: LoadedKernel, grid, block_threads: int, stream, params_address) -> None:
    cu = driver.cuda()
    err, = cu.cuCtxSetCurrent(kernel.context)
    if err:
        driver.check(err, "cuCtxSetCurrent")
    if getattr(kernel, "dependent_launch", False):
        return _cuda_python_launch_ex(cu, kernel, grid, block_threads, stream, params_address)
    err, = cu.cuLaunchKernel(kernel.function, grid[0], grid[1], grid[2], block_threads, 1, 1,
                             kernel.shared_bytes, stream or 0, params_address, 0)
    if err:
        raise DeviceError(f"cuLaunchKernel failed: {driver.error_string(err)}", kernel=kernel.name)


def _cuda_python_launch_ex(cu, kernel: LoadedKernel, grid, block_threads: int, stream, params_address) -> None:
    """``cuLaunchKernelEx`` with programmatic stream serialization, through cuda-python."""
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = (int(g) for g in grid)
    config.blockDimX, config.blockDimY, config.blockDimZ = int(block_threads), 1, 1
    config.sharedMemBytes, config.hStream = kernel.shared_bytes, cu.CUstream(int(stream or 0))
    attribute = cu.CUlaunchAttribute()
    attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config.attrs, config.numAttrs = [attribute], 1
    err, = cu.cuLaunchKernelEx(config, kernel.function, int(params_address), 0)
    if err:
        raise DeviceError(f"cuLaunchKernelEx failed: {driver.error_string(err)}", kernel=kernel.name)


class LibcudaLaunch:
    """``cuLaunchKernel`` called through ctypes on libcuda itself, with the function and context
    handles kept as integers, and the context made current only when another one is
    (``cuCtxGetCurrent`` first).  On the H200 (2026-12-05, bench_launch.py, launchers taking
    turns) a bare cuLaunchKernel cost 6.18 µs this way, 7.90 with argtypes and 6.05 through
    cuda-python."""

    def __init__(self, lib):
        # No argtypes: ctypes then passes Python ints as C ints and ctypes objects as they are,
        # without a conversion call per argument (with argtypes a bare cuLaunchKernel measured
        # 8.4 µs on the H200, cuda-python's 6.3).  Handles and addresses go as c_void_p.
        self.launch_kernel = lib.cuLaunchKernel
        self.launch_kernel.restype = ctypes.c_int
        self.launch_kernel_ex = getattr(lib, "cuLaunchKernelEx", None)     # CUDA 12.0 and later
        if self.launch_kernel_ex is not None:
            self.launch_kernel_ex.restype = ctypes.c_int
        self.get_current, self.set_current = lib.cuCtxGetCurrent, lib.cuCtxSetCurrent
        self.get_current.restype = self.set_current.restype = ctypes.c_int
        self._local = threading.local()       # each thread's cuCtxGetCurrent result
        from tilejit.runtime.libcuda import Libcuda
        self._errors = Libcuda(lib)           # error names from this libcuda (no cuda-python import)

    @classmethod
    def open(cls) -> "LibcudaLaunch | None":
        from tilejit.runtime.libcuda import Libcuda
        c = Libcuda.open()
        return cls(c.lib) if c is not None else None

    def __call__(self, kernel: LoadedKernel, grid, block_threads: int, stream, params_address) -> None:
        handles = kernel.__dict__.get("_handles")
        if handles is None:
            context = int(kernel.context)
            handles = kernel._handles = (ctypes.c_void_p(int(kernel.function)), context, ctypes.c_void_p(context),
                                         getattr(kernel, "dependent_launch", False))
        function, context, context_arg, dependent = handles
        try:
            current, ref = self._local.current
        except AttributeError:
            current = ctypes.c_void_p()
            ref = ctypes.byref(current)
            self._local.current = current, ref
        if self.get_current(ref) or current.value != context:
            err = self.set_current(context_arg)
            if err:
                raise DeviceError(f"cuCtxSetCurrent failed: {self._errors.error_string(err)}", kernel=kernel.name)
        x, y, z = grid
        if not (type(x) is int and type(y) is int and type(z) is int and type(block_threads) is int
                and type(params_address) is int and (stream is None or type(stream) is int)):
            # a value ctypes would pass wrongly without argtypes (a NumPy integer, say)
            return _cuda_python_launch(kernel, grid, block_threads, stream, params_address)
        if dependent:
            return self._launch_ex(kernel, function, grid, block_threads, stream, params_address)
        err = self.launch_kernel(function, x, y, z, block_threads, 1, 1, kernel.shared_bytes,
                                 ctypes.c_void_p(stream) if stream else None, ctypes.c_void_p(params_address), None)
        if err:
            raise DeviceError(f"cuLaunchKernel failed: {self._errors.error_string(err)}", kernel=kernel.name)

    def _launch_ex(self, kernel, function, grid, block_threads: int, stream, params_address) -> None:
        if self.launch_kernel_ex is None:
            raise DeviceError("this driver has no cuLaunchKernelEx (CUDA 12.0+), which a kernel "
                              "calling tj.wait_prior_kernels() is launched with", kernel=kernel.name)
        config = dependent_launch_config(grid, block_threads, kernel.shared_bytes, stream)
        err = self.launch_kernel_ex(ctypes.byref(config), function, ctypes.c_void_p(params_address), None)
        if err:
            raise DeviceError(f"cuLaunchKernelEx failed: {self._errors.error_string(err)}", kernel=kernel.name)


_driver_launch_impl = None


def binding_in_use() -> str:
    """The binding launches take (``use_binding``'s answer, without choosing it), and why."""
    try:
        name = driver.binding_setting()
    except LaunchError:
        return f"none: TILEJIT_LAUNCH_BINDING={os.environ['TILEJIT_LAUNCH_BINDING']!r} is neither 'ctypes' nor 'cuda-python'"
    if name == "cuda-python":
        return "cuda-python" + (" (TILEJIT_LAUNCH_BINDING)" if "TILEJIT_LAUNCH_BINDING" in os.environ else "")
    return "ctypes on libcuda" if LibcudaLaunch.open() else "cuda-python (libcuda cannot be opened here)"


def use_binding(name: str) -> str:
    """Launch through ``"cuda-python"`` or ``"ctypes"`` (libcuda's C functions; cuda-python where
    libcuda does not load); the binding in use.  ``TILEJIT_LAUNCH_BINDING`` picks the first
    (``driver.DEFAULT_BINDING`` without it), and with it where devices, contexts and modules go
    (``driver.lib``)."""
    global _driver_launch_impl
    lib = LibcudaLaunch.open() if driver.check_binding(name) == "ctypes" else None
    _driver_launch_impl = lib or _cuda_python_launch
    return "ctypes" if lib else "cuda-python"


def load(image: bytes, kernel_name: str, shared_bytes: int, device: int) -> LoadedKernel:
    """Load a cubin, fatbin or PTX text on ``device`` and look up ``kernel_name``.

    ``shared_bytes`` is the dynamic shared memory of every launch; over 48 KiB it is opted into
    with cuFuncSetAttribute. Too much shared memory -> LaunchError before anything runs."""
    props = driver.device_properties(device)
    if shared_bytes > props.max_shared_per_block_optin:
        raise LaunchError(f"the kernel needs {shared_bytes} bytes of shared memory; {props.name} "
                          f"allows at most {props.max_shared_per_block_optin} per block",
                          kernel=kernel_name)
    driver.activate(device)
    module = _load_module(image, kernel_name)
    c = driver.lib()
    if c is not None:
        from tilejit.runtime import libcuda as L
        function = c.function(module, kernel_name)

        def attribute(which):
            return c.function_attribute({"shared": L.FUNC_SHARED_SIZE_BYTES, "threads": L.FUNC_MAX_THREADS_PER_BLOCK,
                                         "registers": L.FUNC_NUM_REGS}[which], function)

        def allow_dynamic_shared(size):
            c.set_function_attribute(function, L.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, size)
    else:
        cu = driver.cuda()
        function = driver.check(cu.cuModuleGetFunction(module, kernel_name.encode()),
                                f"cuModuleGetFunction({kernel_name!r})")
        attrs = cu.CUfunction_attribute

        def attribute(which):
            code = {"shared": attrs.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "threads": attrs.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                    "registers": attrs.CU_FUNC_ATTRIBUTE_NUM_REGS}[which]
            return driver.check(cu.cuFuncGetAttribute(code, function), "cuFuncGetAttribute")

        def allow_dynamic_shared(size):
            driver.check(cu.cuFuncSetAttribute(function, attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, size),
                         "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    static_shared = attribute("shared")
    if static_shared + shared_bytes > props.max_shared_per_block_optin:
        raise LaunchError(f"the kernel needs {static_shared} static + {shared_bytes} dynamic bytes "
                          f"of shared memory; at most {props.max_shared_per_block_optin} fit",
                          kernel=kernel_name)
    if static_shared + shared_bytes > props.max_shared_per_block:
        allow_dynamic_shared(shared_bytes)
    max_threads, num_regs = attribute("threads"), attribute("registers")
    kernel = LoadedKernel(function, device, kernel_name, shared_bytes, props.max_grid,
                          max_threads, num_regs)
    kernel.module = module          # the function is valid only while its module is loaded
    kernel.context = driver.context(device)
    weakref.finalize(kernel, _unload, module, device).atexit = False
    return kernel




def take_assert_record(kernel: LoadedKernel) -> list[int] | None:
    """After the kernel's launches end (the context is synchronised): the words of its module's
    failed-assert record, which is cleared for the next launch; None when no assert failed."""
    cu = driver.cuda()
    driver.activate(kernel.device)
    driver.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    module = cu.CUmodule(int(kernel.module)) if type(kernel.module) is int else kernel.module
    address, size = driver.check(cu.cuModuleGetGlobal(module, ASSERT_SYMBOL.encode()),
                                 f"cuModuleGetGlobal({ASSERT_SYMBOL!r})")
    words = np.zeros(ASSERT_WORDS, np.int32)
    driver.check(cu.cuMemcpyDtoH(words.ctypes.data, address, min(int(size), words.nbytes)), "cuMemcpyDtoH")
    if not words[0]:
        return None
    driver.check(cu.cuMemsetD32(address, 0, ASSERT_WORDS), "cuMemsetD32")
    return [int(w) for w in words]


def _load_module(image: bytes, kernel_name: str):
    """cuModuleLoadDataEx with error and info logs; the driver's log goes into the DeviceError."""
    image = bytes(image)
    if not image.startswith((_ELF_MAGIC, _FATBIN_MAGIC)) and not image.endswith(b"\0"):
        image += b"\0"                  # PTX text must be NUL-terminated
    if driver.lib() is not None:
        err, module, log = driver.lib().load_module(image, JIT_LOG_BYTES)
    else:
        cu = driver.cuda()
        error_log, info_log = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
        jit = cu.CUjit_option
        options = [jit.CU_JIT_ERROR_LOG_BUFFER, jit.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   jit.CU_JIT_INFO_LOG_BUFFER, jit.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                   jit.CU_JIT_LOG_VERBOSE]
        values = [error_log, JIT_LOG_BYTES, info_log, JIT_LOG_BYTES, 1]
        err, module = cu.cuModuleLoadDataEx(image, len(options), options, values)
        log = "\n".join(text for text in (_c_string(error_log), _c_string(info_log)) if text)
    if err:
        raise DeviceError(f"cuModuleLoadDataEx failed: {driver.error_string(err)}"
                          + (f"\ndriver JIT log:\n{log}" if log else ""), kernel=kernel_name)
    return module


def _c_string(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _unload(module, device: int) -> None:
    try:
        driver.activate(device)
        if type(module) is int and driver.lib() is not None:
            driver.lib().unload_module(module)
        else:
            driver.cuda().cuModuleUnload(module)
    except Exception:           # never raise from a finaliser
        pass


def select_device(devices, default) -> int:
    """The one device holding the device-resident arrays (None entries are host arrays), or
    ``default()`` when there are none. Arrays on two devices -> LaunchError."""
    found = sorted({d for d in devices if d is not None})
    if len(found) > 1:
        raise LaunchError(f"array arguments live on different devices {found}; "
                          "move them to one device")
    return found[0] if found else default()


def launch_arrays(kernel_for_device, grid, block_threads: int, args, params, writes=(),
                  stream: int | None = None, array_args=None, geometry=None) -> None:
    """Launch with user arguments: arrays become device views (NumPy copied in), the kernel
    runs, and the NumPy arrays at indices ``writes`` get the results copied back.

    ``kernel_for_device(device) -> LoadedKernel`` loads the kernel where the arrays live.
    ``array_args`` lists which arguments are arrays (default: those ``params`` read from).
    The stream is ``stream``, else the first array's own (torch's current stream, a CUDA Array
    Interface stream), else the legacy default stream. ``geometry(kernel, grid, views) -> (grid,
    views)``, if given, reshapes the launch once the device is known (a persistent kernel's grid
    comes from the occupancy of the device the arrays live on)."""
    if array_args is None:
        array_args = sorted({p.arg for p in params if p.kind not in (ParamKind.SCALAR, ParamKind.WORKSPACE)})
    for i in writes:
        if isinstance(args[i], np.ndarray) and not args[i].flags.writeable:
            raise LaunchError(f"argument {i} is a read-only NumPy array, but the kernel stores to it")
    resident = {i: as_kernel_array(args[i]) for i in array_args
                if not isinstance(args[i], np.ndarray)}
    device = select_device([v.device for v in resident.values()], driver.current_device)
    if stream is None:
        stream = next((v.stream for v in resident.values() if v.stream is not None), None)
    views = list(args)
    for i in array_args:
        views[i] = resident[i] if i in resident else as_kernel_array(args[i], device, stream)
    kernel = kernel_for_device(device)
    if geometry is not None:
        grid, views = geometry(kernel, grid, views)
    kernel.launch(grid, block_threads, views, params, stream)
    copied = [i for i in array_args if i not in resident]
    for i in copied:
        if i in writes:
            views[i].copy_back(stream)
    if copied:      # the temporary device copies are freed next: let the kernel finish first
        driver.check(driver.cuda().cuStreamSynchronize(stream or 0), "cuStreamSynchronize")
