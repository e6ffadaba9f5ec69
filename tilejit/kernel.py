"""``@tj.kernel`` and the launch path: argument binding, specialisation, the in-memory compile
cache, grid checks and the hand-off to a backend (``tilejit.backends``).

    kernel[grid](*args, num_warps=None, num_stages=None, stream=None, **constexprs)

``num_warps``: None lets the compiler pick (``passes.warps.choose_num_warps``: 4 with a dot, else
about 64 bytes of the largest loaded tile per thread, 2 to 32 warps); ``inspect()`` shows it.

``num_stages``: the ring depth of loops that do not give ``tj.range(stages=)`` (None: the
compiler's per-target default, ``passes.mma_tiling.DEFAULT_STAGES``; 1 turns pipelining off).
``fast_math=True``: sin, cos and float32 exp use the GPU's approximate instructions (sin/cos:
absolute error ~5e-7, so tiny arguments lose their digits; exp: ~3 ulp) instead of the accurate
default; 16-bit results take them anyway (below their rounding); the CPU backends stay exact.
``debug=True`` (or ``TILEJIT_DEBUG=1``): ``tj.device_assert`` checks are compiled in and a failed
one raises ``DeviceAssertError`` after the launch (on the GPU the launch then synchronises).

Every launch mistake is a ``LaunchError`` naming the kernel, raised before anything runs.
"""
from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
import threading
import warnings
import inspect as pyinspect
from dataclasses import dataclass, field

import numpy as np

from tilejit import backends, dtypes, fingerprint, ir
from tilejit.passes import switches as module_switches
from tilejit.errors import CompileError, LaunchError, PerformanceWarning, TilejitError, for_user
from tilejit.language import constexpr
from tilejit.specs import FLOAT32_MAX as _FLOAT32_MAX
from tilejit.specs import FLOAT32_MIN as _FLOAT32_MIN
from tilejit.specs import ArraySpec, NoneSpec, ScalarSpec, array_spec, array_spec_fields, contiguous_strides, positive_float

LAUNCH_OPTIONS = ("num_warps", "num_stages", "fast_math", "debug", "stream")   # keywords of kernel[grid](...)
_GRID_LIMITS = (2**31 - 1, 65535, 65535)        # CUDA's gridDim.x, .y, .z maxima
_UNBOUND = object()
_STAGES = ("simt_ir", "llvm_ir", "ptx", "cubin", "sass", "registers", "spills", "shared_bytes")


def compile_switches() -> tuple[tuple[str, bool], ...]:
    """The compiler switches from the environment, read here at the API edge on every compile
    and nowhere else: ``(option name, value)`` pairs that become ``passes.pipeline.Options``
    fields and part of both compile caches' keys.  ``TILEJIT_WGMMA=0`` keeps GEMMs on mma.sync,
    ``TILEJIT_TMA=0`` fills wgmma rings with cp.async instead of TMA copies, ``TILEJIT_WS=1``
    gives every TMA loop's copies to a producer warpgroup (``=0``: none; unset: where measured faster),
    ``TILEJIT_PACK=0`` runs one program per CTA, ``TILEJIT_CLUSTER=0`` never splits a long row over a
    thread-block cluster, ``TILEJIT_PERSIST=0`` never loops a CTA over
    programs (``=always``: wherever it can, not only where it was measured faster),
    ``TILEJIT_TMA_STORE=1`` copies every epilogue it can out by TMA (``=0``: none; unset: where
    measured faster)."""
    persist = os.environ.get("TILEJIT_PERSIST", "1").strip().lower()
    return (("wgmma", os.environ.get("TILEJIT_WGMMA", "1").strip() != "0"),
            ("tma", os.environ.get("TILEJIT_TMA", "1").strip() != "0"),
            ("warp_specialize", {"1": True, "0": False}.get(os.environ.get("TILEJIT_WS", "").strip(), "auto")),
            ("pack", os.environ.get("TILEJIT_PACK", "1").strip() != "0"),
            ("cluster", os.environ.get("TILEJIT_CLUSTER", "1").strip() != "0"),
            ("persist", "always" if persist == "always" else persist != "0"),
            ("tma_store", {"1": True, "0": False}.get(os.environ.get("TILEJIT_TMA_STORE", "").strip(), "auto")))


# every environment variable a compile reads: the re-launch fast path keys on all of them
SWITCH_ENV = ("TILEJIT_BACKEND", "TILEJIT_WGMMA", "TILEJIT_TMA", "TILEJIT_WS", "TILEJIT_PACK", "TILEJIT_CLUSTER",
              "TILEJIT_PERSIST", "TILEJIT_TMA_STORE", "TILEJIT_DEBUG")


