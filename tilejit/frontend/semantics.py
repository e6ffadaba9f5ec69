"""Typed builders for every ``tj`` builtin and Python operator on tiles and runtime scalars.

Each builder takes an ``ir.Builder`` (whose ``loc`` is the user's source position) and operands
that are IR ``Value``s or Python numbers, infers the result shape (NumPy broadcasting) and dtype
(``tilejit.dtypes`` promotion; Python numbers are weak, NEP 50), inserts the SPLAT / RESHAPE /
BROADCAST / CAST ops the IR contract requires, and raises ``CompileError`` for shape and dtype
mistakes.  Reductions: ``sum`` of bool or integers narrower than 32 bits gives int32, otherwise
the input dtype; ``max``/``min`` keep the dtype; ``argmax``/``argmin`` give int32.
"""
from __future__ import annotations

import functools
import math

from tilejit import dtypes, ir
from tilejit.dtypes import DType
from tilejit.errors import CompileError
from tilejit.ir import (AxisAttrs, Builder, ConstAttrs, DotAttrs, LoadAttrs, PermAttrs, StoreAttrs,
                        ReduceAttrs, ReduceKind, TileOp, TileType, Value)

BINARY = {"+": TileOp.ADD, "-": TileOp.SUB, "*": TileOp.MUL, "/": TileOp.TRUEDIV,
          "//": TileOp.FLOORDIV, "%": TileOp.MOD, "**": TileOp.POW, "&": TileOp.AND, "|": TileOp.OR,
          "^": TileOp.XOR, "<<": TileOp.SHL, ">>": TileOp.SHR, "maximum": TileOp.MAXIMUM,
          "minimum": TileOp.MINIMUM}
COMPARE = {"==": TileOp.EQ, "!=": TileOp.NE, "<": TileOp.LT, "<=": TileOp.LE, ">": TileOp.GT,
           ">=": TileOp.GE}
PREDICATES = {"isnan": TileOp.ISNAN, "isinf": TileOp.ISINF, "isfinite": TileOp.ISFINITE}
_BITWISE = {"&", "|", "^", "<<", ">>"}
_ARITH = {"+", "-", "*", "/", "//", "%", "**"}
FLOAT_UNARY = {"exp": TileOp.EXP, "exp2": TileOp.EXP2, "log": TileOp.LOG, "log2": TileOp.LOG2,
               "sqrt": TileOp.SQRT, "rsqrt": TileOp.RSQRT, "sin": TileOp.SIN, "cos": TileOp.COS,
               "tanh": TileOp.TANH, "sigmoid": TileOp.SIGMOID, "erf": TileOp.ERF, "floor": TileOp.FLOOR, "ceil": TileOp.CEIL,
               "trunc": TileOp.TRUNC, "round": TileOp.ROUND}


def fail(b: Builder, message: str):
    raise CompileError(message, b.loc)


class ArrayHandle:
    """A kernel array argument as the tracer sees it: its block argument and parameter name."""

    def __init__(self, value: Value, name: str, large: bool = False):
        self.value, self.name = value, name
        self.large = large          # spans 2**31 elements or more: its sizes are int64

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def rank(self) -> int:
        return self.value.type.rank


def is_number(x) -> bool:
    return isinstance(x, (bool, int, float))


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of tile shapes; ValueError when they are incompatible."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"cannot broadcast {shapes}")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


MAX_TILE_ELEMENTS = 1 << 20        # as Triton: larger tiles cannot live in one CTA's registers


def const_shape(b: Builder, shape, what: str) -> tuple[int, ...]:
    """A tile shape given as an int or a tuple of ints known at compile time."""
    items = shape if isinstance(shape, (tuple, list)) else (shape,)
    numel = 1
    for s in items:
        if isinstance(s, Value):
            fail(b, f"{what}: tile shape must be compile-time constant, got {describe(s)} "
                    "(use a tj.constexpr parameter)")
        if not isinstance(s, int) or isinstance(s, bool):
            fail(b, f"{what}: tile dimensions must be ints, got {type(s).__name__} {s!r}")
        if s <= 0:
            fail(b, f"{what}: tile dimensions must be positive, got {tuple(items)}")
        numel *= s
    if numel > MAX_TILE_ELEMENTS:
        fail(b, f"{what}: a tile of shape {tuple(items)} is too large ({numel} elements; "
                f"tiles hold at most {MAX_TILE_ELEMENTS})")
    return tuple(items)


