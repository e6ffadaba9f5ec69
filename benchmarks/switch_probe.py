"""A/B probe: run ``bench_sweep.py`` with compiler module switches set, e.g.

    python3 benchmarks/switch_probe.py tilejit.passes.chunk_rows.STASH=False -- --columns 65536

Each ``MODULE.NAME=VALUE`` (a Python literal) is set before anything compiles; the arguments after
``--`` go to ``bench_sweep.py``.  The on-disk cache key includes the switches set away from their
defaults (``tilejit.passes.switches``); still, with any set the run uses a cache directory of its own settings (``cache_dir_for``: a subdirectory of
``TILEJIT_CACHE_DIR``, or of the temporary directory, named by a hash of the settings): two runs
with different switches never share compiled kernels, two with the same ones do.
``PROBE_SCRIPT=bench_matmul.py`` runs that benchmark instead of ``bench_sweep.py`` (a path
relative to ``benchmarks/``, or absolute).  ``division_probe.py`` is the same idea for codegen's
division."""
import ast
import hashlib
import importlib
import os
import runpy
import sys
import tempfile


def cache_dir_for(settings: list[str], base: str | None = None) -> str | None:
    """The cache directory of a run with ``settings`` (``MODULE.NAME=VALUE`` strings; None when
    there are none: the run keeps the environment's)."""
    if not settings:
        return None
    canonical = "\n".join(sorted(f"{t.strip()}={ast.literal_eval(v)!r}" for t, _, v in
                                 (s.partition("=") for s in settings)))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return os.path.join(base or os.environ.get("TILEJIT_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tilejit-probe"),
                        f"switches-{digest}")


def apply(settings: list[str]) -> None:
    """Set each ``MODULE.NAME=VALUE`` (a Python literal); SystemExit naming one that does not
    exist.  Launchers already made see the new values once ``switches.changed()`` has run."""
    for setting in settings:
        target, _, value = setting.partition("=")
        module, _, name = target.rpartition(".")
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise SystemExit(f"switch_probe: {module} has no {name}")
        setattr(mod, name, ast.literal_eval(value))
    if settings:
        importlib.import_module("tilejit.passes.switches").changed()


def main() -> None:
    args = sys.argv[1:]
    split = args.index("--") if "--" in args else len(args)
    settings = args[:split]
    apply(settings)
    if (cache := cache_dir_for(settings)) is not None:
        os.environ["TILEJIT_CACHE_DIR"] = cache
        print(f"switch_probe: {' '.join(settings)}; cache {cache}", file=sys.stderr)
    script = os.environ.get("PROBE_SCRIPT", "bench_sweep.py")
    here = os.path.dirname(os.path.abspath(__file__))
    path = script if os.path.isabs(script) else os.path.join(here, script)
    sys.argv = [script] + args[split + 1:]
    sys.path.insert(0, here)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
