"""``@tj.autotune``: launch a kernel with the fastest of several configs, chosen once per key.

    @tj.autotune(configs=[tj.Config(BM=64, num_warps=4), tj.Config(BM=128, num_warps=8)],
                 key=["a", "b"])
    @tj.kernel
    def matmul(a, b, c, BM: tj.constexpr): ...

    matmul[lambda meta: (tj.cdiv(M, meta["BM"]),)](a, b, c)

The tuning key is the value of each scalar and the shape of each array named in ``key``, the
dtype of every runtime argument, and the constexprs passed at launch (they change the compiled
kernel). The first launch with a new key compiles every config, drops those that cannot run
(each with a one-line reason), times the rest (CUDA events, warm-up, median, L2 flushed),
keeps the fastest in memory and on disk (``autotune.store``), then launches it; later
launches with that key only look it up.

Policies:
- Dropped: configs removed by the ``prune`` hook, configs that fail to compile or launch,
  configs whose shared memory or registers per CTA exceed the device, and configs that spill
  registers *when some other config does not* (if every config spills, spilling ones are timed).
- Timed only on the cuda backend, or on any backend when a ``timer`` is injected (tests). On
  the CPU backends, and everywhere with ``TILEJIT_AUTOTUNE=0``, the kernel runs untimed with the
  cached choice for its key if one exists, else the first config the prune hook keeps.
"""
from __future__ import annotations

import difflib
import os
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from tilejit import backends, dtypes
from tilejit.autotune import workers
from tilejit.autotune.inputs import InputGuard
from tilejit.autotune.progress import Progress
from tilejit.autotune.store import ResultStore, canonical, device_identity
from tilejit.errors import LaunchError, PerformanceWarning, TilejitError
from tilejit.kernel import Kernel, at_caller, check_num_stages, check_num_warps, launches_are_skipped

REGISTERS_PER_CTA = 65536         # sm_80 and sm_90: 64K 32-bit registers per CTA


class Config:
    """One candidate launch: constexpr values plus ``num_warps``, ``fast_math`` and ``num_stages`` (None: the
    compiler's default pipeline depth).
    Example: ``tj.Config(BM=128, BN=64, num_warps=8, num_stages=3)``."""

    def __init__(self, num_warps: int = 4, num_stages: int | None = None, fast_math: bool = False, **constexprs):
        check_num_warps(num_warps, "tj.Config: ", allow_none=False)
        check_num_stages(num_stages, "tj.Config: ")
        if not isinstance(fast_math, bool):
            raise LaunchError(f"tj.Config: fast_math must be True or False, got {fast_math!r}")
        self.num_warps, self.num_stages, self.fast_math = num_warps, num_stages, fast_math
        self.constexprs = {k: tuple(v) if isinstance(v, list) else v for k, v in constexprs.items()}

    @classmethod
    def space(cls, where=None, **options) -> list["Config"]:
        """Every combination of ``options``, in order (the last option varies fastest): each is
        a list of choices or one value (a tuple constexpr is one value; to try several, list
        them).  ``num_warps`` and ``num_stages`` are options like the constexprs.  ``where``:
        a predicate called with each combination's options as keywords; combinations it
        rejects are left out.  ``tj.Config.space(BM=[64, 128], BK=32, num_stages=[2, 3, 4])``
        is six configs."""
        import itertools
        names = list(options)
        choices = [v if isinstance(v, list) else [v] for v in options.values()]
        for name, values in zip(names, choices):
            if not values:
                raise TypeError(f"tj.Config.space: option '{name}' has no choices")
        out = []
        for combo in itertools.product(*choices):
            params = dict(zip(names, combo))
            if where is None or where(**params):
                config = cls(**params)
                if config not in out:
                    out.append(config)
        if not out:
            raise TypeError("tj.Config.space: no combination of the options is left (check 'where')")
        return out

    def launch_options(self, kwargs: dict) -> dict:
        """The launch keywords: the caller's ``kwargs`` plus this config's warps, stages and
        ``fast_math`` (True when either asks for it)."""
        out = dict(kwargs, num_warps=self.num_warps, num_stages=self.num_stages)
        if self.fast_math:
            out["fast_math"] = True
        return out

    def _identity(self) -> tuple:
        return (self.num_warps, self.num_stages, self.fast_math, tuple(sorted(self.constexprs.items())))

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def label(self) -> str:
        """``BM=64 BN=64 num_warps=4``: how progress lines and reasons name the config."""
        return " ".join([f"{k}={v}" for k, v in self.constexprs.items()] + [f"num_warps={self.num_warps}"]
                        + ([f"num_stages={self.num_stages}"] if self.num_stages is not None else [])
                        + (["fast_math=True"] if self.fast_math else []))

    def canonical(self) -> str:
        """A process-independent text (for the results file's key)."""
        parts = [f"{k}={canonical(v)}" for k, v in sorted(self.constexprs.items())]
        return " ".join(parts + [f"num_warps={self.num_warps}"]
                        + ([f"num_stages={self.num_stages}"] if self.num_stages is not None else [])
                        + (["fast_math=True"] if self.fast_math else []))

    def __repr__(self) -> str:
        return f"Config({self.label().replace(' ', ', ')})"