def normalize_axis(b: Builder, axis, rank: int, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        fail(b, f"{what}: axis must be a compile-time integer, got {describe(axis)}")
    if not -rank <= axis < rank:
        fail(b, f"{what}: axis {axis} is out of range for a rank-{rank} tile")
    return axis % rank


# --- operands -----------------------------------------------------------------------------------
def constant(b: Builder, value, type: TileType) -> Value:
    """A CONSTANT of ``type`` holding the Python number ``value`` (checked to be representable)."""
    dt = type.dtype
    if not dtypes.fits(value, dt) or (not dt.is_float and isinstance(value, float)
                                       and not (math.isfinite(value) and value == int(value))):
        fail(b, f"the value {value!r} cannot be represented as {dt}")
    v = bool(value) if dt.is_bool else float(value) if dt.is_float else int(value)
    return b.create(TileOp.CONSTANT, (), [type], ConstAttrs(v)).result


def shape_of(x) -> tuple[int, ...]:
    return x.type.shape if isinstance(x, Value) else ()


def _check_operand(b: Builder, x, what: str):
    if isinstance(x, Value) and isinstance(x.type, TileType):
        return
    if not is_number(x):
        fail(b, f"{what}: expected a tile, a scalar or a number, got {describe(x)}")


def describe(x) -> str:
    if isinstance(x, ArrayHandle):
        return f"the array argument '{x.name}' (load a tile from it first)"
    if isinstance(x, Value):
        return str(x.type)
    return f"{type(x).__name__} {x!r}"


def result_dtype(b: Builder, operands) -> DType:
    """Promoted dtype of strong operands (Values) and weak Python numbers (NEP 50)."""
    strong = [x.type.dtype for x in operands if isinstance(x, Value)]
    weak = [x for x in operands if not isinstance(x, Value)]
    if strong:
        dt = functools.reduce(dtypes.promote, strong)
    else:
        dt = functools.reduce(dtypes.promote, [dtypes.python_scalar_dtype(w) for w in weak])
    for w in weak:
        dt = dtypes.weak_promote(dt, w)
    for w in weak:
        if not isinstance(w, float) and not dtypes.fits(w, dt):
            fail(b, f"the Python integer {w} does not fit in {dt}")
    return dt


def convert(b: Builder, x, dtype: DType, shape: tuple[int, ...]) -> Value:
    """``x`` (Value or number) as a Value of exactly ``tile<shape x dtype>``: CAST, then
    SPLAT (scalar), RESHAPE (prepend unit dims) and BROADCAST (unit dims -> n) as needed."""
    if not isinstance(x, Value):
        return constant(b, x, TileType(shape, dtype))
    if x.type.dtype != dtype:
        x = b.create(TileOp.CAST, [x], [TileType(x.type.shape, dtype)]).result
    src = x.type.shape
    if src == shape:
        return x
    if src == ():
        return b.create(TileOp.SPLAT, [x], [TileType(shape, dtype)]).result
    if len(src) < len(shape):
        src = (1,) * (len(shape) - len(src)) + src
        x = b.create(TileOp.RESHAPE, [x], [TileType(src, dtype)]).result
    if src != shape:
        x = b.create(TileOp.BROADCAST, [x], [TileType(shape, dtype)]).result
    return x


def _broadcast(b: Builder, *shapes) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*shapes)
    except ValueError:
        fail(b, "cannot broadcast shapes " + " and ".join(str(s) for s in shapes))


# --- elementwise ----------------------------------------------------------------------------------
def binary(b: Builder, op: str, x, y) -> Value:
    """``x <op> y`` for an arithmetic, bitwise, comparison or maximum/minimum operator."""
    for v in (x, y):
        _check_operand(b, v, f"operator {op}")
    shape = _broadcast(b, shape_of(x), shape_of(y))
    dt = result_dtype(b, [x, y])
    if op in _BITWISE and dt.is_float:
        fail(b, f"operator {op} needs integer or bool operands, got {dt}")
    if (op in _ARITH or op in ("<<", ">>")) and dt.is_bool:
        fail(b, f"operator {op} is not defined on bool operands; cast them first")
    if op == "**" and not dt.is_float and isinstance(y, (int, float)) and not isinstance(y, bool) and y < 0:
        fail(b, f"integer ** {y}: a negative exponent gives a fraction (Python returns a float); "
                "use a float base, e.g. x.to(tj.float32) ** " + str(y))
    if op == "/":
        dt = dtypes.float_result(dt)
    if dt == dtypes.float64 and op == "**":
        if isinstance(y, (int, float)) and not isinstance(y, bool) and y in FLOAT64_POWERS:
            return _float64_power(b, convert(b, x, dt, shape), y)
        fail(b, "float64 ** of a tile or of a constant but 0, 1, 2, -1, 0.5 is mathlib.power's")
    xv, yv = convert(b, x, dt, shape), convert(b, y, dt, shape)
    if op in COMPARE:
        return b.create(COMPARE[op], [xv, yv], [TileType(shape, dtypes.bool_)]).result
    return b.create(BINARY[op], [xv, yv], [TileType(shape, dt)]).result


# constant exponents float64 ``**`` has (NumPy's exact fast paths for them)
FLOAT64_POWERS = (0, 1, 2, -1, 0.5)


def _float64_power(b: Builder, x: Value, y) -> Value:
    """``x ** y`` for a constant ``y`` in FLOAT64_POWERS as NumPy's ``power`` computes it (its fast
    paths): x * x, 1 / x and sqrt (-0 for -0, NaN for -inf), each rounded once; 1 and x."""
    if y == 0:
        return convert(b, 1.0, dtypes.float64, x.type.shape)       # 1 for NaN too, as pow gives
    if y == 1:
        return x
    if y == 2:
        return binary(b, "*", x, x)
    if y == -1:
        return binary(b, "/", 1.0, x)
    return unary(b, "sqrt", x)                                      # NumPy's power(x, 0.5) is sqrt


def to_bool(b: Builder, x) -> Value:
    """A bool Value for a runtime condition (non-bool scalars compare against zero)."""
    if isinstance(x, Value) and isinstance(x.type, TileType) and x.type.dtype.is_bool:
        return x
    if not isinstance(x, Value):
        return constant(b, bool(x), TileType((), dtypes.bool_))
    return binary(b, "!=", x, 0)


def condition(b: Builder, x) -> Value:
    """A scalar bool for ``if``/``while``; a tile's truth value is ambiguous."""
    if isinstance(x, Value) and x.type.shape != ():
        fail(b, f"the truth value of a {x.type} is ambiguous: conditions must be scalars "
                "(use tj.where for elementwise choice)")
    _check_operand(b, x, "condition")
    return to_bool(b, x)


