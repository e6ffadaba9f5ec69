"""Names, attributes and calls inside a traced kernel.

Globals and closure variables become compile-time constants (recorded in ``deps`` for the cache
key).  Calls dispatch to: ``tj`` builtins (``semantics.BUILTINS`` and ``packed.BUILTINS``),
``tj.func`` inlining, host helpers (``tj.cdiv``: folded on constants, inlined otherwise), dtype
casts, tile methods, a few Python builtins and ``math`` functions.  Any other call is a compile error naming the callee.
"""
from __future__ import annotations

import builtins
import inspect
import math
import types

import numpy as np

from tilejit import dtypes, language
from tilejit.frontend import mathlib, packed, semantics
from tilejit.dtypes import DType
from tilejit.errors import CompileError
from tilejit.frontend.cfg import CodeInfo
from tilejit.frontend.values import (ArrayShape, BoundMethod, RangeSpec, StaticIter, TjFunc,
                                     is_runtime)
from tilejit.ir import ReduceKind, TileOp, TileType, Value, Operation, AxisAttrs
from tilejit.frontend.semantics import ArrayHandle

BUILTINS = {**semantics.BUILTINS, **packed.BUILTINS, **mathlib.BUILTINS}     # tj builtin name -> its builder

_HOST_HELPERS = (language.cdiv, language.next_power_of_2)
_TILE_METHODS = set(language._TILE_METHOD_DOCS) - set(language._TILE_ATTRIBUTES)   # t.to(...), t.sum(...), ...
_MATH_UNARY = {math.exp: "exp", math.log: "log", math.log2: "log2", math.sqrt: "sqrt",
               math.sin: "sin", math.cos: "cos", math.tanh: "tanh", math.erf: "erf", math.erfc: "erfc",
               math.fabs: "abs", math.log1p: "log1p", math.expm1: "expm1", math.sinh: "sinh",
               math.cosh: "cosh", math.atan: "atan", math.asin: "asin", math.acos: "acos",
               math.atan2: "atan2", math.pow: "pow"}
if hasattr(math, "exp2"):
    _MATH_UNARY[math.exp2] = "exp2"
_PY_BUILTINS = ("range", "len", "min", "max", "abs", "float", "int", "bool", "isinstance", "tuple",
                "print")
_CONST_METHOD_TYPES = (str, int, float, tuple, DType)
_MAX_INLINE_DEPTH = 64                 # nested tj.func calls
MAX_STATIC_ITERATIONS = 4096           # iterations tj.static_range may unroll
_LIBRARY_MODULES = {"tilejit", "math", "numpy", "builtins"}


def _scalar(frame, x, fn: str):
    """``x`` when it is a runtime scalar: ``float(t)`` of a tile has no meaning."""
    if isinstance(x, Value) and x.type.shape != ():
        raise CompileError(f"{fn}() of a {x.type}: only scalars convert; use t.to(tj.{'float32' if fn == 'float' else 'int32'}) "
                           "to convert every element", frame.b.loc)
    return x


