"""What the tracer's stack and locals hold besides Python constants and IR values.

Compile-time Python objects (numbers, strings, tuples, dtypes, modules, functions) are held as
themselves; runtime tiles and scalars are ``ir.Value``s; array arguments are
``semantics.ArrayHandle``s.  The classes here are the remaining symbolic kinds.
"""
from __future__ import annotations

import functools

from tilejit.errors import outside_kernel
from tilejit.ir import Value
from tilejit.frontend.semantics import ArrayHandle


class _Null:
    """The NULL a call sequence pushes next to a callable (see bytecode.py, CALL)."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


class Undefined:
    """A local whose value is unknown after control flow; reading it is a compile error."""

    def __init__(self, reason: str):
        self.reason = reason


class RangeSpec:
    """``range(...)`` / ``tj.range(...)``: becomes a FOR op when iterated."""

    def __init__(self, start, stop, step, stages: int = 1):
        self.start, self.stop, self.step, self.stages = start, stop, step, stages


class StaticIter:
    """An iterator the tracer unrolls (tuples, ``tj.static_range``); copied when control forks."""

    def __init__(self, items: tuple, pos: int = 0):
        self.items, self.pos = items, pos

    def copy(self) -> "StaticIter":
        return StaticIter(self.items, self.pos)


class ArrayShape:
    """``x.shape`` of an array argument: ``shape[i]`` is a runtime DIM value."""

    def __init__(self, handle: ArrayHandle):
        self.handle = handle


class BoundMethod:
    """A method of a tile or array taken with ``t.to`` / ``t.reshape`` ..., called later."""

    def __init__(self, obj, name: str):
        self.obj, self.name = obj, name


class TjFunc:
    """A ``@tj.func`` device function: traced inline (with its own locals) where it is called."""
    __tilejit_func__ = True

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        outside_kernel(f"the @tj.func '{self.fn.__name__}'")

    def __repr__(self) -> str:
        return f"<tj.func {self.fn.__qualname__}>"


def func(fn) -> TjFunc:
    """Decorator: make ``fn`` a device function callable from kernels (inlined).
    Example: ``@tj.func`` above ``def gelu(x): return 0.5 * x * (1.0 + tj.erf(x * 0.7071067811865476))``."""
    return fn if isinstance(fn, TjFunc) else TjFunc(fn)


def is_runtime(x) -> bool:
    """Whether ``x`` only exists at run time (a tile/scalar value or an array argument)."""
    return isinstance(x, (Value, ArrayHandle, ArrayShape))


def copy_stack_item(x):
    return x.copy() if isinstance(x, StaticIter) else x