def unary(b: Builder, op: str, x) -> Value:
    """``-x``, ``~x``, ``not x``, ``+x`` and the float math functions (``exp``, ...)."""
    _check_operand(b, x, f"{op}()")
    if not isinstance(x, Value):
        x = convert(b, x, dtypes.python_scalar_dtype(x), ())
    dt, shape = x.type.dtype, x.type.shape
    if op == "+":
        return x
    if op == "not":
        return binary(b, "==", condition(b, x), False)
    if op == "-":
        if dt.is_bool:
            fail(b, "unary - is not defined on bool; use ~ or `not`")
        return b.create(TileOp.NEG, [x], [x.type]).result
    if op == "~":
        if dt.is_float:
            fail(b, f"operator ~ needs integer or bool operands, got {dt}")
        return b.create(TileOp.INVERT, [x], [x.type]).result
    if op == "abs":
        return x if dt.is_bool else b.create(TileOp.ABS, [x], [x.type]).result
    out = dtypes.float_result(dt)
    if out == dtypes.float64 and op not in _FLOAT64_UNARY:
        _no_float64(b, f"tj.{op}")
    x = convert(b, x, out, shape)
    return b.create(FLOAT_UNARY[op], [x], [TileType(shape, out)]).result


# float64 tiles have IEEE arithmetic, comparisons, casts, reductions and these exact functions;
# the transcendental ones (float32 polynomials in codegen) are not written for float64 yet
_FLOAT64_UNARY = {"sqrt", "floor", "ceil", "trunc", "round", "sin", "cos"}


def _no_float64(b: Builder, what: str):
    fail(b, f"{what} is not supported for float64 tiles yet (float64 has + - * / // %, comparisons, "
            f"fma, sqrt, sin, cos, exp, exp2, log, log2, log1p, expm1, sinh, cosh, tanh, sigmoid, erf, abs, "
            f"floor/ceil/trunc/round, maximum/minimum, reductions and casts); "
            f"compute it in float32 with .to(tj.float32)")


def clamp(b: Builder, x, lo, hi) -> Value:
    """``np.clip(x, lo, hi)``: maximum then minimum, NaN propagating as theirs does."""
    return binary(b, "minimum", binary(b, "maximum", x, lo), hi)


def predicate(b: Builder, name: str, x) -> Value:
    """``isnan`` / ``isinf`` / ``isfinite``: a bool tile; integer and bool values are never NaN
    or infinite, so theirs is a constant."""
    _check_operand(b, x, f"{name}()")
    if not isinstance(x, Value):
        x = convert(b, x, dtypes.python_scalar_dtype(x), ())
    out = TileType(x.type.shape, dtypes.bool_)
    if not x.type.dtype.is_float:
        return constant(b, name == "isfinite", out)
    return b.create(PREDICATES[name], [x], [out]).result


def where(b: Builder, cond, x, y) -> Value:
    for v in (cond, x, y):
        _check_operand(b, v, "where")
    shape = _broadcast(b, shape_of(cond), shape_of(x), shape_of(y))
    dt = result_dtype(b, [x, y])
    c = convert(b, to_bool(b, cond), dtypes.bool_, shape)
    xv, yv = convert(b, x, dt, shape), convert(b, y, dt, shape)
    return b.create(TileOp.WHERE, [c, xv, yv], [TileType(shape, dt)]).result


def fma(b: Builder, x, y, z) -> Value:
    for v in (x, y, z):
        _check_operand(b, v, "fma")
    shape = _broadcast(b, shape_of(x), shape_of(y), shape_of(z))
    dt = result_dtype(b, [x, y, z])
    args = [convert(b, v, dt, shape) for v in (x, y, z)]
    return b.create(TileOp.FMA, args, [TileType(shape, dt)]).result


def cast(b: Builder, x, dtype, bitcast=False) -> Value:
    if not isinstance(bitcast, bool):
        fail(b, "cast: bitcast must be True or False")
    if bitcast:
        return bitcast_to(b, x, dtype)
    _check_operand(b, x, "cast")
    dt = _dtype_arg(b, dtype, "cast")
    return convert(b, x, dt, shape_of(x))


def bitcast_to(b: Builder, x, dtype) -> Value:
    """``x``'s bits reinterpreted as ``dtype`` (same width; bool has no bit pattern to share)."""
    if not isinstance(x, Value):
        fail(b, f"bitcast: expected a tile or a runtime scalar, got {describe(x)}")
    dt = _dtype_arg(b, dtype, "bitcast")
    src = x.type.dtype
    if src.is_bool or dt.is_bool or src.bits != dt.bits:
        fail(b, f"bitcast: {src} ({src.bits} bits) and {dt} ({dt.bits} bits) must be non-bool types of one width")
    if src == dt:
        return x
    return b.create(TileOp.BITCAST, [x], [TileType(x.type.shape, dt)]).result


def _dtype_arg(b: Builder, dtype, what: str) -> DType:
    try:
        return dtypes.lookup(dtype)
    except (TypeError, KeyError):
        fail(b, f"{what}: {dtype!r} is not a tilejit dtype")


# --- creation -----------------------------------------------------------------------------------
def program_id(b: Builder, axis) -> Value:
    return _grid_query(b, TileOp.PROGRAM_ID, axis, "program_id")


