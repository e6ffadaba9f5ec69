"""The native re-launch path: ``native_launch.c``, compiled once per machine and Python with the
system's C compiler (as Triton builds its launchers) into ``<cache>/native``, checks that a
launch repeats the last specialisation of a kernel and grid, packs the parameters and calls
``cuLaunchKernel`` in one C call, with no Python between the user's ``kernel[grid](...)`` and
the driver but the launch function's own argument parsing.

It is an accelerator only: it takes a launch the Python re-launch path has made once, for the
same arguments' kinds, dtypes, shapes, strides, alignment and device, constexprs, ``num_warps``
and compile switches, and anything else (or anything it cannot pack: tensor maps, persistent or
clustered grids, narrow scalars) goes down the Python path.  ``TILEJIT_NATIVE_LAUNCH=0`` turns it
off; without a C compiler or Python's headers it is off, and ``status()`` says why."""
from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading

from tilejit.abi import ParamKind
from tilejit.specs import positive_float

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_launch.c")
MODULE = "tilejit_native_launch"
ARG_NONE, ARG_INT32, ARG_INT64, ARG_FLOAT, ARG_TENSOR, ARG_DEVICE_ARRAY, ARG_BOOL, ARG_FLOAT_POSITIVE = range(8)
P_PTR, P_CONST, P_INT, P_FLOAT32, P_FLOAT64, P_MAP = range(6)
_INT_PARAMS = {"int32": 4, "int64": 8}
_FLOAT_PARAMS = {"float32": P_FLOAT32, "float64": P_FLOAT64}

ENABLED = True          # False: no new native launchers are made (those made stay; benchmarks)
_module = None
_why_not: str | None = None
_building: threading.Thread | None = None
_lock = threading.Lock()


def status() -> str:
    """"on" when launches may take the native path, else why not (waits for a build under way)."""
    load()
    return "on" if _module is not None else f"off: {_why_not}"


def settled() -> bool:
    """True once the module is loaded or known not to load (no build under way or to come)."""
    return _module is not None or _why_not is not None


def load(wait: bool = True):
    """The compiled module, or None where it cannot be.  A build (the C compiler, about half a
    second, once per machine and Python) runs now with ``wait``, else in a thread of its own:
    the launch that asks first goes on down the Python path and never waits for a compiler."""
    global _module, _why_not, _building
    if _module is not None or _why_not is not None:
        return _module
    with _lock:
        if _module is not None or _why_not is not None:
            return _module
        if os.environ.get("TILEJIT_NATIVE_LAUNCH", "1").strip().lower() in ("0", "off", "false", "no"):
            _why_not = "TILEJIT_NATIVE_LAUNCH=0"
            return None
        try:
            path, built = _target()
            if built:
                _module = _import(path)
                return _module
        except (OSError, ImportError, RuntimeError) as e:
            _why_not = f"{type(e).__name__}: {e}"
            return None
        if _building is None:
            _building = threading.Thread(target=_build_and_import, args=(path,), name="tilejit-native-build",
                                         daemon=True)
            _building.start()
        building = _building
    if wait:
        building.join()
    return _module


def _build_and_import(path: str) -> None:
    global _module, _why_not
    try:
        module = _import(_build(path))
    except (OSError, ImportError, subprocess.SubprocessError, RuntimeError) as e:
        _why_not = f"{type(e).__name__}: {e}"
    else:
        _module = module


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _target() -> tuple[str, bool]:
    """Where the shared object for this source, Python and compiler lives, and whether it is
    there already."""
    from tilejit.runtime.cache import cache_dir
    with open(SOURCE, "rb") as f:
        source = f.read()
    include = sysconfig.get_paths()["include"]
    tag = hashlib.sha256(b"\0".join([source, sys.version.encode(), sys.platform.encode(), include.encode(),
                                     " ".join(_compiler()).encode()])).hexdigest()[:24]
    folder = os.path.join(cache_dir(), "native")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.stat(folder)
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuntimeError(f"{folder} is not this user's alone: no compiled code is loaded from it")
    suffix = (importlib.machinery.EXTENSION_SUFFIXES or [".so"])[0]
    path = os.path.join(folder, f"{MODULE}-{tag}{suffix}")
    return path, os.path.exists(path)


