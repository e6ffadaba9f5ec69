"""Kernel fingerprints: a hash of everything a kernel's compiled code depends on, computed from
the Python function without tracing it, so an on-disk cache hit skips the whole compiler.

``kernel_fingerprint(fn)`` covers the bytecode (code, constants, names, nested code objects),
argument names, defaults and annotations, closure cells, and the values of the globals the
code names (``tj.func``s recursively by their own fingerprint). ``compiler_fingerprint()``
covers tilejit's own sources and the llvmlite and Python versions. ``cache_key`` combines them
with the launch specialisation into the on-disk cache key.
"""
from __future__ import annotations

import builtins
import enum
import functools
import hashlib
import os
import sys
import types

import numpy as np

from tilejit.dtypes import DType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT_DIR = os.path.dirname(_PACKAGE_DIR)
_SOURCE_DIRS = ("tilejit", "passes", "runtime")        # what `pip install -e` maps into tilejit


@functools.cache
def compiler_fingerprint() -> str:
    """Hash of tilejit's source files and the versions of Python, llvmlite, cuda-bindings and
    nvJitLink (once per process; ~1-3 ms)."""
    import llvmlite     # only its version module: the LLVM library is not loaded here
    h = hashlib.sha256()
    h.update(f"python {sys.version}\nllvmlite {llvmlite.__version__}\n{toolchain_versions()}\n".encode())
    for top in _SOURCE_DIRS:
        for directory, subdirs, names in os.walk(os.path.join(_ROOT_DIR, top)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")    # (prunes the walk, in order)
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(directory, name)
                h.update(os.path.relpath(path, _ROOT_DIR).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


_TOOLCHAIN = ("cuda-bindings", "nvidia-nvjitlink", "nvidia-nvjitlink-cu12", "nvidia-nvjitlink-cu13")


def toolchain_versions() -> str:
    """The installed cuda-bindings and nvJitLink versions (what assembles and loads the code),
    read from the names of their ``.dist-info`` folders on ``sys.path`` (the first one found wins,
    as in ``importlib.metadata``, whose import alone costs ~15 ms of a cache hit)."""
    wanted = {d.replace("-", "_"): d for d in _TOOLCHAIN}
    found: dict = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[:-len(".dist-info")].partition("-")
                key = dist.lower().replace("-", "_").replace(".", "_")
                if key in wanted:
                    found.setdefault(wanted[key], version)
    return "; ".join(f"{d} {found[d]}" for d in _TOOLCHAIN if d in found)


def kernel_fingerprint(pyfn) -> str:
    """Hash of everything ``pyfn``'s compiled code depends on (see the module docstring)."""
    h = hashlib.sha256()
    _Hasher(h).function(pyfn)
    return h.hexdigest()


def cache_key(fingerprint: str, specs, constexprs: dict, num_warps: int, target: str,
              driver_version: int, options: dict | None = None) -> str:
    """The on-disk cache key: kernel and compiler fingerprints, argument specialisation
    (``tilejit.specs`` records), constexpr values, ``num_warps``, target (``sm_90a``), driver
    version, the compile ``options`` (the compiler switches, ``tilejit.kernel.compile_switches``)
    and the module switches set away from their defaults (``tilejit.passes.switches.overrides``)."""
    from tilejit.passes import switches
    h = hashlib.sha256()
    _Hasher(h).value(("key-v2", fingerprint, compiler_fingerprint(), tuple(specs),
                      tuple(sorted(constexprs.items())), num_warps, target, driver_version,
                      tuple(sorted((options or {}).items())), switches.overrides()))
    return h.hexdigest()


_MISSING = object()


def dependency_readers(pyfn) -> list:
    """Zero-argument callables that read, now, each value the compiled code of ``pyfn`` may have
    folded in: the globals its code names, its closure cells, attribute chains from them
    (``Outer.Inner.GAIN``, ``cfg.inner.gain``) and, recursively, the same for the ``tj.func``s
    and plain functions it calls.  ``snapshot`` of what they return changes when any of those
    is rebound or mutated in place, which is how a ``Kernel`` notices that its compiled code is
    stale within one process."""
    readers: list = []
    _collect(pyfn, readers, set())
    return readers


_AS_THEMSELVES = frozenset({types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type, int, float,
                            complex, str, bytes, bool, type(None)})


def snapshot(value):
    """A comparable copy of ``value``: containers by content (so an in-place change shows), any
    other object as itself (compared by identity, then equality)."""
    if type(value) in _AS_THEMSELVES:         # a kernel's globals on every launch: no isinstance chain
        return value
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(snapshot(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, snapshot(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (type(value), frozenset(value))
    if isinstance(value, np.ndarray):
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    return value


def _collect(fn, readers: list, active: set) -> None:
    while not isinstance(fn, types.FunctionType) and hasattr(fn, "fn"):
        fn = fn.fn
    if not isinstance(fn, types.FunctionType) or id(fn) in active:
        return
    active.add(id(fn))
    names = sorted(_all_names(fn.__code__))
    g = fn.__globals__
    for name in names:
        if name in g:
            read = functools.partial(g.get, name, _MISSING)
            readers.append(read)
            _chain(g[name], read, names, readers, active, 0, set())
    for cell in fn.__closure__ or ():
        read = functools.partial(_cell_contents, cell)
        readers.append(read)
        _chain(read(), read, names, readers, active, 0, set())


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:                  # an empty cell
        return _MISSING


def _chain(value, read, names, readers: list, active: set, depth: int, seen: set) -> None:
    if _is_tilejit_func(value) or (isinstance(value, types.FunctionType)
                                   and not _is_tilejit_module(value.__module__)):
        _collect(value, readers, active)
        return
    if depth > _MAX_ATTRIBUTE_DEPTH or id(value) in seen or not _chainable(value):
        return
    seen.add(id(value))
    for name in names:
        try:
            attr = getattr(value, name, _MISSING)
        except Exception:
            continue
        if attr is _MISSING:
            continue
        sub = functools.partial(_read_attr, read, name)
        readers.append(sub)
        _chain(attr, sub, names, readers, active, depth + 1, seen)


def _read_attr(read, name):
    try:
        return getattr(read(), name, _MISSING)
    except Exception:
        return _MISSING


class _Hasher:
    """Feeds a canonical, process-independent byte encoding of values into ``h``."""

    def __init__(self, h):
        self.h = h
        self.active: set[int] = set()   # functions being hashed (recursive tj.func calls)

    def put(self, tag: str, text: str = "") -> None:
        self.h.update(f"{tag}:{len(text)}:{text};".encode())

    def function(self, fn) -> None:
        while not isinstance(fn, types.FunctionType) and hasattr(fn, "fn"):
            fn = fn.fn              # a tj.func or kernel object wraps the Python function
        if id(fn) in self.active:
            self.put("recursive", fn.__code__.co_name)
            return
        self.active.add(id(fn))
        code = fn.__code__
        self.code(code)
        self.value(fn.__defaults__)
        self.value(tuple(sorted((fn.__kwdefaults__ or {}).items())))
        self.value(tuple(sorted((k, _annotation(v)) for k, v in fn.__annotations__.items())))
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:          # an empty cell
                self.put("empty-cell")
        self.referenced_globals(code, fn.__globals__)
        self.active.discard(id(fn))

    def code(self, code: types.CodeType) -> None:
        self.put("code", code.co_name)
        self.h.update(code.co_code)
        self.value((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                    code.co_flags, code.co_names, code.co_varnames, code.co_freevars))
        for const in code.co_consts:
            self.code(const) if isinstance(const, types.CodeType) else self.value(const)

    def referenced_globals(self, code: types.CodeType, globals_: dict) -> None:
        names = sorted(_all_names(code))
        for name in names:
            if name in globals_:
                self.put("global", name)
                self.value(globals_[name], attribute_names=names)
            elif hasattr(builtins, name):
                self.put("builtin", name)

    def value(self, v, attribute_names=()) -> None:
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            self.put(type(v).__name__, repr(v))
        elif isinstance(v, (tuple, list, frozenset, set)):
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            self.put(type(v).__name__, str(len(items)))
            for item in items:
                self.value(item)
        elif isinstance(v, dict):
            self.value(tuple(sorted(v.items(), key=lambda kv: repr(kv[0]))))
        elif isinstance(v, DType):
            self.put("dtype", v.name)
        elif isinstance(v, (np.generic, np.dtype)):
            self.put("numpy", f"{v.dtype if isinstance(v, np.generic) else ''}{v!r}")
        elif isinstance(v, np.ndarray):
            self.put("ndarray", f"{v.dtype}{v.shape}")
            self.h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, enum.Enum):
            self.put("enum", f"{type(v).__qualname__}.{v.name}")
            self.value(v.value if isinstance(v.value, (bool, int, float, str, tuple)) else None)
        elif isinstance(v, types.ModuleType):
            self.module(v, attribute_names)
        elif hasattr(v, "__tilejit_builtin__"):
            self.put("tj-builtin", v.__tilejit_builtin__)
        elif _is_tilejit_func(v):
            self.put("tj.func")
            self.function(v)
        elif isinstance(v, types.FunctionType):
            if _is_tilejit_module(v.__module__):    # tilejit's own: in compiler_fingerprint
                self.put("tilejit", f"{v.__module__}.{v.__qualname__}")
            else:
                self.put("function", v.__qualname__)
                self.function(v)
        elif isinstance(v, types.BuiltinFunctionType):
            self.put("named", f"{getattr(v, '__module__', '')}.{v.__qualname__}")
        elif isinstance(v, type):
            self.put("named", f"{getattr(v, '__module__', '')}.{v.__qualname__}")
            self.attributes(v, attribute_names)
        else:
            self.other(v)
            self.attributes(v, attribute_names)

    def module(self, module: types.ModuleType, attribute_names) -> None:
        """A module by name, plus the simple values of attributes the code may read from it
        (``config.BLOCK`` changing must change the key)."""
        self.put("module", module.__name__)
        if not _is_tilejit_module(module.__name__):
            self.attributes(module, attribute_names)

    def attributes(self, owner, attribute_names, depth: int = 0, seen=None) -> None:
        """The values of ``owner``'s attributes that the code may read (``config.BLOCK``,
        ``Config.GAIN``, ``obj.scale``), and through attribute chains (``pkg.sub.SCALE``,
        ``Outer.Inner.GAIN``, ``cfg.inner.gain``, ``Mode.FAST.value``): the frontend folds them
        into the kernel."""
        seen = set() if seen is None else seen
        if id(owner) in seen or depth > _MAX_ATTRIBUTE_DEPTH:
            return
        seen.add(id(owner))
        for name in attribute_names:
            try:
                attr = getattr(owner, name, None)
            except Exception:           # a property that fails: the frontend would fail too
                continue
            if _is_tilejit_func(attr) or isinstance(attr, (bool, int, float, str, tuple, DType, enum.Enum,
                                                           list, dict, np.generic)):
                self.put("attr", name)
                self.value(attr)
            elif _chainable(attr):
                self.put("attr-of", name)
                self.attributes(attr, attribute_names, depth + 1, seen)

    def other(self, v) -> None:
        """Any other object: its repr when stable across processes, else only its type."""
        text = repr(v)
        if " at 0x" in text:
            text = ""
        self.put("object", f"{type(v).__module__}.{type(v).__qualname__}:{text}")


_MAX_ATTRIBUTE_DEPTH = 6


def _chainable(v) -> bool:
    """An object whose attributes a kernel may read through (a user's module, class or
    instance), not tilejit's own modules nor functions."""
    if isinstance(v, types.ModuleType):
        return not _is_tilejit_module(v.__name__) and v.__name__.split(".")[0] not in ("numpy", "math", "builtins")
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return False
    if isinstance(v, type):
        return not _is_tilejit_module(getattr(v, "__module__", ""))
    return hasattr(v, "__dict__") and not _is_tilejit_module(type(v).__module__)


def _is_tilejit_func(v) -> bool:
    return getattr(v, "__tilejit_func__", False) is True


def _is_tilejit_module(name: str | None) -> bool:
    return bool(name) and (name == "tilejit" or name.startswith("tilejit."))


def _annotation(a) -> str:
    if isinstance(a, str):              # `from __future__ import annotations`
        return a
    return f"{getattr(a, '__module__', '')}.{getattr(a, '__qualname__', repr(a))}"


def _all_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _all_names(const)
    return names