def num_programs(b: Builder, axis) -> Value:
    return _grid_query(b, TileOp.NUM_PROGRAMS, axis, "num_programs")


def _grid_query(b: Builder, op: TileOp, axis, what: str) -> Value:
    if not isinstance(axis, int) or isinstance(axis, bool) or axis not in (0, 1, 2):
        fail(b, f"{what}: axis must be the constant 0, 1 or 2, got {describe(axis)}")
    return b.create(op, (), [TileType((), dtypes.int32)], AxisAttrs(axis)).result


def zeros(b: Builder, shape, dtype=dtypes.float32) -> Value:
    return full(b, shape, 0, dtype)


def full(b: Builder, shape, value, dtype=None) -> Value:
    shape = const_shape(b, shape, "full")
    _check_operand(b, value, "full")
    if dtype is None:
        dt = value.type.dtype if isinstance(value, Value) else dtypes.python_scalar_dtype(value)
    else:
        dt = _dtype_arg(b, dtype, "full")
    if isinstance(value, Value) and value.type.shape != ():
        fail(b, f"full: the fill value must be a scalar, got {value.type}")
    return convert(b, value, dt, shape)


def arange(b: Builder, start, end=None) -> Value:
    if end is None:
        start, end = 0, start
    for v in (start, end):
        if not isinstance(v, int) or isinstance(v, bool):
            fail(b, "arange: bounds must be compile-time integers (add a runtime offset "
                    "to the result instead)")
    if end <= start:
        fail(b, f"arange: empty range ({start}, {end})")
    return b.create(TileOp.ARANGE, (), [TileType((end - start,), dtypes.int32)],
                    ConstAttrs(start)).result


# --- shape ----------------------------------------------------------------------------------------
def _tile(b: Builder, x, what: str) -> Value:
    if not (isinstance(x, Value) and isinstance(x.type, TileType)):
        fail(b, f"{what}: expected a tile, got {describe(x)}")
    return x


def reshape(b: Builder, x, shape) -> Value:
    x = _tile(b, x, "reshape")
    shape = list(shape if isinstance(shape, (tuple, list)) else (shape,))
    if shape.count(-1) == 1:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = x.type.numel // known if known else 0
    shape = const_shape(b, tuple(shape), "reshape")
    if math.prod(shape) != x.type.numel:
        fail(b, f"cannot reshape a tile of shape {x.type.shape} into {shape}")
    if shape == x.type.shape:
        return x
    op = TileOp.SPLAT if x.type.shape == () else TileOp.RESHAPE
    return b.create(op, [x], [TileType(shape, x.type.dtype)]).result


def expand_dims(b: Builder, x, axis) -> Value:
    x = _tile(b, x, "expand_dims")
    shape = list(x.type.shape)
    axis = normalize_axis(b, axis, len(shape) + 1, "expand_dims")
    shape.insert(axis, 1)
    return reshape(b, x, tuple(shape))


def broadcast_to(b: Builder, x, shape) -> Value:
    _check_operand(b, x, "broadcast_to")
    shape = const_shape(b, shape, "broadcast_to")
    if _broadcast(b, shape_of(x), shape) != shape:
        fail(b, f"cannot broadcast a tile of shape {shape_of(x)} to {shape}")
    dt = x.type.dtype if isinstance(x, Value) else dtypes.python_scalar_dtype(x)
    return convert(b, x, dt, shape)


def trans(b: Builder, x, *perm) -> Value:
    return _permute_axes(b, x, perm, "trans")


def _permute_axes(b: Builder, x, perm: tuple, what: str) -> Value:
    x = _tile(b, x, what)
    rank = len(x.type.shape)
    if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
        perm = tuple(perm[0])
    perm = tuple(perm) or tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)) or not all(isinstance(p, int) for p in perm):
        fail(b, f"{what}: {perm} is not a permutation of the axes of a rank-{rank} tile")
    if perm == tuple(range(rank)):
        return x
    shape = tuple(x.type.shape[p] for p in perm)
    return b.create(TileOp.TRANS, [x], [TileType(shape, x.type.dtype)], PermAttrs(perm)).result


def permute(b: Builder, x, *dims) -> Value:
    """``tj.permute(t, (1, 0))`` / ``t.permute(1, 0)`` (Triton's and torch's spelling): ``trans``
    with the new order of the axes given."""
    if not dims:
        fail(b, "permute: give the new order of the axes, e.g. tj.permute(t, (1, 0))")
    return _permute_axes(b, x, dims, "permute")


def subscript(b: Builder, x, index) -> Value:
    """``t[:, None]``, ``t[None, :]``, ``t[..., None]``: insert unit dimensions."""
    x = _tile(b, x, "indexing")
    items = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in items) > 1:
        fail(b, "an index can only have a single ellipsis ('...')")
    src, out = list(x.type.shape), []
    for k, i in enumerate(items):
        if i is None:
            out.append(1)
        elif i is Ellipsis:
            n = len(src) - sum(isinstance(j, slice) for j in items[k + 1:])   # the dims it stands for
            out.extend(src[:n])
            del src[:n]
        elif isinstance(i, slice) and i == slice(None):
            if not src:
                fail(b, f"too many indices for a tile of shape {x.type.shape}")
            out.append(src.pop(0))
        elif isinstance(i, slice):
            fail(b, "slicing a tile with bounds is not supported (only ':' and None)")
        else:
            fail(b, f"indexing a tile with {describe(i)} is not supported (only ':' and None)")
    return reshape(b, x, tuple(out + src))


