"""Write ``docs/language.md``, the language reference, from the docstrings of the public ``tj``
names, and ``docs/compiler.md``, the compiler's stages in ``PIPELINE`` order from their modules'
docstrings (``python3 scripts/make_reference.py``; ``--check`` exits 1 when a file is out of
date).  A test runs the check, so a public name without an entry, or an entry older than its
docstring, fails the suite."""
from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys

import tilejit as tj

SECTIONS = [
    ("Kernels, device functions and launching", ["kernel", "func", "constexpr", "Kernel", "autotune", "Config",
                                                 "to_device", "empty", "DeviceArray"]),
    ("Program geometry", ["program_id", "num_programs"]),
    ("Making tiles", ["arange", "zeros", "full"]),
    ("Memory", ["load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                "atomic_xchg", "atomic_cas"]),
    ("Elementwise math", ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
                          "floor", "ceil", "trunc", "round", "abs", "maximum", "minimum", "clamp", "fma", "where",
                          "isnan", "isinf", "isfinite"]),
    ("Casts and packed types", ["cast", "bitcast", "unpack", "pack"]),
    ("Shapes", ["reshape", "trans", "permute", "broadcast_to", "expand_dims"]),
    ("Reductions, scans and sorting", ["sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod",
                                       "associative_scan", "sort", "histogram"]),
    ("Matrix multiplication", ["dot", "dot_scaled"]),
    ("Loops", ["range", "static_range"]),
    ("Debugging", ["static_assert", "static_print", "device_print", "device_assert"]),
    ("Host helpers", ["cdiv", "next_power_of_2"]),
    ("Errors", ["TilejitError", "CompileError", "LaunchError", "DeviceError", "DeviceAssertError",
                "PerformanceWarning"]),
]
INTERNAL = {"builtin", "outside_kernel", "DType"}     # public for the package's own modules


def public_names() -> list[str]:
    """The documented public callables: not modules, dtypes, constants or internals."""
    out = []
    for name in sorted(n for n in dir(tj) if not n.startswith("_")):
        obj = getattr(tj, name)
        if inspect.ismodule(obj) or isinstance(obj, tj.dtypes.DType) or not callable(obj) or name in INTERNAL:
            continue
        out.append(name)
    return out


def _signature(name: str, obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = ""
    return f"tj.{name}{sig}" if not inspect.isclass(obj) else f"tj.{name}"


def render() -> str:
    names = public_names()
    placed = [n for _, group in SECTIONS for n in group]
    lines = ["# The tilejit language", "",
             "Generated from the docstrings by `scripts/make_reference.py`; `help(tj.NAME)` shows the same text.",
             "A kernel is a Python function decorated with `@tj.kernel`; inside it, the names below operate on",
             "*tiles* (fixed-shape blocks of values held by the program's threads) and on array arguments.", ""]
    dtypes = ", ".join(f"`tj.{'bool_' if d.name == 'bool' else d.name}`" for d in tj.dtypes.ALL)
    lines += ["Tile dtypes: " + dtypes + ". Packed 4-bit storage types (`tj.int4`, `tj.uint4`, `tj.float4e2m1`)",
              "live two to a byte in uint8 arrays; `tj.unpack` / `tj.pack` convert them.  Constants: `tj.inf`,",
              "`tj.nan`, `tj.pi`.", ""]
    for title, group in SECTIONS + [("Other", [n for n in names if n not in placed])]:
        group = [n for n in group if n in names]
        if not group:
            continue
        lines += [f"## {title}", ""]
        for name in group:
            obj = getattr(tj, name)
            lines += [f"### `{_signature(name, obj)}`", "", inspect.getdoc(obj) or "", ""]
    lines += ["## Tile methods and attributes", "",
              "Inside a kernel a tile `t` also has these (each is the `tj.*` operation named):", "",
              "| form | meaning | example |", "|---|---|---|"]
    from tilejit.language import _TILE_METHOD_DOCS
    for form, meaning, example in _TILE_METHOD_DOCS.values():
        lines.append(f"| `{form}` | {meaning.replace('``', '`')} | `{example}` |")
    return "\n".join(lines).rstrip() + "\n"


# the module of each PIPELINE stage whose name is not its module's
STAGE_MODULES = {"lower_to_simt": "lower", "plan_shared_memory": "shared_memory", "insert_barriers": "shared_memory"}


def render_compiler() -> str:
    from tilejit.passes.pipeline import PIPELINE
    lines = ["# The tilejit compiler, stage by stage", "",
             "Generated from the modules' docstrings by `scripts/make_reference.py`.  A kernel goes:",
             "", "1. **frontend** (`tilejit/frontend/`): the function's bytecode becomes SSA *tile IR* for one",
             "   specialisation (dtypes, ranks, alignment and constexpr values);",
             "2. **passes** (`passes/`, installed as `tilejit.passes`): `PIPELINE` below, in order: tile IR to",
             "   tile IR, then the lowering to *SIMT IR* (one thread's registers) and the SIMT passes;",
             "3. **codegen** (`tilejit/codegen/`): SIMT IR to LLVM IR (llvmlite, NVPTX) to PTX, and nvJitLink",
             "   to a cubin (a warp-specialised kernel: the toolkit's `ptxas` command, whole-program, where",
             "   there is one, else the driver's JIT when the kernel is loaded);",
             "4. **runtime** (`runtime/`): the on-disk cache, module loading and launches.", "",
             "`tilejit compile FILE::KERNEL --emit STAGE` prints the IR after any stage named below; the",
             "interpret backend runs the tile IR, the emulate backend the SIMT IR. `--set MODULE.NAME=VALUE`",
             "(repeatable) turns one of the compiler's switches first, the upper-case settings at the top of a",
             "pass (`--set prefetch_loads.PREFETCH_AHEAD=2`; the list: `tilejit.passes.switches.DEFAULTS`).", ""]
    seen = set()
    for i, stage in enumerate(PIPELINE, 1):
        module = STAGE_MODULES.get(stage.name, stage.name)
        lines += [f"## {i}. `{stage.name}` (out: {stage.level} IR; `passes/{module}.py`)", ""]
        if module in seen:
            lines += [f"See `{module}` above.", ""]
            continue
        seen.add(module)
        doc = inspect.getdoc(importlib.import_module(f"tilejit.passes.{module}")) or ""
        lines += [doc, ""]
    return "\n".join(lines).rstrip() + "\n"


def docs_dir() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def outputs() -> dict[str, str]:
    return {"language.md": render(), "compiler.md": render_compiler()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file in docs/ is out of date")
    args = parser.parse_args()
    stale = []
    for name, text in outputs().items():
        target = os.path.join(docs_dir(), name)
        if args.check:
            current = open(target).read() if os.path.exists(target) else ""
            if current != text:
                stale.append(name)
            continue
        os.makedirs(docs_dir(), exist_ok=True)
        with open(target, "w") as f:
            f.write(text)
    if stale:
        print(f"docs/{', docs/'.join(stale)} out of date: run python3 scripts/make_reference.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
