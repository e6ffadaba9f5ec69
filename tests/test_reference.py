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