# --- reductions and matmul ------------------------------------------------------------------------
def _reduce_dtype(kind: ReduceKind, dt: DType) -> DType:
    if kind in (ReduceKind.ARGMAX, ReduceKind.ARGMIN):
        return dtypes.int32
    if kind == ReduceKind.SUM and (dt.is_bool or (dt.is_int and dt.bits < 32)):
        return dtypes.int32
    return dt


def reduce(b: Builder, kind: ReduceKind, x, axis=None, keepdims=False) -> Value:
    what = kind.value
    if not (isinstance(x, Value) and isinstance(x.type, TileType)):
        fail(b, f"{what}: expected a tile, got {describe(x)}")
    if not isinstance(keepdims, bool):
        fail(b, f"{what}: keepdims must be a compile-time bool")
    shape = x.type.shape
    out_dt = _reduce_dtype(kind, x.type.dtype)
    if axis is None:
        if shape == ():
            return convert(b, x, out_dt, ())
        flat = reshape(b, x, (x.type.numel,)) if len(shape) > 1 else x
        total = b.create(TileOp.REDUCE, [flat], [TileType((), out_dt)], ReduceAttrs(kind, 0)).result
        return convert(b, total, out_dt, (1,) * len(shape)) if keepdims else total
    if shape == ():
        fail(b, f"{what}: cannot reduce a scalar along axis {axis}")
    axis = normalize_axis(b, axis, len(shape), what)
    out = shape[:axis] + ((1,) if keepdims else ()) + shape[axis + 1:]
    return b.create(TileOp.REDUCE, [x], [TileType(out, out_dt)],
                    ReduceAttrs(kind, axis, keepdims)).result


def scan(b: Builder, kind: str, x, axis=0, reverse=False) -> Value:
    """``tj.cumsum`` / ``tj.cumprod``: running sums or products along ``axis``."""
    what = f"cum{kind}"
    if not (isinstance(x, Value) and isinstance(x.type, TileType)) or x.type.shape == ():
        fail(b, f"{what}: expected a tile, got {describe(x)}")
    if not isinstance(reverse, bool):
        fail(b, f"{what}: reverse must be a compile-time bool")
    axis = normalize_axis(b, axis, len(x.type.shape), what)
    dt = x.type.dtype
    out = dtypes.int32 if dt.is_bool or (dt.is_int and dt.bits < 32) else dtypes.float32 if dt.is_float and dt.bits < 32 else dt
    x = convert(b, x, out, x.type.shape)
    return b.create(TileOp.SCAN, [x], [x.type], ir.ScanAttrs(kind, axis, reverse)).result


def sort(b: Builder, x, axis=-1, descending=False) -> Value:
    """``tj.sort``: the values sorted along ``axis`` (a SCAN of kind "sort")."""
    if not (isinstance(x, Value) and isinstance(x.type, TileType)) or x.type.shape == ():
        fail(b, f"sort: expected a tile, got {describe(x)}")
    if not isinstance(descending, bool):
        fail(b, "sort: descending must be a compile-time bool")
    if x.type.dtype.is_bool:
        x = convert(b, x, dtypes.int32, x.type.shape)
    axis = normalize_axis(b, axis, len(x.type.shape), "sort")
    return b.create(TileOp.SCAN, [x], [x.type], ir.ScanAttrs("sort", axis, descending)).result


def dot(b: Builder, a, bm, acc=None, allow_tf32=False) -> Value:
    a, bm = _tile(b, a, "dot"), _tile(b, bm, "dot")
    if len(a.type.shape) != 2 or len(bm.type.shape) != 2:
        fail(b, f"dot: operands must be 2-D tiles, got {a.type} and {bm.type}")
    (m, k), (k2, n) = a.type.shape, bm.type.shape
    if k != k2:
        fail(b, f"dot: K mismatch ({k} vs {k2})")
    da, db = a.type.dtype, bm.type.dtype
    if da != db:
        fail(b, f"dot: operand dtypes differ ({da} and {db}); cast one of them")
    if da.is_int and da.bits == 8:
        acc_dt = dtypes.int32
    elif da == dtypes.float64:
        acc_dt = dtypes.float64
    elif da.is_float:
        acc_dt = dtypes.float32
    else:
        fail(b, f"dot: {da} operands are not supported (use float16, bfloat16, float32, float64 or int8)")
    if not isinstance(allow_tf32, bool):
        fail(b, "dot: allow_tf32 must be a compile-time bool")
    out = TileType((m, n), acc_dt)
    if acc is None:
        acc = constant(b, 0, out)
    elif not isinstance(acc, Value) or acc.type != out:
        fail(b, f"dot: acc must be a {out}, got {describe(acc)}")
    return b.create(TileOp.DOT, [a, bm, acc], [out], DotAttrs(allow_tf32)).result


