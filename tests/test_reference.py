"""Every public ``tj.*`` operation documents itself: a user finds ``tj.arange`` or ``tj.load``'s
semantics with ``help()``, not by reading the compiler."""
from __future__ import annotations

import inspect

import tilejit as tj


def public_callables():
    for name in sorted(n for n in dir(tj) if not n.startswith("_")):
        obj = getattr(tj, name)
        if inspect.ismodule(obj) or isinstance(obj, tj.dtypes.DType) or not callable(obj):
            continue
        yield name, obj


def test_every_public_operation_has_a_docstring():
    missing = [name for name, obj in public_callables()
               if len((inspect.getdoc(obj) or "").strip()) < 20]
    assert missing == [], f"public names without a docstring: {missing}"


# the operations every kernel uses: their docstrings show a call (the rest are being given theirs)
WITH_EXAMPLES = ("load", "store", "dot", "dot_scaled", "program_id", "num_programs", "arange", "zeros", "full",
                 "where", "sum", "max", "min", "trans", "reshape", "cdiv", "exp", "atomic_add", "cumsum", "sort",
                 "unpack")


def test_the_core_operations_show_an_example():
    import tilejit as tj
    missing = [name for name in WITH_EXAMPLES
               if "Example" not in (getattr(tj, name).__doc__ or "") and f"tj.{name}(" not in (getattr(tj, name).__doc__ or "")]
    assert missing == [], f"core operations without an example call in their docstring: {missing}"



def test_docs_language_md_is_generated_from_the_docstrings_and_up_to_date():
    """``docs/language.md`` lists every public operation with its docstring, and
    ``docs/compiler.md`` every PIPELINE stage with its module's (regenerate both with
    ``python3 scripts/make_reference.py`` after changing a docstring)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "scripts", "make_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = open(os.path.join(root, "docs", "language.md")).read()
    for name, _ in public_callables():
        if name not in ("builtin", "outside_kernel", "DType"):
            assert f"### `tj.{name}" in text, name
    from tilejit.passes.pipeline import PIPELINE
    compiler = open(os.path.join(root, "docs", "compiler.md")).read()
    assert all(f"`{stage.name}`" in compiler for stage in PIPELINE)


def test_the_tj_namespace_holds_no_stray_imports():
    """``dir(tj)`` shows the language, not the modules the package happens to import."""
    import tilejit as tj_
    assert not [n for n in ("math", "functools", "annotations") if hasattr(tj_, n)]