def _build(path: str) -> str:
    """Compile the source into ``path`` (atomically: a temporary file renamed)."""
    folder, suffix = os.path.dirname(path), (importlib.machinery.EXTENSION_SUFFIXES or [".so"])[0]
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"Python's C headers are not installed ({include}/Python.h)")
    fd, temporary = tempfile.mkstemp(suffix=suffix, dir=folder)
    os.close(fd)
    try:
        done = subprocess.run(_compiler() + ["-O2", "-shared", "-fPIC", "-std=gnu11", f"-I{include}", SOURCE,
                                             "-o", temporary], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"the C compiler failed: {done.stderr.strip()[-2000:]}")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path


def _import(path: str):
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def driver_functions() -> tuple[int, int, int, int] | None:
    """The addresses of libcuda's cuLaunchKernel, cuLaunchKernelEx (0 where it has none),
    cuCtxGetCurrent and cuCtxSetCurrent; None without libcuda."""
    from tilejit.runtime.libcuda import Libcuda
    c = Libcuda.open()
    if c is None:
        return None
    lib = c.lib

    def address(name):
        fn = getattr(lib, name, None)
        return ctypes.cast(fn, ctypes.c_void_p).value if fn is not None else 0
    return (address("cuLaunchKernel"), address("cuLaunchKernelEx"), address("cuCtxGetCurrent"),
            address("cuCtxSetCurrent"))


def _error_raiser(kernel_name: str):
    def on_error(status: int, call: str):
        from tilejit.errors import DeviceError
        from tilejit.runtime.libcuda import Libcuda
        c = Libcuda.open()
        text = c.error_string(status) if c is not None else f"CUresult {status}"
        raise DeviceError(f"{call} failed: {text}", kernel=kernel_name)
    return on_error


class _NoTensor:          # what torch.Tensor is where torch has not been imported
    pass


def _no_stream(device):
    raise RuntimeError("torch is not imported")


def _arg_guard(value, device_array_type, tensor_type):
    """One positional argument's guard entry, or None where the native path cannot take it."""
    if value is None:
        return (ARG_NONE, None, None, None, False)
    if type(value) is int:
        return (ARG_INT32 if -2**31 <= value < 2**31 else ARG_INT64, None, None, None, False)
    if type(value) is float:            # specialised on its sign (ScalarSpec.positive)
        return (ARG_FLOAT_POSITIVE if positive_float(value) else ARG_FLOAT, None, None, None, False)
    if type(value) is bool:
        return (ARG_BOOL, None, None, None, False)
    if type(value) is device_array_type:
        return (ARG_DEVICE_ARRAY, value.dtype, tuple(value.shape), tuple(value.strides), not value.ptr & 15)
    if isinstance(value, tensor_type):
        return (ARG_TENSOR, value.dtype, tuple(value.shape), tuple(value.stride()), not value.data_ptr() & 15)
    return None


def _fits(value: int, width: int) -> bool:
    return -(1 << (8 * width - 1)) <= value < (1 << (8 * width - 1))


def param_slots(params, args, guards, extra=(), views=None):
    """(one (kind, positional argument, width, value) per ParamDesc, the tensor maps' (view,
    ParamDesc) in map order), or None where a parameter cannot be packed natively.  A
    ParamDesc's ``arg`` counts the arguments that are not None, then ``extra``: the values the
    launch geometry appends (grid extents, as ints); ``guards`` are ``args``' guard entries (a
    DIM or STRIDE is the constant its array's guard holds); ``views`` the kernel arguments as
    the Python path packs them (a tensor map's dtype, shape and strides)."""
    position = [i for i, a in enumerate(args) if a is not None]
    slots, maps = [], []
    for p in params:
        width = 8 if p.dtype is not None and p.dtype.bits == 64 else 4
        if p.arg >= len(position):
            value = extra[p.arg - len(position)] if p.arg - len(position) < len(extra) else None
            if p.kind is not ParamKind.SCALAR or type(value) is not int or p.dtype.name not in _INT_PARAMS \
                    or not _fits(value, _INT_PARAMS[p.dtype.name]):
                return None
            slots.append((P_CONST, -1, _INT_PARAMS[p.dtype.name], value))
            continue
        if p.arg < 0:
            return None
        at = position[p.arg]
        kind, _, shape, strides, _ = guards[at]
        array = kind in (ARG_TENSOR, ARG_DEVICE_ARRAY)
        if p.kind is ParamKind.PTR and array:
            slots.append((P_PTR, at, 8, 0))
        elif p.kind in (ParamKind.DIM, ParamKind.STRIDE) and array:
            value = (shape if p.kind is ParamKind.DIM else strides)[p.axis]
            if not _fits(value, width):
                return None
            slots.append((P_CONST, -1, width, value))
        elif p.kind is ParamKind.TENSOR_MAP and array and views is not None:
            slots.append((P_MAP, at, 8, len(maps)))
            maps.append((views[p.arg], p))
        elif p.kind is ParamKind.SCALAR and type(args[at]) is int and p.dtype.name in _INT_PARAMS:
            if not _fits(args[at], _INT_PARAMS[p.dtype.name]):
                return None
            slots.append((P_INT, at, _INT_PARAMS[p.dtype.name], 0))
        elif p.kind is ParamKind.SCALAR and type(args[at]) is bool and p.dtype.name == "bool":
            slots.append((P_INT, at, 1, 0))
        elif p.kind is ParamKind.SCALAR and type(args[at]) is float and p.dtype.name in _FLOAT_PARAMS:
            slots.append((_FLOAT_PARAMS[p.dtype.name], at, 4 if p.dtype.name == "float32" else 8, 0))
        else:
            return None         # a workspace, a narrow scalar
    return slots, maps