def dot_scaled(b: Builder, a, a_scale, bm, b_scale, acc=None) -> Value:
    """``acc + (a @ b) * (a_scale * b_scale)`` in float32, the add fused with the multiply (one
    rounding, DeepGEMM's promotion): the product of one K block of block-scaled operands (fp8
    with DeepSeek-style 1x128 activation and 128x128 weight scales, say), with ``a_scale``
    broadcasting to (M, 1) (a row's scale for this block) and ``b_scale`` to (1, N) (a column's,
    or one number for the block).  The tensor cores multiply the raw operands; the scales apply
    to the float32 product, so a K tile must not straddle two scale blocks (the caller loads the
    scales of the block the tile is in)."""
    a_t, b_t = _tile(b, a, "dot_scaled"), _tile(b, bm, "dot_scaled")
    if not a_t.type.dtype.is_float:
        fail(b, f"dot_scaled: the operands must be floating point (e.g. float8e4m3), got {a_t.type.dtype}")
    product = dot(b, a_t, b_t)
    m, n = product.type.shape
    scales = []
    for scale, want, what in ((a_scale, (m, 1), "a_scale"), (b_scale, (1, n), "b_scale")):
        _check_operand(b, scale, "dot_scaled")
        if isinstance(scale, Value) and (scale.type.dtype.is_bool or not _broadcasts(shape_of(scale), want)):
            fail(b, f"dot_scaled: {what} must be a number or a float tile that broadcasts to {want}, "
                    f"got {describe(scale)}")
        if isinstance(scale, Value):      # kept (M, 1) / (1, 1) where it is: scaled once per row, not per element
            keep = len(shape_of(scale)) == 2
            scale = convert(b, scale, dtypes.float32, shape_of(scale) if keep else want)
        scales.append(scale if isinstance(scale, Value) else float(scale))
    # (M, 1), (1, N) or (M, N): one multiply per row or column where a scale is one number
    scale = scales[0] * scales[1] if all(isinstance(x, float) for x in scales) else binary(b, "*", *scales)
    if acc is None:
        return binary(b, "*", product, scale)
    if not isinstance(acc, Value) or acc.type != product.type:
        fail(b, f"dot_scaled: acc must be a {product.type}, got {describe(acc)}")
    return fma(b, product, scale, acc)


def _broadcasts(shape: tuple, want: tuple) -> bool:
    try:
        return broadcast_shapes(shape, want) == tuple(want)
    except ValueError:
        return False


# --- memory ---------------------------------------------------------------------------------------
def _array(b: Builder, x, what: str) -> ArrayHandle:
    if not isinstance(x, ArrayHandle):
        fail(b, f"{what}: the first argument must be an array argument of the kernel, got {describe(x)}")
    return x


def _offsets(b: Builder, arr: ArrayHandle, offsets, what: str) -> list[Value]:
    items = tuple(offsets) if isinstance(offsets, (tuple, list)) else (offsets,)
    if len(items) != arr.rank:
        fail(b, f"{what}: {len(items)} offset(s) given for the rank-{arr.rank} array '{arr.name}'")
    out = []
    for o in items:
        if isinstance(o, Value) and len(o.type.shape) <= 1 and not o.type.dtype.is_float \
                and not o.type.dtype.is_bool:
            out.append(o)                 # a rank-1 tile: per-row indices (a gather / scatter)
        elif isinstance(o, Value) and o.type.shape == () and o.type.dtype.is_bool:
            out.append(convert(b, o, dtypes.int32, ()))
        elif isinstance(o, int) and not isinstance(o, bool):
            out.append(constant(b, o, TileType((), dtypes.python_scalar_dtype(o))))
        else:
            fail(b, f"{what}: offsets must be integer scalars or 1-D integer tiles of indices, got {describe(o)}")
    return out


def _gathered(b: Builder, offs: list[Value], shape: tuple, what: str) -> list[Value]:
    """Each 1-D index tile in ``offs`` (dim d: one index per position along d) as an integer tile
    of the whole ``shape``, the form LOAD, STORE and ATOMIC take."""
    out = []
    for d, o in enumerate(offs):
        if o.type.shape == ():
            out.append(o)
            continue
        if o.type.shape != (shape[d],):
            fail(b, f"{what}: the index tile for dim {d} has shape {o.type.shape}; it needs one index per "
                    f"position along that dim: ({shape[d]},)")
        lifted = reshape(b, o, tuple(shape[d] if i == d else 1 for i in range(len(shape))))
        out.append(broadcast_to(b, lifted, tuple(shape)))
    return out


def _mask(b: Builder, mask, shape: tuple, what: str) -> Value | None:
    """A ``mask=`` argument as a bool tile of ``shape`` (None: no mask, or a constant True)."""
    if mask is None or (mask is True):
        return None
    is_bool = isinstance(mask, bool) or (isinstance(mask, Value) and isinstance(mask.type, TileType)
                                         and mask.type.dtype.is_bool)
    if not is_bool:
        fail(b, f"{what}: mask must be a bool tile (a comparison) or a bool, got {describe(mask)}")
    if isinstance(mask, Value) and not _broadcasts(mask.type.shape, tuple(shape)):
        fail(b, f"{what}: a mask of shape {mask.type.shape} does not broadcast to the tile's {tuple(shape)}")
    return convert(b, mask, dtypes.bool_, tuple(shape))


def load(b: Builder, x, offsets, shape, other=0, mask=None) -> Value:
    arr = _array(b, x, "load")
    offs = _offsets(b, arr, offsets, "load")
    shape = const_shape(b, shape, "load")
    if len(shape) != arr.rank:
        fail(b, f"load: tile shape {shape} has rank {len(shape)} but '{arr.name}' has rank {arr.rank}")
    if not is_number(other):
        fail(b, f"load: `other` must be a compile-time number, got {describe(other)}")
    dt = arr.dtype
    if not dt.is_float and isinstance(other, float) and not (math.isfinite(other) and other == int(other)):
        fail(b, f"load: other={other!r} cannot be represented as {dt}")
    if not dtypes.fits(other, dt):
        fail(b, f"load: other={other!r} cannot be represented as {dt}")
    other = bool(other) if dt.is_bool else float(other) if dt.is_float else int(other)
    keep = _mask(b, mask, shape, "load")
    offs = _gathered(b, offs, shape, "load")
    tile = b.create(TileOp.LOAD, [arr.value, *offs], [TileType(shape, dt)], LoadAttrs(other)).result
    if keep is None:
        return tile
    # masked-off elements read ``other``: the ones inside the array are read and replaced
    return b.create(TileOp.WHERE, [keep, tile, constant(b, other, TileType(shape, dt))], [TileType(shape, dt)]).result