def _arguments(kwargs: dict) -> dict:
    """The kernel's own keyword arguments among a tuned launch's (``fast_math`` and ``debug`` are
    launch options)."""
    return {k: v for k, v in kwargs.items() if k not in ("fast_math", "debug")}


def cuda_event_timer(fn, *, setup, warmup: int, rep: int, config: Config) -> float:
    """The default timer: ``tj.testing.benchmark`` (CUDA events, median, L2 flushed). Without
    torch or CuPy it times on the host clock, so each run then waits for the device: an
    asynchronous launch alone would measure nothing but the launch."""
    from tilejit import testing
    if testing._cuda_event_timer() is None:
        from tilejit.runtime import driver
        run = fn

        def fn():
            run()
            driver.check(driver.cuda().cuCtxSynchronize(), "cuCtxSynchronize")
    return testing.benchmark(fn, warmup=warmup, rep=rep, setup=setup)


def autotune(configs, key, prune=None, warmup: int = 10, rep: int = 100, restore=(), reset=(),
             timer=None):
    """Decorator above ``@tj.kernel``; see the module docstring. ``prune(configs, named_args)``
    returns the configs worth trying for these arguments; ``restore`` names arrays the kernel
    overwrites (copied before tuning, restored before each timed run and after tuning);
    ``reset`` names arrays zeroed before each timed run (and restored after tuning).
    ``timer(fn, setup=, warmup=, rep=, config=) -> ms`` replaces CUDA-event timing.
    Example: ``@tj.autotune(configs=[tj.Config(BLOCK=1024), tj.Config(BLOCK=2048, num_warps=8)], key=["n"])``."""
    configs = list(configs)
    if not configs or not all(isinstance(c, Config) for c in configs):
        raise LaunchError("tj.autotune needs a non-empty list of tj.Config(...)")
    if len(set(configs)) != len(configs):
        raise LaunchError("tj.autotune: the same config is listed twice")

    def decorate(kernel):
        if not isinstance(kernel, Kernel):
            raise LaunchError("@tj.autotune(...) goes above @tj.kernel, applied to a tj.kernel")
        return Autotuned(kernel, configs, list(key), prune, warmup, rep, tuple(restore), tuple(reset),
                         timer or cuda_event_timer, timer is not None)
    return decorate


@dataclass
class Choice:
    """The config chosen for one key and what each config measured (ms) or why it was dropped."""
    config: Config
    timings: dict = field(default_factory=dict)


