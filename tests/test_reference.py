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
def test_every_public_name_shows_an_example():
    """Each public ``tj.*`` name's docstring has an ``Example:`` (a call, a decorator, an except)."""
    missing = [name for name, obj in public_callables()
               if name not in ("builtin", "outside_kernel") and "Example: ``" not in (obj.__doc__ or "")]
    assert missing == [], f"public names without an example in their docstring: {missing}"


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