def _written(b: Builder, x, offsets, tile, mask, what: str, arr: ArrayHandle | None = None):
    """(array, offsets, the tile in the array's dtype, the mask or None) of a store or atomic."""
    arr = arr or _array(b, x, what)
    offs = _offsets(b, arr, offsets, what)
    _check_operand(b, tile, what)
    shape = shape_of(tile)
    if shape == ():
        shape = (1,) * arr.rank          # a scalar writes one element
    if len(shape) != arr.rank:
        fail(b, f"{what}: tile rank {len(shape)} does not match the rank {arr.rank} of '{arr.name}'")
    return arr, _gathered(b, offs, shape, what), convert(b, tile, arr.dtype, shape), _mask(b, mask, shape, what)


def store(b: Builder, x, offsets, tile, mask=None) -> None:
    arr, offs, value, keep = _written(b, x, offsets, tile, mask, "store")
    if keep is None:
        b.create(TileOp.STORE, [arr.value, *offs, value])
    else:
        b.create(TileOp.STORE, [arr.value, *offs, value, keep], attrs=StoreAttrs(masked=True))


# --- atomics -------------------------------------------------------------------------------------
_ATOMIC_INTS = ("int32", "uint32", "int64", "uint64")
ATOMIC_DTYPES = {"add": _ATOMIC_INTS + ("float32",), "max": _ATOMIC_INTS, "min": _ATOMIC_INTS,
                 "and": _ATOMIC_INTS, "or": _ATOMIC_INTS, "xor": _ATOMIC_INTS, "xchg": _ATOMIC_INTS + ("float32",),
                 "cas": _ATOMIC_INTS}


def atomic(b: Builder, kind: str, x, offsets, tile, mask=None, sem="relaxed", scope="gpu", cmp=None) -> Value:
    """The old values of an atomic read-modify-write of ``tile`` into ``x`` at ``offsets`` (for
    "cas": ``tile`` is written where the old value equals ``cmp``)."""
    what = f"atomic_{kind}"
    arr = _array(b, x, what)
    if arr.dtype.name not in ATOMIC_DTYPES[kind]:
        fail(b, f"{what}: '{arr.name}' has dtype {arr.dtype}; {what} supports "
                f"{', '.join(ATOMIC_DTYPES[kind])}")
    if sem not in ir.ATOMIC_SEMS:
        fail(b, f"{what}: sem must be one of {', '.join(map(repr, ir.ATOMIC_SEMS))}, got {sem!r}")
    if scope not in ir.ATOMIC_SCOPES:
        fail(b, f"{what}: scope must be one of {', '.join(map(repr, ir.ATOMIC_SCOPES))}, got {scope!r}")
    arr, offs, value, keep = _written(b, x, offsets, tile, mask, what, arr)
    attrs = ir.AtomicAttrs(kind, sem, scope, keep is not None)
    if kind == "cas":
        _check_operand(b, cmp, what)
        if not _broadcasts(shape_of(cmp), value.type.shape):
            fail(b, f"{what}: the compared tile's shape {shape_of(cmp)} does not broadcast to {value.type.shape}")
        offs = offs + [convert(b, cmp, arr.dtype, value.type.shape)]
    operands = [arr.value, *offs, value] + ([keep] if keep is not None else [])
    return b.create(TileOp.ATOMIC, operands, [value.type], attrs).result


def histogram(b: Builder, x, bins) -> Value:
    """``tj.histogram``: int32 counts of each value 0..bins-1 in the 1-D integer tile ``x``
    (values outside are not counted), as one compare of ``x`` against every bin and a sum."""
    if not (isinstance(x, Value) and isinstance(x.type, TileType) and len(x.type.shape) == 1):
        fail(b, f"histogram: expected a 1-D tile, got {describe(x)}")
    if not (x.type.dtype.is_int and not x.type.dtype.is_bool):
        fail(b, f"histogram: the values must be integers, got {x.type.dtype.name}")
    if isinstance(bins, Value) or not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
        fail(b, f"histogram: bins must be a positive compile-time int, got {describe(bins)}")
    n = x.type.shape[0]
    if n * bins > 1 << 16:
        fail(b, f"histogram: {n} values x {bins} bins is over 65536 compares; histogram chunks of "
                f"the values and add the counts (or use tj.atomic_add into an array)")
    hits = binary(b, "==", expand_dims(b, x, 1), expand_dims(b, arange(b, 0, bins), 0))      # (n, bins)
    return reduce(b, ReduceKind.SUM, cast(b, hits, dtypes.int32), 0)


