"""The package's stage boundaries (README, "The pipeline, stage by stage"), checked with ``ast``
over every import in the source, function-level imports included: no stage imports one that
comes after it, the runtime knows nothing of the compiler, and the imports form no cycle."""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# source folder -> the package it is installed as (pyproject's package-dir)
FOLDERS = {"tilejit": "tilejit", "passes": "tilejit.passes", "runtime": "tilejit.runtime"}


def module_files() -> dict[str, str]:
    """Dotted module name -> file, for every module of the installed package."""
    out = {}
    for folder, package in FOLDERS.items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = os.path.relpath(dirpath, base)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    out[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(dirpath, name)
    return out


MODULES = module_files()


def imports_of(module: str, source: str, known=MODULES) -> list[tuple[str, int]]:
    """Every module ``source`` imports, as (dotted name, line): ``from p import m`` names the
    submodule ``p.m`` when that is a module, else ``p``; relative imports are resolved against
    ``module``; ``importlib.import_module("literal")`` counts as an import."""
    is_package = known.get(module, "").endswith("__init__.py")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((sub if sub in known or _is_external_module(sub) else base, node.lineno))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value, node.lineno))
    return found


def _is_external_module(name: str) -> bool:
    # ``from cuda.bindings import driver`` imports the module cuda.bindings.driver
    return name.startswith("cuda.")


def under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# (importing layer, rule text, predicate on the imported name that is a violation)
COMPILER = ("tilejit.frontend", "tilejit.passes", "tilejit.codegen", "tilejit.backends",
            "tilejit.autotune", "tilejit.kernel", "tilejit.cli", "tilejit.demo", "tilejit.fingerprint",
            "tilejit.language", "tilejit.testing", "tilejit.ir", "tilejit.simt", "tilejit.verifier")
RULES = [
    ("tilejit.frontend", "the frontend produces tile IR and knows no backend",
     lambda m: under(m, ("tilejit.backends", "tilejit.codegen", "tilejit.passes", "tilejit.runtime",
                         "tilejit.autotune", "tilejit.kernel", "llvmlite", "cuda"))),
    ("tilejit.passes", "passes know no LLVM and no driver",
     lambda m: under(m, ("llvmlite", "cuda", "tilejit.codegen", "tilejit.backends", "tilejit.runtime",
                         "tilejit.autotune", "tilejit.frontend", "tilejit.kernel"))),
    ("tilejit.codegen", "codegen never touches the driver",
     lambda m: under(m, ("tilejit.runtime", "tilejit.backends", "tilejit.autotune", "tilejit.frontend",
                         "tilejit.passes", "tilejit.kernel", "cuda")) and m != "cuda.bindings.nvjitlink"),
    ("tilejit.runtime", "the runtime knows nothing of the compiler",
     lambda m: under(m, COMPILER + ("llvmlite",))),
]
CORE = ("tilejit.abi", "tilejit.errors", "tilejit.dtypes", "tilejit.ir", "tilejit.simt", "tilejit.specs", "tilejit.verifier")