def _map_encoder(maps):
    """encode(index, ptr): the tensor map ``index`` for its array now at ``ptr`` (shape,
    strides and dtype are the guard's), from ``runtime/tensormap.py``'s cache where it has it."""
    from tilejit.runtime import tensormap
    from tilejit.runtime.arrays import KernelArray

    def encode(index: int, ptr: int) -> bytes:
        view, desc = maps[index]
        return tensormap.encode(KernelArray(ptr, tuple(view.shape), tuple(view.strides), view.dtype, view.device),
                                desc)
    return encode


def Front(python_launch, launcher, fast_paths, skipping):
    """What ``kernel[grid]`` returns once ``launcher`` exists for that grid (native_launch.c):
    a call runs ``launcher`` while ``fast_paths.generation`` is what it is now, ``skipping[0]``
    is 0 and no launch option but ``num_warps`` and ``stream`` is given; otherwise, or where the
    launcher's guard does not hold or the driver fails, it calls ``python_launch``."""
    return _module.Front(python_launch, launcher, fast_paths, skipping)


def launcher(kernel, params, grid, block_threads: int, args, kwargs: dict, num_warps, env, staleness,
             extra=(), views=None, functions=None):
    """A native launcher repeating this launch, or None where it cannot.

    ``kernel``: the ``LoadedKernel``; ``grid``: the CTA grid (3 ints); ``args``: the positional
    arguments as given (Nones included); ``env``: (os.environ's dict, the encoded switch names,
    their values now); ``staleness``: (the kernel's dependency readers, the values they return
    now, a module whose ``generation`` must stay what it is now, that generation): a value read
    that is not the same object ends the native launches (``Kernel._staleness``); ``extra``:
    the ints the launch geometry appends to the arguments; ``views``: the kernel arguments as
    the Python path packed them (where the kernel takes tensor maps)."""
    module = load(wait=False) if ENABLED else None
    functions = functions or driver_functions()
    if module is None or functions is None or env is None or staleness is None:
        return None
    mx, my, mz = kernel.max_grid
    if not (0 < grid[0] <= mx and 0 < grid[1] <= my and 0 < grid[2] <= mz and 0 < block_threads <= kernel.max_threads):
        return None
    dependent = bool(getattr(kernel, "dependent_launch", False))
    if dependent and not functions[1]:
        return None
    from tilejit.runtime.arrays import DeviceArray
    torch = sys.modules.get("torch")
    tensor_type = torch.Tensor if torch is not None else _NoTensor
    # (a CPU build of torch has no CUDA streams: its tensors never pass the device guard)
    raw_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None) or _no_stream
    guards = []
    for value in args:
        guard = _arg_guard(value, DeviceArray, tensor_type)
        if guard is None:
            return None
        guards.append(guard)
    packed = param_slots(params, args, guards, extra, views)
    if packed is None or any(type(k) is not str for k in kwargs):
        return None
    slots, maps = packed
    environ, keys, values = env
    spec = (tuple(guards), tuple(slots), tuple(grid), block_threads, kernel.shared_bytes, kernel.device,
            int(kernel.function), int(kernel.context), dependent, tuple(functions), tensor_type, DeviceArray,
            raw_stream, _error_raiser(kernel.name), kernel, num_warps, tuple(kwargs.items()), environ,
            tuple(keys), tuple(values)) + tuple(staleness) + (_map_encoder(maps),)
    try:
        return module.Launcher(spec)
    except (TypeError, ValueError, OverflowError):
        return None