def device_print(b: Builder, prefix, *values) -> None:
    """``tj.device_print``: a PRINT of the values broadcast to one shape, with the program id."""
    if not isinstance(prefix, str):
        fail(b, f"device_print: the first argument must be a string, got {describe(prefix)}")
    if not values:
        fail(b, "device_print: give at least one value to print")
    shapes = []
    for v in values:
        _check_operand(b, v, "device_print")
        shapes.append(shape_of(v))
    shape = max(shapes, key=len)
    scalar = shape == ()
    shape = (1,) if scalar else shape
    if not all(_broadcasts(s, shape) for s in shapes):
        fail(b, f"device_print: the values' shapes {shapes} do not broadcast to one shape")
    tiles = []
    for v in values:
        dt = v.type.dtype if isinstance(v, Value) else dtypes.python_scalar_dtype(v)
        dt = dtypes.float32 if dt.is_float and dt.bits < 32 else dtypes.int32 if dt.bits < 32 and not dt.is_float else dt
        tiles.append(convert(b, v, dt, shape))
    pids = [program_id(b, axis) for axis in range(3)]
    b.create(TileOp.PRINT, pids + tiles, [], ir.PrintAttrs(prefix, scalar))


def device_assert(b: Builder, cond, msg: str = "") -> None:
    """``tj.device_assert``: an ASSERT of ``cond`` with the program id (strip_asserts removes it
    unless the kernel is compiled with debug)."""
    if not isinstance(msg, str):
        fail(b, f"device_assert: the message must be a string, got {describe(msg)}")
    if not isinstance(cond, Value):
        if isinstance(cond, ArrayHandle) or not isinstance(cond, (bool, int)):
            fail(b, f"device_assert: the condition must be a boolean tile or scalar, got {describe(cond)}")
        if cond:
            return                      # true at compile time: nothing to check
    shape = shape_of(cond)
    scalar = shape == ()
    tile = convert(b, cond, dtypes.bool_, (1,) if scalar else shape)
    pids = [program_id(b, axis) for axis in range(3)]
    b.create(TileOp.ASSERT, pids + [tile], [], ir.AssertAttrs(msg, scalar))


def grid_dependency(b: Builder, action: str) -> None:
    """``tj.wait_prior_kernels`` / ``tj.launch_dependents``: a GRID_DEPENDENCY (the frontend
    then checks that it stands in the kernel's top-level block)."""
    b.create(TileOp.GRID_DEPENDENCY, [], [], ir.GridDependencyAttrs(action))


# --- compile-time debugging ---------------------------------------------------------------------
def static_assert(b: Builder, cond, msg: str = "") -> None:
    """Fail the compile, at this line, when the compile-time ``cond`` is false."""
    if isinstance(cond, (Value, ArrayHandle)):
        fail(b, f"static_assert: the condition must be known at compile time, got {describe(cond)} "
                "(use constexpr parameters and shapes)")
    if not isinstance(msg, str):
        fail(b, f"static_assert: the message must be a string, got {describe(msg)}")
    if not cond:
        fail(b, f"static_assert failed{': ' + msg if msg else ''}")


def static_print(b: Builder, *values) -> None:
    """Print compile-time values (tiles as their types) once, while the kernel compiles."""
    text = " ".join(describe(v) if isinstance(v, (Value, ArrayHandle)) else str(v) for v in values)
    print(f"[tj.static_print {b.loc.file}:{b.loc.line}] {text}")


# --- the builtin table: language.py marker name -> builder ----------------------------------------
def _unary_builder(name):
    return lambda b, x: unary(b, name, x)


def _reduce_builder(kind):
    return lambda b, x, axis=None, keepdims=False: reduce(b, kind, x, axis, keepdims)


BUILTINS = {
    "program_id": program_id, "num_programs": num_programs,
    "arange": arange, "zeros": zeros, "full": full, "load": load, "store": store,
    **{name: _unary_builder(name) for name in FLOAT_UNARY}, "abs": _unary_builder("abs"),
    "maximum": lambda b, x, y: binary(b, "maximum", x, y),
    "minimum": lambda b, x, y: binary(b, "minimum", x, y),
    "where": where, "fma": fma, "cast": cast, "bitcast": bitcast_to, "clamp": clamp,
    "trans": trans, "permute": permute, "reshape": reshape, "broadcast_to": broadcast_to, "expand_dims": expand_dims,
    "sum": _reduce_builder(ReduceKind.SUM), "max": _reduce_builder(ReduceKind.MAX),
    "min": _reduce_builder(ReduceKind.MIN), "argmax": _reduce_builder(ReduceKind.ARGMAX),
    "argmin": _reduce_builder(ReduceKind.ARGMIN), "dot": dot, "dot_scaled": dot_scaled,
    "static_assert": static_assert, "static_print": static_print, "device_print": device_print,
    "device_assert": device_assert,
    "wait_prior_kernels": lambda b: grid_dependency(b, "wait"),
    "launch_dependents": lambda b: grid_dependency(b, "launch"),
    "cumsum": lambda b, x, axis=0, reverse=False: scan(b, "sum", x, axis, reverse),
    "cumprod": lambda b, x, axis=0, reverse=False: scan(b, "prod", x, axis, reverse),
    "sort": sort, "histogram": histogram,
    **{f"atomic_{kind}": (lambda kind: lambda b, x, offsets, tile, mask=None, sem="relaxed", scope="gpu":
                          atomic(b, kind, x, offsets, tile, mask, sem, scope))(kind)
       for kind in ir.ATOMIC_KINDS if kind != "cas"},
    "atomic_cas": lambda b, x, offsets, cmp, tile, mask=None, sem="relaxed", scope="gpu":
        atomic(b, "cas", x, offsets, tile, mask, sem, scope, cmp),
    **{name: (lambda name: lambda b, x: predicate(b, name, x))(name) for name in PREDICATES},
}