def _environ_reader(names: tuple):
    """A function returning the values of ``names`` in ``os.environ`` as a tuple, read from its
    underlying dict with pre-encoded keys where CPython has one (``os.environ.get`` encodes the
    key on every call: about 0.5 us each on the launch path); ``os.environ.get`` otherwise."""
    env = os.environ
    data, encode = getattr(env, "_data", None), getattr(env, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        keys = tuple(encode(n) for n in names)
        return lambda: tuple(map(env._data.get, keys))
    return lambda: tuple(env.get(n) for n in names)


def _environ_source(names: tuple):
    """(os.environ's underlying dict, ``names`` encoded as its keys), what the native re-launch
    path compares the switches' values in; None where CPython keeps no such dict."""
    env = os.environ
    data, encode = getattr(env, "_data", None), getattr(env, "encodekey", None)
    return (data, tuple(encode(n) for n in names)) if isinstance(data, dict) and encode is not None else None


_switch_env = _environ_reader(SWITCH_ENV)
_SWITCH_SOURCE = _environ_source(SWITCH_ENV)
NATIVE_TRIES = 16       # native launchers made per launch function (alternating specialisations)
_DEBUG_AT = SWITCH_ENV.index("TILEJIT_DEBUG")


_tracing = threading.local()
_SKIPPING = [0]         # launches_skipped blocks open on any thread: the launch path reads only this


class _FastPaths(dict):
    """A kernel's re-launch fast paths; ``clear()`` also makes the native launchers made from
    them stale (their launch function compares ``generation``)."""
    generation = 0

    def clear(self) -> None:
        self.generation += 1
        super().clear()


@contextlib.contextmanager
def launches_skipped():
    """Inside it, ``kernel[grid](...)`` returns at once and runs nothing, on this thread: how
    ``tilejit.torch.op`` traces a function that launches kernels with PyTorch's fake tensors
    (shapes and dtypes, no data) to learn the shapes of its outputs."""
    before = getattr(_tracing, "skip", False)
    _tracing.skip = True
    _SKIPPING[0] += 1
    try:
        yield
    finally:
        _tracing.skip = before
        _SKIPPING[0] -= 1


def launches_are_skipped() -> bool:
    """True inside ``launches_skipped`` on this thread."""
    return getattr(_tracing, "skip", False)


def _is_on(value) -> bool:
    """An environment switch's raw value (str, or bytes from ``os.environ``'s dict) is "1"."""
    return value is not None and value.strip() in ("1", b"1")


def verify_switch() -> bool:
    """``TILEJIT_DEBUG=1``: verify the IR after every pass (it changes no code, so no key has it).
    A launch reads the same switch from its one environment read and compiles as ``debug=True``."""
    return _is_on(_switch_env()[_DEBUG_AT])


def kernel(fn=None):
    """Decorator turning a Python function into a launchable ``Kernel``.
    Example: ``@tj.kernel`` above ``def add(x, y, out, BLOCK: tj.constexpr): ...``."""
    if fn is None:
        return kernel
    return Kernel(fn)


def _is_constexpr(annotation) -> bool:
    return annotation is constexpr or (isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr")


@dataclass
class Inspection:
    """The artifacts of every stage built so far for one specialisation (None: not built)."""
    tile_ir: str
    backend: str | None = None
    simt_ir: str | None = None
    llvm_ir: str | None = None
    ptx: str | None = None
    cubin: bytes | None = None
    sass: str | None = None
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    num_warps: int | None = None         # the launch's warps (the compiler's choice when none was given)
    programs_per_cta: int | None = None  # programs along grid axis 0 that share one CTA (pack_programs)
    persistent: bool | None = None       # each CTA loops over programs, the next one's rows copied ahead (persist_programs)
    persistent_tiles: bool | None = None  # each CTA loops over the grid's programs, its producer warps a
    #                                       tile ahead (a persistent warp-specialised GEMM)
    stream_k: bool | None = None         # its last waves of tiles shared out by k-iterations (stream-K)
    copy_engines: tuple | None = None    # how pipelined loops fill their rings: "tma" and/or "cp.async"
    producer_warps: int | None = None    # warps that only issue TMA copies (a warp-specialised loop)
    cluster_ctas: int | None = None      # CTAs that share each program's row, as a cluster (cluster_rows)
    paired_ctas: bool | None = None      # neighbouring programs run as 2-CTA clusters that share TMA boxes
    #                                      by multicast (passes/multicast.py)
    min_ctas_per_sm: int | None = None   # the occupancy hint ptxas was given (0: none; the most CTAs
    #                                      per SM that assembled without spills, where it wished)

    def __repr__(self) -> str:
        """One line: the backend and the figures, with which stages were built (the texts are
        long: read them from the fields)."""
        figures = [f"{name}={value!r}" for name in ("num_warps", "registers", "spills", "shared_bytes", "copy_engines",
                                                    "producer_warps", "programs_per_cta", "cluster_ctas", "paired_ctas")
                   if (value := getattr(self, name)) is True or value not in (None, (), 0, 1)
                   or name in ("num_warps", "registers")]
        built = [name for name in ("tile_ir", "simt_ir", "llvm_ir", "ptx", "cubin", "sass") if getattr(self, name)]
        return f"Inspection(backend={self.backend!r}, {', '.join(figures)}, stages={'/'.join(built)})"


@dataclass
class _Compiled:
    backend: object
    artifact: object
    tile_text: str | None = field(repr=False)     # printed before the backend ran; None: from disk


class Kernel:
    """A ``@tj.kernel`` function: launch it with ``kernel[grid](*args, **constexprs)``.
    Example: ``add[(tj.cdiv(n, 1024),)](x, y, out, BLOCK=1024)``; ``add.inspect(x, y, out, BLOCK=1024).ptx``."""

    def __init__(self, fn):
        self.fn, self.name = fn, fn.__name__
        self.signature = pyinspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        for p in self.params:
            code = fn.__code__
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                raise CompileError(f"kernel parameters must be plain named parameters, not '{p}'",
                                   ir.Loc(code.co_filename, code.co_firstlineno, func=self.name), self.name)
            if p.name in LAUNCH_OPTIONS:
                raise CompileError(f"a kernel parameter cannot be named '{p.name}': "
                                   f"kernel[grid](..., {p.name}=...) is the launch option; rename it",
                                   ir.Loc(code.co_filename, code.co_firstlineno, func=self.name), self.name)
        self.constexpr_names = frozenset(p.name for p in self.params if _is_constexpr(p.annotation))
        self.runtime_names = [p.name for p in self.params if p.name not in self.constexpr_names]
        self._cache: dict[tuple, _Compiled] = {}
        # re-launch fast path: (num_warps, backend env, constexpr kwargs, arg keys) -> launcher
        self._fast: dict[tuple, object] = _FastPaths()
        self._launchers: dict = {}                      # int / int-tuple grid -> its launch function
        leading = [p.name for p in self.params[:len(self.runtime_names)]]
        self._fast_arity = len(leading) if leading == self.runtime_names else -1
        # what the code may fold in (globals, closure cells, attribute chains, the same for the
        # tj.funcs it calls): both in-memory caches are dropped when one of them is rebound or
        # mutated in place (the disk key hashes them anyway)
        self._readers = fingerprint.dependency_readers(fn)
        self._globals_seen = self._read_globals()
        self._switch_generation = module_switches.generation

    def _read_globals(self) -> list:
        return [fingerprint.snapshot(read()) for read in self._readers]

    def _drop_stale(self) -> None:
        """Forget compiled code if anything it folded in was rebound or changed since it was
        compiled (on every launch: read each dependency, one list comparison, identity first)."""
        now = self._read_globals()
        if now != self._globals_seen or self._switch_generation != module_switches.generation:
            self._cache.clear()
            self._fast.clear()
            self._readers = fingerprint.dependency_readers(self.fn)     # the objects may be others now
            self._globals_seen = self._read_globals()
            self._switch_generation = module_switches.generation

    def _staleness(self):
        """What a native launcher checks in place of ``_drop_stale``: (the readers, the values
        they return now, the switches module, its generation); None where a value is a container
        (``_drop_stale`` compares its contents, a native launcher could only compare identities)."""
        values = tuple(read() for read in self._readers)
        if any(fingerprint.snapshot(v) is not v for v in values):
            return None
        return tuple(self._readers), values, module_switches, module_switches.generation

    def __repr__(self) -> str:
        return f"<tj.kernel {self.name}{self.signature}>"

    def __call__(self, *args, **kwargs):
        err = LaunchError(f"launch kernel '{self.name}' with {self.name}[grid](...); "
                          f"calling it directly is not supported")
        raise at_caller(err, self.name, sys._getframe(1)) from None

    def __getitem__(self, grid):
        kind = type(grid)           # kernel[(n,)] in a loop: one launcher per grid of ints, made once
        if kind is int:
            cacheable = True
        elif kind is tuple:         # (1.0,) and (True,) equal (1,): only ints may find its launcher
            n = len(grid)
            cacheable = (n != 0 and type(grid[0]) is int and (n == 1 or type(grid[1]) is int and (
                n == 2 or type(grid[2]) is int and (n == 3 or all(type(g) is int for g in grid)))))
        else:
            cacheable = False
        fast_grid = grid
        if cacheable:
            launch = self._launchers.get(grid)
            if launch is not None:
                return launch
            try:
                fast_grid = normalise_grid(grid)        # (n, 1, 1) once, not at every launch
            except LaunchError:
                pass                                    # reported by the launch, as for any grid

        # this grid's native launcher, the tries to make one, this launch function, the grid
        native = [None, 0, None, grid] if cacheable else None

        def launch(*args, num_warps: int | None = None, num_stages: int | None = None, fast_math: bool = False,
                   debug: bool = False, stream=None, **kwargs):
            if _SKIPPING[0] and getattr(_tracing, "skip", False):
                return
            try:
                n = native[0] if native is not None else None
                if (n is not None and num_stages is None and fast_math is False and debug is False
                        and n[0] == self._fast.generation and n[1](args, kwargs, num_warps, stream)):
                    return      # runtime/native.py: its guard (globals read included) held; launched
                if num_stages is not None or fast_math is not False or debug is not False:
                    check_num_stages(num_stages)
                    for name, flag in (("fast_math", fast_math), ("debug", debug)):
                        if not isinstance(flag, bool):
                            raise LaunchError(f"{name} must be True or False, got {flag!r}")
                env = _switch_env()             # read once: the debug switch and the fast path's key
                if env[_DEBUG_AT] is not None and _is_on(env[_DEBUG_AT]):
                    debug = True
                if not self._launch_fast(fast_grid, args, kwargs, num_warps, stream, num_stages, fast_math, debug, env,
                                         native):
                    self._launch(grid, args, kwargs, num_warps, stream, num_stages, fast_math, debug)
            except TilejitError as err:
                raise at_caller(err, self.name, sys._getframe(1)) from None
        if cacheable:
            native[2] = launch
            if len(self._launchers) >= 256:
                self._launchers.clear()
            self._launchers[grid] = launch
        return launch

    # --- binding and specialisation ------------------------------------------------------------
    def bind(self, args: tuple, kwargs: dict) -> dict:
        """Map every parameter name to its value (defaults applied); LaunchError on a mismatch."""
        positional = [p for p in self.params if p.kind is not p.KEYWORD_ONLY]
        if len(args) > len(positional):
            raise LaunchError(f"takes {len(positional)} positional arguments "
                              f"({', '.join(p.name for p in positional)}) but {len(args)} were given")
        bound = {p.name: a for p, a in zip(positional, args)}
        names = [p.name for p in self.params]
        for key, value in kwargs.items():
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise LaunchError(f"unexpected argument '{key}'{hint}: the parameters are {', '.join(names)}")
            if key in bound:
                raise LaunchError(f"argument '{key}' was given twice")
            bound[key] = value
        for p in self.params:
            if p.name not in bound:
                if p.default is p.empty:
                    kind = "constexpr " if p.name in self.constexpr_names else ""
                    raise LaunchError(f"missing {kind}argument '{p.name}'")
                bound[p.name] = p.default
        return {name: bound[name] for name in names}

    def specialise(self, bound: dict) -> tuple[tuple, dict, list]:
        """(specs of the runtime arguments, constexpr values, the runtime values to launch with)."""
        specs, values, consts = [], [], {}
        for name, value in bound.items():
            if name in self.constexpr_names:
                consts[name] = _constexpr_value(name, value)
                continue
            spec, launch_value = classify_argument(name, value)
            specs.append(spec)
            if not isinstance(spec, NoneSpec):           # None is compiled in, not passed
                values.append(launch_value)
        return tuple(specs), consts, values

    # --- compiling -----------------------------------------------------------------------------
    def compile(self, specs: tuple, consts: dict, num_warps: int | None, backend_name: str,
                num_stages: int | None = None, fast_math: bool = False, debug: bool = False) -> _Compiled:
        """The artifact for one specialisation on one backend, compiled at most once per process
        (and, for backends with an on-disk cache, looked up there before the frontend runs)."""
        backend, key, switches = self._compile_keys(specs, consts, num_warps, backend_name, num_stages,
                                                    fast_math, debug)
        entry = self._cache.get(key)
        if entry is not None:
            return entry
        disk_key = self._disk_key(backend, specs, consts, num_warps, switches)
        artifact = backend.lookup(disk_key) if disk_key is not None else None
        text = None
        if artifact is None:
            tile_fn, options = self._compile_job(specs, consts, num_warps, backend, disk_key, switches)
            text = ir.print_function(tile_fn)
            try:
                artifact = backend.compile(tile_fn, options)
            except TilejitError as err:
                raise err.with_kernel(self.name)
        entry = self._cache[key] = _Compiled(backend, artifact, text)
        spills = getattr(artifact, "spills", None)
        if spills:
            warps = artifact_warps(artifact)
            fix = "more warps or smaller tiles" if warps and warps < 32 else \
                "smaller tiles (e.g. a loop over the row in chunks): 32 warps is the most a CTA has"
            warnings.warn(f"kernel '{self.name}' spills {spills} bytes per thread to local memory "
                          f"(num_warps={warps}): use {fix}", PerformanceWarning, stacklevel=2)
        for loc, why in getattr(artifact, "scalar_dots", ()):
            warnings.warn(f"kernel '{self.name}', line {loc.line} of {os.path.basename(loc.file)}: this tj.dot runs on "
                          f"CUDA cores (FMA), not tensor cores: {why}", PerformanceWarning, stacklevel=2)
        return entry

    def _compile_keys(self, specs, consts, num_warps, backend_name, num_stages, fast_math, debug):
        """(backend, in-memory key, switches) of one compile."""
        backend = backends.get(backend_name)
        self._drop_stale()
        switches = compile_switches() + ((("num_stages", num_stages),) if num_stages is not None else ()) \
            + ((("fast_math", True),) if fast_math else ()) + ((("debug", True),) if debug else ())
        key = (specs, tuple((k, type(v).__name__, v) for k, v in consts.items()), num_warps,
               backend_name, getattr(backend, "target", None), switches, module_switches.overrides())
        return backend, key, switches

    def _disk_key(self, backend, specs, consts, num_warps, switches) -> str | None:
        """The on-disk cache's key of one compile (None: the backend keeps no disk cache)."""
        return backend.cache_key(self.fn, specs, consts, num_warps, dict(switches)) \
            if hasattr(backend, "cache_key") else None

    def _compile_job(self, specs, consts, num_warps, backend, disk_key, switches):
        """(tile IR, backend options): what ``backend.compile`` needs, the frontend run here."""
        tile_fn = self.tile_ir(specs, consts)
        if num_warps is None:             # the compiler's choice (the key says "chosen": None)
            from tilejit.passes.cluster_rows import supports
            from tilejit.passes.warps import choose_num_warps
            num_warps = choose_num_warps(tile_fn, dict(switches)["cluster"]
                                         and supports(getattr(backend, "target", None) or ""))
        # the switches as Options fields; the rest travels in the IR
        return tile_fn, {"num_warps": num_warps, "cache_key": disk_key, "verify": verify_switch(), **dict(switches)}

    def uncached_jobs(self, requests, backend_name: str) -> list:
        """For ``requests`` of (specs, consts, num_warps, num_stages, fast_math), the (tile IR,
        options) of those neither in memory nor in the on-disk cache: work another process can
        do (``backend.compile`` writes its result to the disk cache, where ``compile`` finds it).
        Empty for backends without a disk cache."""
        jobs = []
        for specs, consts, num_warps, num_stages, fast_math in requests:
            backend, key, switches = self._compile_keys(specs, consts, num_warps, backend_name,
                                                        num_stages, fast_math, False)
            if key in self._cache:
                continue
            disk_key = self._disk_key(backend, specs, consts, num_warps, switches)
            if disk_key is None or backend.lookup(disk_key) is not None:
                continue
            try:
                jobs.append(self._compile_job(specs, consts, num_warps, backend, disk_key, switches))
            except TilejitError:          # the frontend refuses it: ``compile`` reports that itself
                continue
        return jobs

    def tile_ir(self, specs, consts: dict) -> ir.Function:
        """Run the frontend: the tile IR of this kernel for one specialisation."""
        from tilejit.frontend import compile_tile_ir
        return compile_tile_ir(self.fn, list(specs), dict(consts), name=self.name)

    def _launch(self, grid, args, kwargs, num_warps, stream, num_stages=None, fast_math=False, debug=False) -> None:
        bound = self.bind(args, kwargs)
        specs, consts, values = self.specialise(bound)
        grid3 = normalise_grid(grid(dict(bound)) if callable(grid) else grid)
        check_num_warps(num_warps)
        entry = self.compile(specs, consts, num_warps, backends.selected(), num_stages, fast_math, debug)
        self._check_outputs(entry.artifact, values, specs)
        entry.backend.launch(entry.artifact, grid3, values, stream)
        make_fast = getattr(entry.backend, "fast_launcher", None)
        fast = self._fast_key(args, kwargs, num_warps, num_stages, fast_math, debug) if make_fast else None
        if fast is not None:
            launcher = make_fast(entry.artifact)
            if launcher is not None:
                try:
                    self._fast[fast[0]] = launcher
                except TypeError:                   # an unhashable constexpr value: no fast path
                    pass

    def _check_outputs(self, artifact, values: list, specs: tuple) -> None:
        """Refuse, before anything runs on any backend, a launch whose output is a read-only
        NumPy array (no other output may have been written by then)."""
        names = [n for n, spec in zip(self.runtime_names, specs) if not isinstance(spec, NoneSpec)]
        for i in getattr(artifact, "writes", ()):
            v = values[i] if i < len(values) else None
            if isinstance(v, np.ndarray) and not v.flags.writeable:
                raise LaunchError(f"argument '{names[i]}' is a read-only NumPy array, "
                                  "but the kernel stores to it", kernel=self.name)

    # --- the re-launch fast path ---------------------------------------------------------------
    def _fast_key(self, args, kwargs, num_warps, num_stages=None, fast_math=False, debug=False, env=None):
        """(key, views) when the runtime arguments are exactly the positional ones and each is a
        device array or a Python int/float; None sends the launch down the full path. The key
        holds everything the specialisation depends on, computed by the same rules (it may be
        unhashable: a list constexpr; the lookup then fails and the launch takes the full path)."""
        if len(args) != self._fast_arity:
            return None
        parts, views = [], []
        for v in args:
            t = type(v)
            if t is int:
                parts.append(_INT32_MIN <= v < _INT32_LIMIT)
            elif t is float:
                parts.append("f+" if _FLOAT32_MIN <= v <= _FLOAT32_MAX else "f")   # ScalarSpec.positive
            elif t is bool:
                parts.append("b")
            elif v is None:
                parts.append(None)                        # compiled in: not a kernel parameter
                continue
            else:
                view = _fast_device_view(v)
                if view is None:
                    if t not in _NUMPY_SCALARS:           # a NumPy scalar's type is its dtype
                        if not _is_numpy_scalar(t):
                            return None
                    parts.append((t, _FLOAT32_MIN <= v <= _FLOAT32_MAX))
                    views.append(v)
                    continue
                v = view
                parts.append((v.device, _spec_key(v.dtype, v.shape, v.strides, v.ptr)))
            views.append(v)
        consts = tuple([(k, type(c), c) for k, c in kwargs.items()]) if kwargs else ()     # 1024.0 is not 1024
        return (num_warps, num_stages, fast_math, debug, env or _switch_env(), consts, tuple(parts)), views

    def _launch_fast(self, grid, args, kwargs, num_warps, stream, num_stages=None, fast_math=False, debug=False,
                     env=None, native=None) -> bool:
        """Launch a specialisation seen before with minimal Python work; False if not possible.
        ``native``: the launch function's [native launcher, tries], filled after a launch whose
        launcher can make one (the next launches with the same specialisation take it)."""
        if not self._fast:
            return False
        self._drop_stale()
        fast = self._fast_key(args, kwargs, num_warps, num_stages, fast_math, debug, env)
        if fast is None:
            return False
        try:
            launcher = self._fast.get(fast[0])
        except TypeError:                           # an unhashable constexpr value
            return False
        if launcher is None:
            return False
        if callable(grid):
            bound = dict(zip(self.runtime_names, args))
            bound.update((p.name, p.default) for p in self.params if p.name not in bound and p.default is not p.empty)
            bound.update(kwargs)
            grid = grid(bound)
        kind = type(grid)
        if kind is int:
            grid = (grid, 1, 1)
        elif kind is tuple and len(grid) == 1:
            grid = (grid[0], 1, 1)
        elif kind is tuple and len(grid) == 2:
            grid = (grid[0], grid[1], 1)
        elif kind is not tuple or len(grid) != 3:
            grid = normalise_grid(grid)
        if not (type(grid[0]) is int and type(grid[1]) is int and type(grid[2]) is int
                and grid[0] > 0 and grid[1] > 0 and grid[2] > 0):
            grid = normalise_grid(grid)
        launcher(grid, fast[1], stream)
        make = getattr(launcher, "native", None)
        if (make is not None and native is not None and native[1] < NATIVE_TRIES and num_stages is None
                and fast_math is False and debug is False):
            made = make(grid, args, fast[1], kwargs, num_warps,
                        None if _SWITCH_SOURCE is None else _SWITCH_SOURCE + (env or _switch_env(),),
                        self._staleness())
            native[0] = (self._fast.generation, made) if made is not None else None
            from tilejit.runtime import native as native_module
            native[1] += made is not None or native_module.settled()     # not while it is being built
            current = self._launchers.get(native[3])
            if made is not None and (current is native[2] or getattr(current, "python", None) is native[2]):
                # kernel[grid] now returns the C front: the launcher with no Python in between
                self._launchers[native[3]] = native_module.Front(native[2], made, self._fast, _SKIPPING)
        return True

    # --- inspection ----------------------------------------------------------------------------
    def inspect(self, *args, num_warps: int | None = None, **kwargs) -> Inspection:
        """Compile for these arguments (nothing runs) and return every stage's artifact."""
        try:
            specs, consts, _ = self.specialise(self.bind(args, kwargs))
            check_num_warps(num_warps)
            return self.inspect_specs(specs, consts, num_warps)
        except TilejitError as err:
            raise at_caller(err, self.name, sys._getframe(1)) from None

    def inspect_specs(self, specs, consts: dict, num_warps: int | None = None, backend: str | None = None) -> Inspection:
        """Like ``inspect`` from specs and constexprs. Without ``backend`` the richest backend
        that compiles here is used (cuda, then emulate); the tile IR is always there."""
        check_num_warps(num_warps)
        candidates = [backend] if backend else ["cuda", "emulate"]
        for name in candidates:
            try:
                entry = self.compile(tuple(specs), consts, num_warps, name)
            except CompileError:
                raise
            except TilejitError:          # not built, or needs a device this machine lacks
                if backend:
                    raise
                continue
            found = {s: getattr(entry.artifact, s, None) for s in _STAGES}
            found["num_warps"] = artifact_warps(entry.artifact)
            found["programs_per_cta"] = getattr(entry.artifact, "programs_per_cta", None)
            found["persistent"] = getattr(entry.artifact, "persistent", None)
            found["persistent_tiles"] = getattr(entry.artifact, "persistent_tiles", None)
            found["stream_k"] = bool(getattr(entry.artifact, "stream_k", 0))
            found["copy_engines"] = getattr(entry.artifact, "copy_engines", None)
            found["producer_warps"] = getattr(entry.artifact, "producer_warps", None)
            found["cluster_ctas"] = getattr(entry.artifact, "cluster_ctas", None)
            found["paired_ctas"] = getattr(entry.artifact, "paired_ctas", None)
            if found["ptx"]:
                hint = re.search(r"^\.minnctapersm (\d+)", found["ptx"], re.M)
                found["min_ctas_per_sm"] = int(hint.group(1)) if hint else 0
            if hasattr(entry.artifact, "registers_per_thread"):    # never a silent 0 or None on a GPU
                found["registers"] = entry.artifact.registers_per_thread()
            text = entry.tile_text or ir.print_function(self.tile_ir(specs, consts))
            return Inspection(text, name, **found)
        return Inspection(ir.print_function(self.tile_ir(specs, consts)))


# ------------------------------------------------------------------------------ argument checks
def at_caller(err: TilejitError, kernel_name: str, frame) -> TilejitError:
    """``err`` ready to raise for the user: named after the kernel and, when it has no kernel
    line of its own (a launch mistake), pointing at the user's launch call in ``frame``."""
    err.with_kernel(kernel_name)
    if err.loc is None:
        code = frame.f_code
        positions = list(code.co_positions())
        line, end_line, col, end_col = positions[frame.f_lasti // 2] if frame.f_lasti // 2 < len(positions) \
            else (frame.f_lineno, None, 0, None)
        err.loc = ir.Loc(code.co_filename, line or frame.f_lineno, col or 0,
                         end_col if end_line == line else None, code.co_name)
        err.args = (err._render(),)
    return for_user(err)


def _constexpr_value(name: str, value):
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str, dtypes.DType, tuple)):
        try:
            hash(value)
            return value
        except TypeError:
            pass
    raise LaunchError(f"constexpr parameter '{name}' needs a compile-time value "
                      f"(int, float, bool, str, dtype or tuple), got {type(value).__name__}")


def classify_argument(name: str, value):
    """(ArraySpec, ScalarSpec or NoneSpec, value to hand to the backend) for one runtime argument."""
    if value is None:
        return NoneSpec(), None
    if isinstance(value, np.ndarray):
        host = _array_spec(name, value.dtype, value.shape, value.strides, value.__array_interface__["data"][0])
        # the cuda backend runs on a contiguous, freshly allocated (aligned) copy, the CPU
        # backends on the array itself: assume only what holds for both
        copy = array_spec(host.dtype, value.shape, contiguous_strides(value.shape), 0)
        return ArraySpec(host.dtype, host.rank, host.unit_inner_stride and copy.unit_inner_stride,
                         host.aligned16 and copy.aligned16, host.large or copy.large, host.tma and copy.tma), value
    torch = sys.modules.get("torch")            # a tensor implies torch is imported
    try:
        # a torch tensor is read through torch (its __cuda_array_interface__ raises TypeError for
        # float8 and other dtypes that typestrs cannot spell)
        protocol = torch is not None and isinstance(value, torch.Tensor) \
            or hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack__")
    except Exception as err:          # a property that raises (KeyError, ...): not an array we can read
        raise LaunchError(f"argument '{name}': reading its array protocol raised "
                          f"{type(err).__name__}: {err}") from None
    if isinstance(value, np.generic) or not protocol:
        dt = _scalar_dtype(name, value)
        return ScalarSpec(dt, bool(dt.is_float and positive_float(value))), dt.np.type(value)
    device = getattr(value, "__dlpack_device__", None)
    if device is not None and device()[0] == 1:           # kDLCPU: a zero-copy NumPy view
        if torch is not None and isinstance(value, torch.Tensor) and getattr(value, "requires_grad", False):
            value = value.detach()                        # kernels run outside autograd, as on the GPU
        try:
            host = np.from_dlpack(value)
        except Exception as err:                          # e.g. a torch tensor that requires grad
            raise LaunchError(f"argument '{name}': cannot read this {type(value).__name__} as a host "
                              f"array ({type(err).__name__}: {err})") from None
        return classify_argument(name, host)
    from tilejit.runtime.arrays import as_kernel_array    # the runtime reads GPU array protocols
    try:
        view = as_kernel_array(value)
    except LaunchError as err:
        raise LaunchError(f"argument '{name}': {err.message}") from None
    except Exception as err:          # e.g. no CUDA driver to ask where the pointer lives
        raise LaunchError(f"argument '{name}': cannot use this {type(value).__name__} as a GPU "
                          f"array ({type(err).__name__}: {err})") from None
    item = view.dtype.itemsize
    return _array_spec(name, view.dtype, view.shape, tuple(s * item for s in view.strides), view.ptr), value


def _dtype(name: str, dt) -> dtypes.DType:
    try:
        return dtypes.lookup(dt if isinstance(dt, (np.dtype, dtypes.DType, str)) else str(dt))
    except TypeError:
        raise LaunchError(f"argument '{name}' has dtype {dt}, which tilejit does not support "
                          f"(supported: {', '.join(dtypes.BY_NAME)})") from None


def _array_spec(name, dt, shape, strides, ptr) -> ArraySpec:
    """Spec of an array from its dtype, shape, strides in bytes and data address."""
    dt = _dtype(name, dt)
    item = dt.itemsize
    if any(s % item for s in strides):
        raise LaunchError(f"argument '{name}': its strides {strides} are not whole elements")
    return array_spec(dt, tuple(shape), tuple(s // item for s in strides), ptr)


def _scalar_dtype(name: str, value) -> dtypes.DType:
    if isinstance(value, (bool, np.bool_)):
        return dtypes.bool_
    if isinstance(value, np.generic) and not isinstance(value, float):   # np.float64 is a float
        return _dtype(name, value.dtype)
    if isinstance(value, int):
        if not -2**63 <= value < 2**63:
            raise LaunchError(f"argument '{name}' = {value} does not fit in int64")
        return dtypes.python_scalar_dtype(value)
    if isinstance(value, float):
        return dtypes.float32
    raise LaunchError(f"argument '{name}' must be an array or a scalar, got {type(value).__name__}")


def normalise_grid(grid) -> tuple[int, int, int]:
    """A grid as three positive ints; LaunchError unless it is an int or 1-3 positive ints."""
    dims = (grid,) if isinstance(grid, (int, np.integer)) else grid
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3:
        raise LaunchError(f"grid must be an int or a tuple of 1 to 3 positive ints, got {grid!r}")
    for axis, (n, limit) in enumerate(zip(dims, _GRID_LIMITS)):
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise LaunchError(f"grid must be an int or a tuple of 1 to 3 positive ints, got {grid!r}")
        if not 1 <= n <= limit:
            raise LaunchError(f"grid dimension {axis} is {n}; it must be between 1 and {limit}")
    return tuple(int(n) for n in dims) + (1,) * (3 - len(dims))


def check_num_stages(num_stages, who: str = "") -> None:
    """LaunchError unless ``num_stages`` is None or an int from 1 to 8."""
    if num_stages is not None and (not isinstance(num_stages, int) or isinstance(num_stages, bool)
                                   or not 1 <= num_stages <= 8):
        raise LaunchError(f"{who}num_stages must be None or an integer from 1 to 8, got {num_stages!r}")


def artifact_warps(artifact) -> int | None:
    """The warps a compiled artifact launches with."""
    if hasattr(artifact, "num_warps"):
        return artifact.num_warps
    meta = getattr(getattr(artifact, "fn", None), "meta", None)
    return getattr(meta, "num_warps", None)


def check_num_warps(num_warps, who: str = "", allow_none: bool = True) -> None:
    """LaunchError unless ``num_warps`` is a power of two from 1 to 32, or None (the compiler
    picks) where ``allow_none`` (``who`` prefixes the message)."""
    if num_warps is None and allow_none:
        return
    if not isinstance(num_warps, int) or isinstance(num_warps, bool) or num_warps not in (1, 2, 4, 8, 16, 32):
        raise LaunchError(f"{who}num_warps must be a power of two from 1 to 32, got {num_warps!r}")


_INT32_MIN, _INT32_LIMIT = -2**31, 2**31
_SPEC_KEYS: dict = {}


def _spec_key(dtype, shape, strides, ptr: int) -> tuple:
    """What the fast path's key holds of an array: the dtype's name (a str hashes in C, a DType
    in Python) and the rest of ``array_spec_fields``, remembered by (dtype, shape, strides,
    16-byte alignment of ptr), the only things it reads of ptr besides the alignment (the
    launch path's hot spot otherwise)."""
    key = (dtype.name, shape, strides, not ptr & 15)
    try:
        found = _SPEC_KEYS.get(key)
    except TypeError:                       # a list shape: hashed as a tuple
        key = (dtype.name, tuple(shape), tuple(strides), not ptr & 15)
        found = _SPEC_KEYS.get(key)
    if found is None:
        if len(_SPEC_KEYS) > 4096:
            _SPEC_KEYS.clear()
        found = _SPEC_KEYS[key] = (dtype.name,) + array_spec_fields(dtype, shape, strides, ptr)[1:]
    return found


_NUMPY_SCALARS: set = set()


def _is_numpy_scalar(t) -> bool:
    """True for a NumPy scalar type tilejit has a dtype for (``classify_argument`` passes such a
    scalar as it is, its spec the type's dtype), remembered for the fast path."""
    if not (isinstance(t, type) and issubclass(t, np.generic)):
        return False
    try:
        _scalar_dtype("", t(0))
    except (TilejitError, TypeError, ValueError):
        return False
    _NUMPY_SCALARS.add(t)
    return True


def _fast_device_view(value):
    """The runtime's cheap view of a device array (imported on first use: the runtime is only
    needed once a GPU launch has happened)."""
    global _fast_device_view
    from tilejit.runtime.arrays import fast_device_view
    _fast_device_view = fast_device_view
    return fast_device_view(value)
