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


def test_every_tile_method_the_frontend_accepts_is_documented_with_an_example():
    """The frontend's tile methods and attributes come from ``language._TILE_METHOD_DOCS``, and each
    has a row (form, meaning, example) in docs/language.md."""
    import os
    from tilejit import language
    from tilejit.frontend import calls
    assert calls._TILE_METHODS | set(language._TILE_ATTRIBUTES) == set(language._TILE_METHOD_DOCS)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "docs", "language.md")).read()
    for form, meaning, example in language._TILE_METHOD_DOCS.values():
        assert f"| `{form}` |" in text and example and meaning


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


def test_the_documented_tile_methods_work_as_documented(monkeypatch):
    """Each method of the table, used in a kernel on the interpreter, against NumPy."""
    import numpy as np
    import tilejit as tj
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")

    @tj.kernel
    def methods(x, out, idx):
        t = tj.load(x, (0, 0), (4, 8))
        tj.static_assert(t.ndim == 2 and t.shape[0] == 4)
        tj.store(out, (0, 0), t.T.trans().astype(tj.float32).to(out.dtype))                       # rows 0-3
        tj.store(out, (4, 0), t.permute(1, 0).reshape((4, 8)))                                     # rows 4-7
        tj.store(out, (8, 0), t.sum(axis=1, keepdims=True).broadcast_to((4, 8)))                  # rows 8-11
        tj.store(out, (12, 0), t.max(axis=0).expand_dims(0) - t.min(axis=0)[None, :])             # row 12
        tj.store(idx, (0,), t.argmax(axis=1))
        tj.store(idx, (4,), t.argmin(axis=1))

    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    out, idx = np.zeros((13, 8), np.float32), np.zeros(8, np.int32)
    methods[(1,)](x, out, idx)
    np.testing.assert_array_equal(out[:4], x)
    np.testing.assert_array_equal(out[4:8], x.T.reshape(4, 8))
    np.testing.assert_allclose(out[8:12], np.broadcast_to(x.sum(axis=1, keepdims=True), (4, 8)), rtol=1e-6)
    np.testing.assert_array_equal(out[12], x.max(axis=0) - x.min(axis=0))
    np.testing.assert_array_equal(idx, np.concatenate([x.argmax(axis=1), x.argmin(axis=1)]))