class Calls:
    """Mixin of the Tracer: globals, attributes, subscripts and calls."""

    # --- names -------------------------------------------------------------------------------------
    def _record_dep(self, frame, name: str, value) -> None:
        if isinstance(value, types.ModuleType) or getattr(builtins, name, None) is value:
            return
        key = name if frame.info.is_kernel else f"{frame.info.fn.__qualname__}.{name}"
        self.deps[key] = value

    def load_global(self, frame, name: str):
        g = frame.info.globals
        if name in g:
            value = g[name]
        elif hasattr(builtins, name):
            value = getattr(builtins, name)
        else:
            raise CompileError(f"name '{name}' is not defined", frame.b.loc)
        self._record_dep(frame, name, value)
        return _from_numpy_scalar(value)

    def load_closure(self, frame, name: str):
        cell = frame.info.cells.get(name)
        try:
            value = cell.cell_contents
        except (AttributeError, ValueError):
            raise CompileError(f"closure variable '{name}' is not available", frame.b.loc) from None
        self._record_dep(frame, name, value)
        return _from_numpy_scalar(value)

    def dim(self, handle: ArrayHandle, axis: int) -> Value:
        """``x.shape[axis]``: one DIM op per (array, axis), hoisted to the top of the kernel."""
        key = (id(handle.value), axis)
        if key not in self.dims:
            size_type = dtypes.int64 if handle.large else dtypes.int32
            op = Operation(TileOp.DIM, [handle.value], [TileType((), size_type)], AxisAttrs(axis))
            self.entry.ops.insert(len(self.dims), op)
            op.results[0].hint = f"{handle.name}.shape[{axis}]"
            self.dims[key] = op.result
        return self.dims[key]

    # --- attributes and subscripts ------------------------------------------------------------------
    def get_attr(self, frame, obj, name: str):
        b = frame.b
        if isinstance(obj, Value):
            t = obj.type
            if name == "T":
                return semantics.trans(b, obj)
            if name == "shape":
                return t.shape
            if name == "dtype":
                return t.dtype
            if name == "ndim":
                return len(t.shape)
            if name in _TILE_METHODS:
                return BoundMethod(obj, name)
            raise CompileError(f"a tile has no attribute '{name}'", b.loc)
        if isinstance(obj, ArrayHandle):
            if name == "shape":
                return ArrayShape(obj)
            if name == "dtype":
                return obj.dtype
            if name in ("ndim", "rank"):
                return obj.rank
            raise CompileError(f"array argument '{obj.name}' has no attribute '{name}' in a kernel "
                               "(available: shape, dtype, ndim)", b.loc)
        if is_runtime(obj):
            raise CompileError(f"{semantics.describe(obj)} has no attribute '{name}'", b.loc)
        try:
            value = getattr(obj, name)
        except AttributeError as e:
            raise CompileError(str(e) + _did_you_mean(obj, name), b.loc) from None
        if isinstance(obj, types.ModuleType) and not obj.__name__.split(".")[0] in _LIBRARY_MODULES:
            self._record_dep(frame, f"{obj.__name__}.{name}", value)    # a user's config module
        return _from_numpy_scalar(value)

    def subscript(self, frame, obj, index):
        b = frame.b
        if isinstance(obj, ArrayShape):
            bounds = (index.start, index.stop, index.step) if isinstance(index, slice) else ()
            if bounds and not any(is_runtime(v) for v in bounds):
                return tuple(self.dim(obj.handle, a) for a in range(obj.handle.rank)[index])
            if not isinstance(index, int):
                raise CompileError("x.shape must be indexed with a compile-time integer", b.loc)
            axis = semantics.normalize_axis(b, index, obj.handle.rank, "shape")
            return self.dim(obj.handle, axis)
        if isinstance(obj, Value):
            return semantics.subscript(b, obj, index)
        if isinstance(obj, ArrayHandle):
            raise CompileError(f"indexing the array argument '{obj.name}' is not supported; "
                               "use tj.load / tj.store", b.loc)
        if is_runtime(index):
            raise CompileError("tuples can only be indexed with compile-time integers "
                               "(use tj.static_range for the loop)", b.loc)
        try:
            return obj[index]
        except Exception as e:
            raise CompileError(f"{type(e).__name__} in compile-time expression: {e}", b.loc) from None

    # --- calls -----------------------------------------------------------------------------------------
    def call(self, frame, fn, args: list, kwargs: dict):
        b = frame.b
        if hasattr(fn, "__tilejit_builtin__"):
            return self.call_builtin(frame, fn, args, kwargs)
        if isinstance(fn, TjFunc) or getattr(fn, "__tilejit_func__", False):
            self._record_dep(frame, fn.fn.__qualname__, fn)
            return self.inline(frame, fn.fn, args, kwargs)
        if isinstance(fn, type) and issubclass(fn, BaseException):
            raise CompileError("`raise` is not supported in kernels", b.loc)
        if isinstance(fn, DType):
            return semantics.cast(b, *args, dtype=fn)
        if isinstance(fn, BoundMethod):
            return self.call_method(frame, fn, args, kwargs)
        all_const = not any(is_runtime(a) for a in list(args) + list(kwargs.values()))
        if any(fn is h for h in _HOST_HELPERS):
            return fn(*args, **kwargs) if all_const else self.inline(frame, fn, args, kwargs)
        py_builtin = next((n for n in _PY_BUILTINS if getattr(builtins, n) is fn), None)
        if py_builtin is not None:
            return getattr(self, "builtin_" + py_builtin)(frame, all_const, *args, **kwargs)
        if isinstance(fn, types.BuiltinFunctionType) and fn in _MATH_UNARY and not all_const:
            name = _MATH_UNARY[fn]
            if name in mathlib.BUILTINS:
                return mathlib.BUILTINS[name](b, *args)
            return semantics.unary(b, name, *args)
        if all_const and _is_pure_constant_call(fn):
            return _fold(b, fn, args, kwargs)
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        raise CompileError(f"call to {name}() is not supported in kernels" + _tile_twin(fn), b.loc)

    def call_builtin(self, frame, fn, args, kwargs):
        name = fn.__tilejit_builtin__
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise CompileError(f"tj.{name}(): {e}", frame.b.loc) from None
        bound.apply_defaults()
        if name in ("range", "static_range"):
            return self.make_range(frame, name, *bound.args, **bound.kwargs)
        if name == "reduce":
            return self.generic_reduce(frame, *bound.args, **bound.kwargs)
        if name == "associative_scan":
            return self.generic_scan(frame, *bound.args, **bound.kwargs)
        return BUILTINS[name](frame.b, *bound.args, **bound.kwargs)

    def generic_reduce(self, frame, x, axis, combine, keepdims=False):
        """``tj.reduce``: halve ``axis`` log2(n) times, combining each even element with the odd
        one after it by inlining ``combine`` (a tree that keeps left-to-right order, so an
        associative ``combine`` need not commute).  Each side of a pair is picked exactly: the
        other side is masked to the dtype's lowest value and a max over the size-2 axis keeps the
        picked one (-0.0 and NaN included)."""
        b = frame.b
        self._combine_check(frame, "reduce", x, combine)
        if not isinstance(keepdims, bool):
            raise CompileError("reduce: keepdims must be True or False", b.loc)
        axis = semantics.normalize_axis(b, axis, len(x.type.shape), "reduce")
        t = x
        while t.type.shape[axis] > 1:
            if t.type.shape[axis] % 2:
                raise CompileError(f"reduce: the reduced axis has {x.type.shape[axis]} elements; a combine "
                                   "function reduces a power-of-two axis", b.loc)
            t = self._combined(frame, "reduce", combine, *self._pairs(b, t, axis))
        return t if keepdims else semantics.reduce(b, ReduceKind.MAX, t, axis)

    def _combine_check(self, frame, what: str, x, combine):
        b = frame.b
        if not (isinstance(x, Value) and isinstance(x.type, TileType) and x.type.shape):
            raise CompileError(f"{what}: expected a tile, got {semantics.describe(x)}", b.loc)
        if not (isinstance(combine, TjFunc) or getattr(combine, "__tilejit_func__", False)):
            raise CompileError(f"{what}: combine must be a @tj.func of two tiles, got {semantics.describe(combine)}",
                               b.loc)
        self._record_dep(frame, combine.fn.__qualname__, combine)

    def _combined(self, frame, what: str, combine, a: Value, c: Value) -> Value:
        t = self.inline(frame, combine.fn, [a, c], {})
        if not (isinstance(t, Value) and isinstance(t.type, TileType) and t.type.shape == a.type.shape
                and t.type.dtype == a.type.dtype):
            raise CompileError(f"{what}: combine '{combine.fn.__name__}' must return one tile of its arguments' "
                               f"shape {a.type.shape} and dtype {a.type.dtype.name}, got {semantics.describe(t)}",
                               frame.b.loc)
        return t

    def generic_scan(self, frame, x, axis, combine, reverse=False):
        """``tj.associative_scan``: the inclusive scan of ``x`` along a power-of-two ``axis`` with
        ``combine`` (associative; it need not commute): neighbours are combined, the pairs are
        scanned (recursively), and each even element takes the previous pair's prefix, shifted
        one pair along by interleaving (log2(n) rounds each)."""
        b = frame.b
        self._combine_check(frame, "associative_scan", x, combine)
        if not isinstance(reverse, bool):
            raise CompileError("associative_scan: reverse must be True or False", b.loc)
        axis = semantics.normalize_axis(b, axis, len(x.type.shape), "associative_scan")
        n = x.type.shape[axis]
        if n & (n - 1):
            raise CompileError(f"associative_scan: the scanned axis has {n} elements; a combine function "
                               "scans a power-of-two axis", b.loc)
        return self._scan(frame, x, axis, combine, reverse)

    def _scan(self, frame, x: Value, axis: int, combine, reverse: bool) -> Value:
        b, n = frame.b, x.type.shape[axis]
        if n == 1:
            return x
        even, odd = self._pairs(b, x, axis)
        sums = self._scan(frame, self._combined(frame, "associative_scan", combine, even, odd), axis, combine, reverse)
        # forward: out[2i+1] = sums[i], out[2i] = sums[i-1] + x[2i] (x[0] at i = 0)
        # reverse: out[2i] = sums[i], out[2i+1] = x[2i+1] + sums[i+1] (x[n-1] at the last i)
        near = self._shift(b, sums, axis, -1 if not reverse else 1)
        lone = odd if reverse else even
        joined = self._combined(frame, "associative_scan", combine, *((near, lone) if not reverse else (lone, near)))
        index = semantics.arange(b, 0, n // 2)
        index = semantics.reshape(b, index, tuple(n // 2 if d == axis else 1 for d in range(len(x.type.shape))))
        edge = semantics.binary(b, "==", index, n // 2 - 1 if reverse else 0)
        part = semantics.where(b, edge, lone, joined)
        return self._interleave(b, sums, part, axis) if reverse else self._interleave(b, part, sums, axis)

    def _pairs(self, b, x: Value, axis: int) -> tuple[Value, Value]:
        """(x[..., 0::2, ...], x[..., 1::2, ...]) along ``axis``."""
        shape, n = x.type.shape, x.type.shape[axis]
        pair = semantics.reshape(b, x, shape[:axis] + (n // 2, 2) + shape[axis + 1:])
        return self._half(b, pair, axis + 1, 0), self._half(b, pair, axis + 1, 1)

    def _shift(self, b, x: Value, axis: int, by: int) -> Value:
        """``x`` moved one place along ``axis``: ``out[i] = x[i - 1]`` (``by`` = -1) or ``x[i + 1]``
        (1); the place left empty holds some element of ``x`` (the caller masks it)."""
        if x.type.shape[axis] == 1:
            return x
        even, odd = self._pairs(b, x, axis)
        if by < 0:          # out[2j+1] = x[2j], out[2j] = x[2j-1] = odd shifted back
            return self._interleave(b, self._shift(b, odd, axis, by), even, axis)
        return self._interleave(b, odd, self._shift(b, even, axis, by), axis)    # out[2j] = x[2j+1]

    @staticmethod
    def _interleave(b, first: Value, second: Value, axis: int) -> Value:
        """The tile whose even places along ``axis`` are ``first`` and odd ones ``second``."""
        shape, n = first.type.shape, first.type.shape[axis]
        wide = shape[:axis + 1] + (2,) + shape[axis + 1:]
        a = semantics.broadcast_to(b, semantics.expand_dims(b, first, axis + 1), wide)
        c = semantics.broadcast_to(b, semantics.expand_dims(b, second, axis + 1), wide)
        index = semantics.arange(b, 0, 2)
        index = semantics.reshape(b, index, tuple(2 if d == axis + 1 else 1 for d in range(len(wide))))
        both = semantics.where(b, semantics.binary(b, "==", index, 0), a, c)
        return semantics.reshape(b, both, shape[:axis] + (2 * n,) + shape[axis + 1:])

    @staticmethod
    def _half(b, pair: Value, axis: int, k: int) -> Value:
        """Side ``k`` of ``pair`` along its size-2 dim ``axis``, exactly."""
        dt = pair.type.dtype
        lowest = False if dt.is_bool else -math.inf if dt.is_float else int(np.iinfo(dt.np).min)
        index = semantics.arange(b, 0, 2)
        index = semantics.reshape(b, index, tuple(2 if d == axis else 1 for d in range(len(pair.type.shape))))
        keep = semantics.binary(b, "==", index, k)
        return semantics.reduce(b, ReduceKind.MAX, semantics.where(b, keep, pair, lowest), axis)

    def call_method(self, frame, method: BoundMethod, args, kwargs):
        b, obj, name = frame.b, method.obj, method.name
        if name == "reshape":
            kwargs = dict(kwargs)
            reorder = kwargs.pop("can_reorder", False)      # Triton's: any order is allowed, and
            if not isinstance(reorder, bool):               # tilejit keeps row-major order
                raise CompileError("t.reshape(): can_reorder must be True or False", b.loc)
            if "shape" in kwargs:
                if args:
                    raise CompileError("t.reshape(): give the shape once", b.loc)
                args = (kwargs.pop("shape"),)
            if kwargs or not args:
                what = f"unexpected keyword argument '{next(iter(kwargs))}'" if kwargs else "no shape given"
                raise CompileError(f"t.reshape(): {what}", b.loc)
            return semantics.reshape(b, obj, args[0] if len(args) == 1 else tuple(args))
        if name in ("to", "astype"):
            target, lead = semantics.cast, (b, obj)
        elif name in ("max", "min", "sum", "argmax", "argmin"):
            target, lead = semantics.reduce, (b, ReduceKind(name), obj)
        else:
            target, lead = BUILTINS[name], (b, obj)
        try:                             # a wrong call is the user's error, never a raw TypeError
            inspect.signature(target).bind(*lead, *args, **kwargs)
        except TypeError as e:
            raise CompileError(f"t.{name}(): {e}", b.loc) from None
        return target(*lead, *args, **kwargs)

    def inline(self, frame, pyfn, args, kwargs):
        """Trace a ``tj.func`` (or host helper) body in the caller's block with its own locals."""
        sig = inspect.signature(pyfn)
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
            raise CompileError(f"tj.func '{pyfn.__name__}' cannot take *args or **kwargs", frame.b.loc)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise CompileError(f"{pyfn.__name__}(): {e}", frame.b.loc) from None
        bound.apply_defaults()
        if pyfn in self.inlining:
            raise CompileError(f"tj.func '{pyfn.__name__}' is recursive (it calls itself, directly or "
                               "through other tj.funcs); device functions are inlined", frame.b.loc)
        if self.inline_depth >= _MAX_INLINE_DEPTH:
            raise CompileError(f"tj.func calls are nested more than {_MAX_INLINE_DEPTH} deep", frame.b.loc)
        self.inline_depth += 1
        self.inlining.append(pyfn)
        try:
            return self.run(CodeInfo(pyfn, is_kernel=False), dict(bound.arguments), frame.b.block)
        finally:
            self.inline_depth -= 1
            self.inlining.pop()

    def make_range(self, frame, name, start, stop=None, step=1, stages=None):
        """``stages=None`` (a plain ``range``, or ``tj.range`` without it): the compiler picks the
        pipeline depth (ForAttrs.stages 0); ``stages=1`` turns pipelining off."""
        b = frame.b
        if stop is None:
            start, stop = 0, start
        for v in (start, stop, step):
            if isinstance(v, Value) and (v.type.shape != () or v.type.dtype.is_float):
                raise CompileError(f"{name}() bounds must be integer scalars, got {v.type}", b.loc)
            if not isinstance(v, (int, Value)):
                raise CompileError(f"{name}() bounds must be integers, got {semantics.describe(v)}", b.loc)
        if isinstance(step, int) and step == 0:
            raise CompileError(f"{name}() step must not be zero", b.loc)
        if stages is None:
            stages = 0
        elif not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
            raise CompileError("tj.range(): stages must be a positive compile-time integer", b.loc)
        if name == "static_range":
            if any(isinstance(v, Value) for v in (start, stop, step)):
                raise CompileError("tj.static_range() bounds must be compile-time constants", b.loc)
            count = len(range(start, stop, step))
            if count > MAX_STATIC_ITERATIONS:
                raise CompileError(f"tj.static_range() would unroll {count} iterations (at most "
                                   f"{MAX_STATIC_ITERATIONS}); use range() or tj.range() for a runtime loop",
                                   b.loc)
            return StaticIter(tuple(range(start, stop, step)))
        return RangeSpec(start, stop, step, stages)

    # --- Python builtins ----------------------------------------------------------------------------------
    def builtin_range(self, frame, all_const, *args):
        return self.make_range(frame, "range", *args)

    def builtin_len(self, frame, all_const, x):
        if isinstance(x, ArrayShape):
            return x.handle.rank
        if isinstance(x, Value) and x.type.shape:
            return x.type.shape[0]
        if isinstance(x, (tuple, list, str, StaticIter)):
            return len(x.items) if isinstance(x, StaticIter) else len(x)
        raise CompileError(f"len() of {semantics.describe(x)} is not supported", frame.b.loc)

    def _min_max(self, frame, all_const, which, args):
        if len(args) == 1 and isinstance(args[0], tuple):
            args = args[0]
        if all_const:
            return _fold(frame.b, builtins.min if which == "minimum" else builtins.max, args, {})
        out = args[0]
        for a in args[1:]:
            out = semantics.binary(frame.b, which, out, a)
        return out

    def builtin_min(self, frame, all_const, *args):
        return self._min_max(frame, all_const, "minimum", args)

    def builtin_max(self, frame, all_const, *args):
        return self._min_max(frame, all_const, "maximum", args)

    def builtin_abs(self, frame, all_const, x):
        return builtins.abs(x) if all_const else semantics.unary(frame.b, "abs", x)

    def builtin_float(self, frame, all_const, x=0.0):
        return _fold(frame.b, float, [x], {}) if all_const else semantics.cast(frame.b, _scalar(frame, x, "float"),
                                                                               dtypes.float32)

    def builtin_int(self, frame, all_const, x=0):
        return _fold(frame.b, int, [x], {}) if all_const else semantics.cast(frame.b, _scalar(frame, x, "int"),
                                                                             dtypes.int32)

    def builtin_bool(self, frame, all_const, x=False):
        return bool(x) if all_const else semantics.condition(frame.b, x)

    def builtin_isinstance(self, frame, all_const, x, cls):
        return isinstance(x, cls)

    def builtin_tuple(self, frame, all_const, x=()):
        if isinstance(x, ArrayShape):
            return tuple(self.dim(x.handle, a) for a in range(x.handle.rank))
        if isinstance(x, (tuple, list, str, range)):
            return tuple(x)
        raise CompileError(f"tuple() of {semantics.describe(x)} is not supported", frame.b.loc)

    def builtin_print(self, frame, all_const, *args, **kwargs):
        raise CompileError("call to print() is not supported in kernels", frame.b.loc)


def _from_numpy_scalar(value):
    return value.item() if isinstance(value, np.generic) else value


def _is_pure_constant_call(fn) -> bool:
    """Functions safe to evaluate at compile time on constant arguments."""
    if getattr(fn, "__module__", None) == "math":
        return True
    owner = getattr(fn, "__self__", None)
    return isinstance(owner, _CONST_METHOD_TYPES) and not isinstance(owner, types.ModuleType)


def _fold(b, fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise CompileError(f"{type(e).__name__} in compile-time expression: {e}", b.loc) from None


def _public_language_names() -> list[str]:
    return [n for n in dir(language) if not n.startswith("_")] + [d.name for d in dtypes.ALL]


def _did_you_mean(obj, name: str) -> str:
    """`` (did you mean tj.exp?)`` for a misspelled name of the tilejit module, else ''."""
    if not (isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] == "tilejit"):
        return ""
    import difflib
    close = difflib.get_close_matches(name, _public_language_names(), n=2, cutoff=0.75)
    return f" (did you mean {' or '.join('tj.' + c for c in close)}?)" if close else ""


def _tile_twin(fn) -> str:
    """``: use tj.exp`` for a NumPy or math function whose tile version tilejit has, else ''."""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "")
    if (isinstance(fn, np.ufunc) or module.split(".")[0] in ("numpy", "math")) and hasattr(language, name):
        return f": use tj.{name}, which works on tiles"
    return ""