class Autotuned:
    """An autotuned kernel: ``kernel[grid](*args, stream=None, **other_constexprs)``."""

    def __init__(self, kernel: Kernel, configs, key, prune, warmup, rep, restore, reset, timer, injected):
        self.kernel, self.configs, self.key, self.prune = kernel, configs, key, prune
        self.warmup, self.rep, self.restore, self.reset = warmup, rep, restore, reset
        self.timer, self._timer_injected = timer, injected
        self.config_names = frozenset().union(*(c.constexprs for c in configs))
        self._check_names()
        self._reserved = self.config_names | {"num_warps", "num_stages"}   # chosen here, never passed in
        self._positional = [p.name for p in kernel.params if p.kind is not p.KEYWORD_ONLY]
        self._defaults = {p.name: p.default for p in kernel.params if p.default is not p.empty}
        self._runtime = kernel.runtime_names
        self._choices: dict[tuple, Choice] = {}
        self._last: Choice | None = None
        self._fingerprint: str | None = None

    def _check_names(self) -> None:
        names = [p.name for p in self.kernel.params]
        for what, listed in (("key", self.key), ("restore", self.restore), ("reset", self.reset),
                             ("config", self.config_names)):
            for name in listed:
                if name not in names:
                    close = difflib.get_close_matches(name, names, n=1)
                    hint = f" (did you mean '{close[0]}'?)" if close else ""
                    raise LaunchError(f"tj.autotune {what} names '{name}', which is not a parameter of "
                                      f"kernel '{self.kernel.name}'{hint}")
        for name in self.config_names - self.kernel.constexpr_names:
            raise LaunchError(f"tj.autotune: config sets '{name}', which is not a tj.constexpr parameter "
                              f"of kernel '{self.kernel.name}'")

    def __repr__(self) -> str:
        return f"<tj.autotune {self.kernel.name}: {len(self.configs)} configs, key {self.key}>"

    def __call__(self, *args, **kwargs):
        raise at_caller(LaunchError(f"launch kernel '{self.kernel.name}' with {self.kernel.name}[grid](...); "
                                    f"calling it directly is not supported"), self.kernel.name, sys._getframe(1)) from None

    @property
    def best_config(self) -> Config | None:
        """The config used by the last launch (None before the first)."""
        return self._last.config if self._last else None

    @property
    def timings(self) -> dict:
        """For the last launch's key: config -> median ms, or the reason it was dropped (empty
        when the choice was made without timing)."""
        return dict(self._last.timings) if self._last else {}

    # --- launching -------------------------------------------------------------------------------
    def __getitem__(self, grid):
        def launch(*args, stream=None, **kwargs):
            if launches_are_skipped():                 # traced on fake tensors (tilejit.torch): no tuning
                return
            try:
                config = self._config_for(grid, args, kwargs, stream)
                self.kernel[grid](*args, stream=stream, **config.launch_options(kwargs), **config.constexprs)
            except TilejitError as err:
                if err.loc is not None and err.loc.file == __file__:   # pointed at our call: re-point
                    err.loc = None
                raise at_caller(err, self.kernel.name, sys._getframe(1)) from None
        return launch

    def _config_for(self, grid, args, kwargs, stream) -> Config:
        if kwargs and not self._reserved.isdisjoint(kwargs):
            name = sorted(self._reserved.intersection(kwargs))[0]
            raise LaunchError(f"'{name}' is chosen by tj.autotune; do not pass it at launch "
                              f"(launch {self.kernel.name}.kernel[grid](...) to set it by hand)")
        values = dict(zip(self._positional, args))          # unchecked: the kernel's launch checks
        values.update(kwargs)
        key = self.key_of(values, kwargs)
        choice = self._choices.get(key)
        if choice is None:
            bound = self.kernel.bind(args, {**_arguments(kwargs), **self.configs[0].constexprs})
            choice = self._choices[key] = self._choose(key, grid, args, kwargs, bound, stream)
        self._last = choice
        return choice.config

    def key_of(self, values: dict, launch_kwargs: dict) -> tuple:
        """The tuning key for these arguments (name -> value; see the module docstring)."""
        defaults = self._defaults
        named = tuple([_key_value(values[n] if n in values else defaults.get(n)) for n in self.key])
        kinds = tuple([_dtype_name(values[n] if n in values else defaults.get(n)) for n in self._runtime])
        consts = tuple(sorted((k, _key_value(v)) for k, v in launch_kwargs.items()
                              if k in self.kernel.constexpr_names and k not in self.key)) if launch_kwargs else ()
        return named, kinds, consts

    # --- choosing --------------------------------------------------------------------------------
    def _choose(self, key, grid, args, kwargs, bound, stream) -> Choice:
        backend = backends.selected()
        if self._fingerprint is None:
            from tilejit.fingerprint import kernel_fingerprint
            self._fingerprint = kernel_fingerprint(self.kernel.fn)
        store = ResultStore(self.kernel.name, self._fingerprint, key, self.configs, device_identity(backend))
        cached = store.load()
        if cached is not None:
            best, times = cached
            return Choice(self.configs[best], {c: t for c, t in zip(self.configs, times) if t is not None})
        named = {k: v for k, v in bound.items() if k not in self.config_names}
        candidates = self._user_pruned(named)
        switched_off = os.environ.get("TILEJIT_AUTOTUNE", "").strip() == "0"
        if switched_off or not (backend == "cuda" or self._timer_injected):
            return Choice(candidates[0] if candidates else self.configs[0])
        choice = self._tune(candidates, grid, args, kwargs, bound, stream, backend)
        store.save(self.configs.index(choice.config), [choice.timings.get(c) for c in self.configs])
        return choice

    def _user_pruned(self, named_args: dict) -> list[Config]:
        if self.prune is None:
            return list(self.configs)
        kept = list(self.prune(list(self.configs), dict(named_args)))
        for config in kept:
            if config not in self.configs:
                raise LaunchError(f"tj.autotune prune hook returned {config!r}, which is not one of the configs")
        return kept

    def _tune(self, candidates, grid, args, kwargs, bound, stream, backend) -> Choice:
        timings = {c: "removed by the prune hook" for c in self.configs if c not in candidates}
        runnable, dropped = self.viable(candidates, args, kwargs, backend)
        timings.update(dropped)
        progress = Progress(self.kernel.name, len(runnable))
        best = None
        with InputGuard(bound, self.restore, self.reset) as guard:
            for config in runnable:
                progress.show(config, best and (best, timings[best]))
                run = self._runner(grid, args, kwargs, stream, config)
                try:
                    ms = float(self.timer(run, setup=guard.before_run, warmup=self.warmup, rep=self.rep,
                                          config=config))
                except TilejitError as err:
                    timings[config] = f"launch failed: {one_line(err)}"
                    continue
                timings[config] = ms
                if best is None or ms < timings[best]:
                    best = config
        timings = {c: timings[c] for c in self.configs if c in timings}
        progress.finish(best, timings)
        if best is None:
            lines = "\n".join(f"  {c.label()}: {why}" for c, why in timings.items())
            raise LaunchError(f"tj.autotune: no config of '{self.kernel.name}' can run here:\n{lines}")
        return Choice(best, timings)

    def _runner(self, grid, args, kwargs, stream, config):
        launch = self.kernel[grid]
        options = {**kwargs, **config.constexprs}
        return lambda: launch(*args, stream=stream, **config.launch_options(options))

    def viable(self, configs, args, kwargs, backend: str) -> tuple[list[Config], dict]:
        """Compile each config for these arguments on ``backend`` (nothing runs): the configs
        that can run, and config -> one-line reason for those that cannot."""
        limits = device_limits(backend)
        kept, dropped, spills = [], {}, {}
        self._compile_ahead(configs, args, kwargs, backend)
        for config in configs:
            try:
                bound = self.kernel.bind(args, {**_arguments(kwargs), **config.constexprs})
                specs, consts, _ = self.kernel.specialise(bound)
                with warnings.catch_warnings():          # a config's spills are judged here, not warned
                    warnings.simplefilter("ignore", PerformanceWarning)
                    entry = self.kernel.compile(specs, consts, config.num_warps, backend, config.num_stages,
                                                config.fast_math or bool(kwargs.get("fast_math")))
            except TilejitError as err:
                dropped[config] = f"does not compile: {one_line(err)}"
                continue
            except Exception as err:          # a compiler bug for this config only: keep tuning
                dropped[config] = f"compiler failure: {type(err).__name__}: {one_line(err)}"
                continue
            problem = resource_problem(entry.artifact, config.num_warps, limits)
            if problem:
                dropped[config] = problem
                continue
            kept.append(config)
            spills[config] = getattr(entry.artifact, "spills", None) or 0
        if any(n == 0 for n in spills.values()):
            for config in [c for c in kept if spills[c]]:
                kept.remove(config)
                dropped[config] = f"spills {spills[config]} bytes of registers (other configs do not)"
        return kept, dropped

    def _compile_ahead(self, configs, args, kwargs, backend: str) -> None:
        """Compile the configs not yet cached in worker processes at once (``workers``), so that
        the loop in ``viable`` only reads them from the disk cache."""
        if len(configs) < 2:
            return
        requests = []
        for config in configs:
            try:
                bound = self.kernel.bind(args, {**_arguments(kwargs), **config.constexprs})
                specs, consts, _ = self.kernel.specialise(bound)
            except TilejitError:
                continue
            requests.append((specs, consts, config.num_warps, config.num_stages,
                             config.fast_math or bool(kwargs.get("fast_math"))))
        jobs = self.kernel.uncached_jobs(requests, backend)
        if len(jobs) > 1:
            workers.compile_in_workers(backend, jobs)

    def viable_configs(self, *args, backend: str | None = None, **kwargs) -> tuple[list[Config], dict]:
        """``viable`` from launch arguments, on ``backend`` (default: the selected one). The cuda
        backend compiles without a GPU, so this shows which configs fit before you have one."""
        try:
            return self.viable(self.configs, args, kwargs, backend or backends.selected())
        except TilejitError as err:
            raise at_caller(err, self.kernel.name, sys._getframe(1)) from None


