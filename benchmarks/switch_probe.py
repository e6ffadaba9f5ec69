"""A/B probe: run ``bench_sweep.py`` with compiler module switches set, e.g.

    python3 benchmarks/switch_probe.py tilejit.passes.chunk_rows.STASH=False -- --columns 65536

Each ``MODULE.NAME=VALUE`` (a Python literal) is set before anything compiles; the arguments after
``--`` go to ``bench_sweep.py``.  Use a fresh ``TILEJIT_CACHE_DIR``: the cache key does not see
the switches.  ``PROBE_SCRIPT=bench_matmul.py`` runs that benchmark instead of ``bench_sweep.py``.
``division_probe.py`` is the same idea for codegen's division."""
import ast
import importlib
import os
import runpy
import sys


def main() -> None:
    args = sys.argv[1:]
    split = args.index("--") if "--" in args else len(args)
    for setting in args[:split]:
        target, _, value = setting.partition("=")
        module, _, name = target.rpartition(".")
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise SystemExit(f"switch_probe: {module} has no {name}")
        setattr(mod, name, ast.literal_eval(value))
    script = os.environ.get("PROBE_SCRIPT", "bench_sweep.py")
    sys.argv = [script] + args[split + 1:]
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    runpy.run_path(__file__.replace("switch_probe.py", script), run_name="__main__")


if __name__ == "__main__":
    main()