def violations(modules: dict[str, str], read=lambda f: open(f, encoding="utf-8").read()) -> list[str]:
    out = []
    for module, path in modules.items():
        for name, line in imports_of(module, read(path), modules):
            for layer, rule, bad in RULES:
                if under(module, (layer,)) and bad(name):
                    out.append(f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {name} ({rule})")
            if module in CORE and name.startswith("tilejit") and name not in CORE:
                out.append(f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {name} "
                           "(the core data imports only the core data)")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(modules: dict[str, str], read=lambda f: open(f, encoding="utf-8").read()):
    return {m: {n for n, _ in imports_of(m, read(p), modules) if n in modules and n != m}
            for m, p in modules.items()}


# ------------------------------------------------------------------------------------------ the checks
def test_the_package_was_found():
    for m in ("tilejit.frontend.tracer", "tilejit.passes.pipeline", "tilejit.codegen.llvm",
              "tilejit.codegen.ptxas", "tilejit.runtime.driver", "tilejit.backends.cuda",
              "tilejit.backends.emulate_mma", "tilejit.autotune.tuner"):
        assert m in MODULES, m


def test_no_import_crosses_a_stage_boundary():
    assert violations(MODULES) == []


def test_the_imports_form_no_cycle():
    assert cycles(import_graph(MODULES)) == []


def test_the_top_of_the_package_is_a_map():
    top = sorted(f for f in os.listdir(os.path.join(ROOT, "tilejit")) if f.endswith(".py"))
    assert len(top) <= 15, top
    assert not [f for f in top if f.startswith(("codegen", "autotune", "emulator", "interpreter", "ptxas"))]


# ------------------------------------------------------------- the checker itself catches each crossing
FAKE = {"tilejit.frontend.calls": "f.py", "tilejit.frontend": "frontend/__init__.py",
        "tilejit.passes.lower": "p.py", "tilejit.codegen.ptxas": "c.py", "tilejit.codegen": "codegen/__init__.py",
        "tilejit.codegen.llvm": "l.py", "tilejit.runtime.launch": "r.py", "tilejit.runtime.driver": "d.py",
        "tilejit.backends": "backends/__init__.py", "tilejit.backends.cuda": "b.py",
        "tilejit.ir": "i.py", "tilejit.errors": "e.py", "tilejit.kernel": "k.py"}


@pytest.mark.parametrize("module,source", [
    ("tilejit.frontend.calls", "def f():\n    from tilejit.backends import cuda\n"),
    ("tilejit.frontend.calls", "from tilejit import codegen\n"),
    ("tilejit.frontend.calls", "import importlib\nimportlib.import_module('tilejit.backends.cuda')\n"),
    ("tilejit.passes.lower", "import llvmlite.binding as llvm\n"),
    ("tilejit.passes.lower", "from cuda.bindings import driver\n"),
    ("tilejit.passes.lower", "from ..codegen import llvm\n"),
    ("tilejit.codegen.ptxas", "from cuda.bindings import driver\n"),
    ("tilejit.codegen.ptxas", "from tilejit.runtime import driver\n"),
    ("tilejit.runtime.launch", "from tilejit import kernel\n"),
    ("tilejit.runtime.launch", "from tilejit.passes import lower\n"),
    ("tilejit.ir", "from tilejit import kernel\n"),
])
def test_a_crossing_is_caught(module, source):
    files = dict(FAKE, **{module: "x.py"})
    assert len(violations(files, read=lambda f: source if f == "x.py" else "")) == 1


@pytest.mark.parametrize("module,source", [
    ("tilejit.codegen.ptxas", "from cuda.bindings import nvjitlink\n"),
    ("tilejit.runtime.launch", "from tilejit.errors import LaunchError\nfrom tilejit.runtime import driver\n"),
    ("tilejit.backends.cuda", "from tilejit import codegen\nfrom tilejit.runtime import driver\n"),
    ("tilejit.frontend.calls", "from tilejit.frontend import semantics\nfrom tilejit import ir\n"),
])
def test_an_allowed_import_passes(module, source):
    files = dict(FAKE, **{module: "x.py"})
    assert violations(files, read=lambda f: source if f == "x.py" else "") == []


def test_a_cycle_is_caught_even_through_a_function_level_import():
    sources = {"e.py": "from tilejit.ir import Loc\n", "i.py": "def f():\n    from tilejit import errors\n"}
    found = cycles(import_graph(FAKE, read=lambda f: sources.get(f, "")))
    assert found == [["tilejit.errors", "tilejit.ir"]]
    sources["i.py"] = ""
    assert cycles(import_graph(FAKE, read=lambda f: sources.get(f, ""))) == []


# ----------------------------------------------- the lowering context changes only through its methods
def context_mutations(source: str) -> list[int]:
    """Lines where a helper of the lowering assigns to, deletes from or mutates in place a field
    of the lowering context ``lw`` (``lw.x = ...``, ``lw.x[k] = ...``, ``del lw.x[k]``,
    ``lw.x.append(...)``)."""
    def on_lw(node) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "lw"
    out = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for x in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if on_lw(x):
                    out.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and on_lw(node.func.value) \
                and node.func.attr in ("append", "pop", "add", "update", "remove", "discard", "clear", "setdefault"):
            out.append(node.lineno)
    return out


def test_lowering_helpers_change_the_context_only_through_its_methods():
    """``passes.lower.Lowering`` is the typed lowering context: the helper modules read it and
    change it through its scoped methods (``building``, ``at_iteration``, ``pipelined_body``,
    ``stage``...), never by rebinding or mutating its fields."""
    found = []
    for module, path in module_files().items():
        if under(module, ("tilejit.passes",)) and module != "tilejit.passes.lower":
            with open(path, encoding="utf-8") as f:
                found += [f"{module}:{line}" for line in context_mutations(f.read())]
    assert found == []


@pytest.mark.parametrize("source", ["lw.b = x\n", "lw.values[v] = 1\n", "del lw.staged[v]\n",
                                    "lw.pipelining.append(p)\n", "outer, lw.b = lw.b, y\n", "lw.n += 1\n"])
def test_a_context_mutation_is_caught(source):
    assert context_mutations(source) == [1]