# ------------------------------------------------------------------------------------ resources
@dataclass(frozen=True)
class Limits:
    """What one CTA may use on the device a config would run on."""
    shared_bytes: int
    registers: int = REGISTERS_PER_CTA


def device_limits(backend: str) -> Limits | None:
    """The current device's limits on the cuda backend (the target's when no GPU is present:
    compiling needs none); None on the CPU backends, which have no such limits."""
    if backend != "cuda":
        return None
    from tilejit.backends.resources import MAX_SHARED_BYTES
    from tilejit.runtime import driver
    if driver.available():
        return Limits(driver.device_properties(driver.current_device()).max_shared_per_block_optin)
    return Limits(MAX_SHARED_BYTES[backends.get("cuda").target])


def resource_problem(artifact, num_warps: int, limits: Limits | None) -> str | None:
    """Why a compiled config cannot launch (one line), or None."""
    if limits is None:
        return None
    shared = getattr(artifact, "shared_bytes", None) or 0
    if shared > limits.shared_bytes:
        return f"needs {shared} bytes of shared memory; the device offers {limits.shared_bytes} per CTA"
    read = getattr(artifact, "registers_per_thread", None)
    registers = (read() if read else getattr(artifact, "registers", None)) or 0
    threads = 32 * num_warps
    if registers * threads > limits.registers:
        return (f"needs {registers} registers x {threads} threads = {registers * threads}; "
                f"a CTA has {limits.registers}")
    return None


