"""Backends: tile IR in, results in the user's arrays out.  This module is the registry: a name
maps to an object that compiles a kernel's tile IR into an artifact and launches that artifact
on a grid.

    interpret.py    runs tile IR with NumPy, one program at a time (the reference semantics)
    emulate.py      runs the compiled SIMT IR with NumPy, all threads of a CTA in lockstep;
                    emulate_mma.py is its tensor-core part (PTX fragment maps, ldmatrix, wgmma)
    cuda.py         passes -> codegen -> cubin, the on-disk cache, launch through the runtime

A backend is any object with

    compile(tile_fn: ir.Function, options: dict) -> artifact
    launch(artifact, grid: tuple[int, int, int], args: list, stream) -> None

and optionally ``available() -> bool`` (e.g. "a CUDA device is present"), ``target`` (a
string that becomes part of the specialisation key, e.g. ``"sm_90a"``), and an on-disk cache:
``cache_key(pyfn, specs, constexprs, num_warps, switches) -> str`` with ``lookup(key) -> artifact | None``
(on a hit the frontend does not run; on a miss ``options["cache_key"]`` is passed to compile).  Artifacts may carry the
text of later stages as attributes (``simt_ir``, ``llvm_ir``, ``ptx``, ...); ``kernel.inspect``
reads them.  Modules register their backend on import with ``register(name, backend)``; the
table ``PROVIDERS`` says which module to import to get each one.
"""
from __future__ import annotations

import importlib
import os
import sys

from tilejit.errors import LaunchError

# name -> modules that register it when imported (tried in order)
PROVIDERS: dict[str, tuple[str, ...]] = {
    "interpret": ("tilejit.backends.interpret",),
    "emulate": ("tilejit.backends.emulate",),
    "cuda": ("tilejit.backends.cuda",),
}
NAMES = tuple(PROVIDERS)

_registry: dict[str, object] = {}
_notice_printed = False


def switch_options(options: dict) -> dict:
    """The ``compile_to_simt`` keyword options (``wgmma``, ``tma``, ``warp_specialize``, ``pack``, ``verify``,
    ``num_stages``, ``debug``, ``persist``, ``cluster``, ``tma_store``) in a backend's ``options``:
    every switch of ``kernel.compile_switches``."""
    return {k: options[k] for k in ("wgmma", "tma", "warp_specialize", "pack", "verify", "num_stages", "fast_math", "debug", "persist",
                                    "cluster", "tma_store")
            if k in options}


STREAM_K_SPLIT = 4       # the most CTAs a stream-K launch gives each tile (fewer tiles than SMs)


def launch_geometry(programs: int, grid: tuple, args: list, resident: int | None = None,
                    cluster: int = 1, tiles: bool = False, workspace=None,
                    paired: bool = False) -> tuple[tuple, list]:
    """The CTA grid and the arguments (with grid axis 0 appended) of a launch of ``grid``
    programs of a kernel packed ``programs`` to a CTA.  ``resident``: a persistent kernel's
    CTAs (``persist_programs``; each loops over the programs along axis 0), at most that many in
    all and never more than there are programs.  ``cluster``: each program is a cluster of that
    many CTAs along axis 0 (``cluster_rows``; the arguments are unchanged).  ``tiles``: a
    persistent kernel whose CTAs loop over every program of the grid (``specialise_warps``): a
    1-D launch of at most ``resident`` CTAs, the grid's three extents appended to the arguments,
    then ``workspace(ctas)`` where given (a stream-K kernel's scratch buffer for that many CTAs:
    such a kernel runs up to ``STREAM_K_SPLIT`` CTAs a tile where there are fewer tiles than
    ``resident``, each tile's k-iterations shared out among them).  ``paired``: clusters of two
    CTAs along axis 0, each running its own program (``passes.multicast``): axis 0
    rounded up to even, its extent appended to the arguments (the padding CTA only joins its
    partner's cluster barriers)."""
    if tiles:
        extents = tuple(grid) + (1,) * (3 - len(grid))
        total = extents[0] * extents[1] * extents[2]
        ctas = max(1, min(total * (STREAM_K_SPLIT if workspace is not None else 1), resident))
        return (ctas, 1, 1), list(args) + list(extents) + ([workspace(ctas)] if workspace is not None else [])
    if paired:
        return (grid[0] + grid[0] % 2,) + tuple(grid[1:]), list(args) + [grid[0]]
    if cluster > 1:
        return (grid[0] * cluster,) + tuple(grid[1:]), args
    if resident is not None:
        others = 1
        for g in grid[1:]:
            others *= g
        return (min(grid[0], max(1, resident // max(1, others))),) + tuple(grid[1:]), list(args) + [grid[0]]
    if programs == 1:
        return grid, args
    return (-(-grid[0] // programs),) + tuple(grid[1:]), list(args) + [grid[0]]


def register(name: str, backend) -> None:
    """Make ``backend`` the implementation of ``name`` (called by the module that provides it)."""
    _registry[name] = backend


def get(name: str):
    """The backend called ``name``, importing its provider on first use; LaunchError if there is
    none (never another backend in its place)."""
    if name not in PROVIDERS and name not in _registry:
        raise LaunchError(f"unknown backend '{name}' (choose one of: {', '.join(NAMES)})")
    if name not in _registry:
        for module in PROVIDERS.get(name, ()):
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as err:
                if err.name != module:          # the provider is there but its own import failed:
                    raise                       # a real error, never hidden behind another backend
                continue
            if name in _registry:
                break
    if name not in _registry:
        raise LaunchError(f"backend '{name}' has no provider here (tried: {', '.join(PROVIDERS.get(name, ()))})")
    return _registry[name]


def _usable(name: str) -> bool:
    try:
        backend = get(name)
    except LaunchError:
        return False
    available = getattr(backend, "available", None)
    return available is None or bool(available())


def selected() -> str:
    """The backend to launch on: ``$TILEJIT_BACKEND`` when set, else cuda when a device is
    present, else emulate (interpret if emulate cannot run), with a one-line notice
    on stderr the first time."""
    global _notice_printed
    name = os.environ.get("TILEJIT_BACKEND", "").strip().lower()
    if name:
        if name not in PROVIDERS:
            raise LaunchError(f"TILEJIT_BACKEND={name!r} is not a backend (choose one of: {', '.join(NAMES)})")
        return name
    if _usable("cuda"):
        return "cuda"
    fallback = "emulate" if _usable("emulate") else "interpret"
    if not _notice_printed:
        _notice_printed = True
        print(f"tilejit: no CUDA device; running kernels on the '{fallback}' backend "
              f"(set TILEJIT_BACKEND to choose)", file=sys.stderr)
    return fallback