# ------------------------------------------------------------------------------------- key parts
_SCALARS = (bool, int, float, str, type(None))
_dtype_names: dict = {}       # dtype object (NumPy, torch, tj) -> its tilejit name


def _key_value(value):
    """An array keys on its shape, a scalar or constexpr on its type and value (1, 1.0 and True
    compile differently)."""
    kind = type(value)
    if kind in _SCALARS or kind is dtypes.DType:
        return kind.__name__, value
    if isinstance(value, np.generic):
        return value.dtype.name, value.item()
    shape = getattr(value, "shape", None)
    if shape is not None:
        return ("shape",) + tuple(shape)           # ints for NumPy, torch, CuPy and tj arrays
    if isinstance(value, (list, tuple)):
        return tuple(_key_value(v) for v in value)
    return kind.__name__, repr(value)


def _dtype_name(value) -> str:
    """The dtype of a runtime argument, spelled the same for NumPy, torch and tj arrays."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return type(value).__name__          # int, float, bool: their value picks int32/int64
    name = _dtype_names.get(dt)
    if name is None:
        try:
            name = dtypes.lookup(dt if isinstance(dt, (np.dtype, dtypes.DType, str)) else str(dt)).name
        except TypeError:
            name = str(dt)
        _dtype_names[dt] = name
    return name


def one_line(err: Exception) -> str:
    """The first line of an error's message, without location or caret."""
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    line = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return line if len(line) <= 200 else line[:197] + "..."
