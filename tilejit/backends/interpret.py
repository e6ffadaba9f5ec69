"""The ``interpret`` backend: runs tile IR with NumPy, one program at a time over the grid.

A function is compiled once into a list of Python closures (one per op) that read and write a
flat list of value slots, so running a program is a loop over closures with no per-op dispatch.
Values are NumPy arrays (tiles) or NumPy scalars, always of exactly their IR dtype; no value is
ever mutated in place, so views (broadcast, transpose) are safe to share.

``elementwise_fn`` is the reference semantics of every elementwise op (NumPy semantics in the
op's dtypes; float16/bfloat16/float8 math is done in float32 and rounded, as a GPU does) and may
be reused by other NumPy executors of the IR.
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np

from tilejit import backends, dtypes, ir
from tilejit.dtypes import DType
from tilejit.errors import DeviceAssertError, LaunchError
from tilejit.ir import COMPARE_OPS, Block, Function, Operation, ReduceKind, TileOp as Op, TileType

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


def _to(x, dt: np.dtype):
    """``x`` as dtype ``dt``: an ndarray for tiles, a NumPy scalar for scalars."""
    if type(x) is np.ndarray:
        if x.dtype != dt:
            x = x.astype(dt)
        return x if x.ndim else x[()]
    if type(x) is dt.type:
        return x
    return np.asarray(x).astype(dt)[()]


def _fma1(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (IEEE fma, round to nearest even): exactly in rationals when all
    three are finite, the zeros' signs as IEEE gives them; NaN and infinities as a * b + c."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:              # +0 but for (±0 * y) + ±0, whose sign is the float sum's
        return a * b + c if (a == 0 or b == 0) and c == 0 else 0.0
    try:
        return float(exact)     # correctly rounded
    except OverflowError:       # (copysign would convert ``exact`` to float again)
        return math.inf if exact > 0 else -math.inf


_fma_ufunc = np.frompyfunc(getattr(math, "fma", _fma1), 3, 1)


def fma64(a, b, c):
    """float64 fused multiply-add of arrays or scalars (``math.fma`` on Python 3.13, else exact
    rational arithmetic): one Python call per element, as befits the CPU backends' debugging role."""
    try:
        r = _fma_ufunc(a, b, c)
    except (ValueError, OverflowError):         # math.fma raises where IEEE gives NaN or inf
        r = np.frompyfunc(_fma1, 3, 1)(a, b, c)
    return np.asarray(r, dtype=F64)[()] if np.ndim(r) == 0 else np.asarray(r, dtype=F64)


def _compute_dtype(dt: DType) -> np.dtype:
    """Where math in ``dt`` happens: narrow floats are widened to float32."""
    return F32 if dt.is_float and dt.bits < 32 else dt.np


# ------------------------------------------------------------------------- elementwise semantics
def _int_power(a, b):
    """Integer ``a ** b``; a negative exponent truncates like C (only +-1 survive)."""
    r = np.power(a, np.maximum(b, 0))
    neg_exp = np.where(b % 2 == 0, 1, -1).astype(r.dtype)
    return np.where(b >= 0, r, np.where(a == 1, 1, np.where(a == -1, neg_exp, 0)).astype(r.dtype))


_BINARY = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.TRUEDIV: np.true_divide,
    Op.FLOORDIV: np.floor_divide, Op.MOD: np.mod, Op.POW: np.power,
    Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor,
    Op.SHL: np.left_shift, Op.SHR: np.right_shift, Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum,
}
_COMPARE = {Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
            Op.GT: np.greater, Op.GE: np.greater_equal}
_PREDICATE = {Op.ISNAN: np.isnan, Op.ISINF: np.isinf, Op.ISFINITE: np.isfinite}
_erf = np.frompyfunc(math.erf, 1, 1)       # float64 in, Python floats out: NumPy has no erf

_FLOAT_UNARY = {
    Op.EXP: np.exp, Op.EXP2: np.exp2, Op.LOG: np.log, Op.LOG2: np.log2, Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1 / np.sqrt(x), Op.SIN: np.sin, Op.COS: np.cos, Op.TANH: np.tanh,
    Op.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    Op.ERF: lambda x: _erf(x.astype(F64)).astype(x.dtype),
    Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.TRUNC: np.trunc, Op.ROUND: np.rint,
}


def _cast_fn(src: DType, dst: DType):
    out = dst.np
    if dst.is_bool:
        return lambda x: _to(_to(x, _compute_dtype(src)) != 0, out)
    if src == dtypes.float64:           # one rounding (to float8 through float32, as codegen's converters)
        via = F32 if dst.is_float and dst.bits == 8 else None
    else:
        via = F32 if src.is_float else (F64 if dst.is_float and dst.bits < 32 else None)
    if via is None:
        return lambda x: _to(x, out)     # float -> int truncates toward zero (NumPy astype)
    return lambda x: _to(_to(x, via), out)


def elementwise_fn(op: Op, result: DType, operands: list[DType]):
    """A NumPy function computing elementwise ``op`` with the given result/operand dtypes."""
    out = result.np
    if op is Op.CAST:
        return _cast_fn(operands[0], result)
    if op is Op.BITCAST:
        return lambda a: np.ascontiguousarray(a).view(out)
    if op is Op.WHERE:
        return lambda c, a, b: _to(np.where(c, a, b), out)
    if op in COMPARE_OPS:
        cmp, ct = _COMPARE[op], _compute_dtype(operands[0])
        return lambda a, b: _to(cmp(_to(a, ct), _to(b, ct)), out)
    if op in _PREDICATE:
        test, ct = _PREDICATE[op], _compute_dtype(operands[0])
        return lambda a: _to(test(_to(a, ct)), out)
    ct = _compute_dtype(result)
    if op is Op.FMA:
        if result == dtypes.float64:
            return lambda a, b, c: _to(fma64(_to(a, F64), _to(b, F64), _to(c, F64)), out)
        wide = F64 if result.is_float else ct
        return lambda a, b, c: _to(_to(a, wide) * _to(b, wide) + _to(c, wide), out)
    if op in _FLOAT_UNARY:
        f = _FLOAT_UNARY[op]
        return lambda a: _to(f(_to(a, ct)), out)
    if op is Op.NEG:
        return lambda a: _to(np.negative(_to(a, ct)), out)
    if op is Op.ABS:
        return lambda a: _to(np.abs(_to(a, ct)), out)
    if op is Op.INVERT:
        f = np.logical_not if result.is_bool else np.invert
        return lambda a: _to(f(a), out)
    f = _int_power if op is Op.POW and not result.is_float else _BINARY[op]
    return lambda a, b: _to(f(_to(a, ct), _to(b, ct)), out)


# ---------------------------------------------------------------------- reductions, dot, memory
def _reduce_fn(kind: ReduceKind, axis: int, keepdims: bool, src: DType, result: DType):
    out, ct = result.np, _compute_dtype(src)
    if kind is ReduceKind.SUM:
        acc = (F64 if src == dtypes.float64 else F32) if src.is_float else out   # fp16/bf16 sums in float32
        return lambda x: _to(np.sum(_to(x, ct), axis=axis, keepdims=keepdims, dtype=acc), out)
    f = {ReduceKind.MAX: np.max, ReduceKind.MIN: np.min,
         ReduceKind.ARGMAX: np.argmax, ReduceKind.ARGMIN: np.argmin}[kind]
    return lambda x: _to(f(_to(x, ct), axis=axis, keepdims=keepdims), out)


def _round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10 mantissa bits), nearest-even, as tensor cores read them."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    bias = np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))
    return ((bits + bias) & np.uint32(0xFFFFE000)).view(F32)


def _dot_fn(a_dt: DType, result: DType, allow_tf32: bool):
    out = result.np
    if not result.is_float:     # int8 x int8 -> int32: exact products, wrapping accumulation
        return lambda a, b, acc: _to(np.matmul(_to(a, I64), _to(b, I64)) + acc, out)
    if a_dt == dtypes.float64:      # float64 products summed in float64 (the GPU's order is its own)
        return lambda a, b, acc: _to(np.matmul(_to(a, F64), _to(b, F64)) + _to(acc, F64), out)
    tf32 = allow_tf32 and a_dt == dtypes.float32

    def dot(a, b, acc):
        a, b = _to(a, F32), _to(b, F32)          # exact for fp16/bf16/fp8
        if tf32:
            a, b = _round_to_tf32(a), _round_to_tf32(b)
        return _to(np.matmul(_to(a, F64), _to(b, F64)) + _to(acc, F64), out)
    return dot


def _window(array_shape, offsets, tile_shape):
    """Slices (into the array, into the tile) of the in-bounds part; None when nothing is."""
    if len(array_shape) != len(tile_shape):
        raise LaunchError(f"a rank-{len(tile_shape)} tile cannot address a rank-{len(array_shape)} array")
    src, dst = [], []
    for size, off, n in zip(array_shape, offsets, tile_shape):
        off = int(off)
        lo, hi = max(off, 0), min(off + n, size)
        if hi <= lo:
            return None, None
        src.append(slice(lo, hi))
        dst.append(slice(lo - off, hi - off))
    return tuple(src), tuple(dst)


def _gathers(offsets) -> bool:
    return any(np.ndim(o) for o in offsets)


def _elements(array_shape, offsets, tile_shape):
    """(index arrays into the array, in-bounds mask), both of the tile's shape, for offsets that
    are scalars (a block starting there) or index tiles of the tile's shape (a gather)."""
    if len(array_shape) != len(tile_shape):
        raise LaunchError(f"a rank-{len(tile_shape)} tile cannot address a rank-{len(array_shape)} array")
    grid = np.indices(tile_shape, dtype=np.int64)
    index = [np.broadcast_to(np.asarray(off, np.int64), tile_shape) if np.ndim(off) else int(off) + grid[d]
             for d, off in enumerate(offsets)]
    inside = np.ones(tile_shape, bool)
    for i, size in zip(index, array_shape):
        inside &= (i >= 0) & (i < size)
    return index, inside


def _load_fn(shape: tuple, dt: DType, other):
    with np.errstate(all="ignore"):
        fill = _to(np.asarray(other), dt.np)

    def load(array, *offsets):
        if _gathers(offsets):
            index, inside = _elements(array.shape, offsets, shape)
            tile = np.full(shape, fill, dt.np)
            tile[inside] = array[tuple(i[inside] for i in index)]
            return tile
        src, dst = _window(array.shape, offsets, shape)
        if src is None:
            return np.full(shape, fill, dt.np) if shape else fill
        if not shape:
            return _to(array[()], dt.np)
        tile = np.full(shape, fill, dt.np)
        tile[dst] = array[src]
        return tile
    return load


def _store(array, *offsets_and_tile, masked: bool = False):
    *offsets, tile = offsets_and_tile
    if masked:
        *offsets, tile, mask = offsets_and_tile
    shape = np.shape(tile)
    if _gathers(offsets):                # a scatter: where two elements land on one, one wins
        index, inside = _elements(array.shape, offsets, shape)
        if masked:
            inside &= np.broadcast_to(np.asarray(mask, bool), shape)
        array[tuple(i[inside] for i in index)] = np.asarray(tile)[inside]
        return
    src, dst = _window(array.shape, offsets, shape)
    if src is None:
        return
    value = np.asarray(tile)[dst] if shape else tile
    if masked:
        keep = np.asarray(mask)[dst] if shape else bool(mask)
        array[src] = np.where(keep, value, array[src])
    else:
        array[src] = value


ATOMIC_COMBINE = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, new: new}


def atomic_combine(kind: str, current, value, cmp=None):
    """The new value of an atomic of ``kind`` (``cmp``: atomic_cas's compared value)."""
    if kind == "cas":
        return np.where(current == cmp, value, current)
    with np.errstate(all="ignore"):                       # integer adds wrap, as on the GPU
        return ATOMIC_COMBINE[kind](current, value)


def _atomic(kind: str, array, *offsets_and_tile, masked: bool = False):
    """The old values of ``kind``-combining the tile into ``array`` at the offsets (in bounds and
    where the mask holds: elsewhere nothing is written and the old value reads 0).  Programs run
    one after another here, so every read-modify-write is whole."""
    rest = list(offsets_and_tile)
    mask = rest.pop() if masked else None
    tile = np.asarray(rest.pop())
    cmp = np.broadcast_to(np.asarray(rest.pop(), array.dtype), tile.shape) if kind == "cas" else None
    offsets = rest
    old = np.zeros(tile.shape, array.dtype)
    if _gathers(offsets):                # element by element: two on one element see each other
        index, inside = _elements(array.shape, offsets, tile.shape)
        if masked:
            inside &= np.broadcast_to(np.asarray(mask, bool), tile.shape)
        for at in zip(*np.nonzero(inside)):
            where = tuple(int(i[at]) for i in index)
            old[at] = array[where]
            array[where] = atomic_combine(kind, array[where], tile[at].astype(array.dtype),
                                          None if cmp is None else cmp[at])
        return old
    src, dst = _window(array.shape, offsets, tile.shape)
    if src is None:
        return old
    current = array[src].copy()
    keep = np.asarray(mask)[dst] if masked else np.True_
    new = atomic_combine(kind, current, tile[dst].astype(array.dtype), None if cmp is None else cmp[dst])
    array[src] = np.where(keep, new, current)
    old[dst] = np.where(keep, current, 0)
    return old


# --------------------------------------------------------------------------- compiling functions
class _Compiler:
    """Turns blocks into closures over a flat list of value slots (``env``).

    Slots 0 and 1 hold the current program id and the grid size, both tuples of int32."""

    def __init__(self):
        self.slots: dict = {}

    def slot(self, value) -> int:
        if value not in self.slots:
            self.slots[value] = len(self.slots) + 2
        return self.slots[value]

    def block(self, block: Block):
        """A closure running ``block`` that returns the values of its YIELD (or [])."""
        steps = [self.op(o) for o in block.ops if o.op is not Op.YIELD]
        last = block.ops[-1] if block.ops else None
        out = [self.slot(v) for v in last.operands] if last is not None and last.op is Op.YIELD else []

        def run(env):
            for step in steps:
                step(env)
            return [env[s] for s in out]
        return run

    def op(self, o: Operation):
        handler = getattr(self, f"op_{o.op.name}", None)
        if handler is not None:
            return handler(o)
        return self.simple(o, self.value_fn(o))

    def simple(self, o: Operation, f):
        """Closure for an op with one result computed by ``f(*operand_values)``."""
        ins, r = [self.slot(v) for v in o.operands], self.slot(o.result)
        if len(ins) == 1:
            a, = ins
            return lambda env: env.__setitem__(r, f(env[a]))
        if len(ins) == 2:
            a, b = ins
            return lambda env: env.__setitem__(r, f(env[a], env[b]))
        return lambda env: env.__setitem__(r, f(*[env[i] for i in ins]))

    def value_fn(self, o: Operation):
        rtype = o.result.type
        if o.op in _ELEMENTWISE:
            return elementwise_fn(o.op, rtype.dtype, [v.type.dtype for v in o.operands])
        if o.op is Op.SPLAT:
            return lambda x: np.full(rtype.shape, x, rtype.dtype.np)
        if o.op is Op.BROADCAST:
            return lambda x: np.broadcast_to(x, rtype.shape)
        if o.op is Op.RESHAPE:
            return lambda x: _to(np.reshape(x, rtype.shape), rtype.dtype.np)
        if o.op is Op.TRANS:
            perm = o.attrs.perm
            return lambda x: np.transpose(x, perm)
        if o.op is Op.REDUCE:
            a = o.attrs
            return _reduce_fn(a.kind, a.axis, a.keepdims, o.operands[0].type.dtype, rtype.dtype)
        if o.op is Op.SCAN and o.attrs.kind == "sort":
            axis, descending = o.attrs.axis, o.attrs.reverse
            return lambda x: np.ascontiguousarray(np.flip(np.sort(x, axis=axis), axis) if descending
                                                  else np.sort(x, axis=axis))
        if o.op is Op.SCAN:
            a, out = o.attrs, rtype.dtype.np
            fn = np.cumsum if a.kind == "sum" else np.cumprod

            def scan(x, axis=a.axis, reverse=a.reverse):
                with np.errstate(all="ignore"):              # integers wrap, as on the GPU
                    x = np.flip(x, axis) if reverse else x
                    r = fn(x, axis=axis, dtype=out)
                    return np.ascontiguousarray(np.flip(r, axis)) if reverse else r
            return scan
        if o.op is Op.DOT:
            return _dot_fn(o.operands[0].type.dtype, rtype.dtype, o.attrs.allow_tf32)
        if o.op is Op.LOAD:
            return _load_fn(rtype.shape, rtype.dtype, o.attrs.other if o.attrs else 0)
        if o.op is Op.DIM:
            axis, out = o.attrs.axis, rtype.dtype.np.type
            return lambda array: out(array.shape[axis])
        raise NotImplementedError(f"the interpreter has no rule for {o.op.name}")

    # --- ops without operands or results, and control flow -----------------------------------
    def op_STORE(self, o: Operation):
        ins = [self.slot(v) for v in o.operands]
        masked = ir.store_mask(o) is not None
        return lambda env: _store(*[env[i] for i in ins], masked=masked)

    def op_ATOMIC(self, o: Operation):
        ins = [self.slot(v) for v in o.operands]
        kind, masked, r = o.attrs.kind, o.attrs.masked, self.slot(o.result)
        return lambda env: env.__setitem__(r, _atomic(kind, *[env[i] for i in ins], masked=masked))

    def op_PRINT(self, o: Operation):
        ins, prefix, scalar = [self.slot(v) for v in o.operands], o.attrs.prefix, o.attrs.scalar

        def show(env):
            pid, values = [int(env[i]) for i in ins[:3]], [np.asarray(env[i]) for i in ins[3:]]
            for index in np.ndindex(values[0].shape):
                print(ir.print_line(pid, () if scalar else index, prefix, [v[index].item() for v in values]),
                      flush=True)
        return show

    def op_GRID_DEPENDENCY(self, o: Operation):
        return lambda env: None         # kernels run one after another: the prior ones have ended

    def op_ASSERT(self, o: Operation):
        ins, msg, scalar, loc = [self.slot(v) for v in o.operands], o.attrs.msg, o.attrs.scalar, o.loc

        def check(env):
            cond = np.asarray(env[ins[3]])
            if not cond.all():
                pid = [int(env[i]) for i in ins[:3]]
                index = () if scalar else tuple(int(i) for i in np.argwhere(~cond)[0])
                raise DeviceAssertError(ir.assert_message(pid, index, msg), loc)
        return check

    def op_CONSTANT(self, o: Operation):
        t = o.result.type
        with np.errstate(all="ignore"):
            value = _to(np.full(t.shape, o.attrs.value), t.dtype.np)
        if t.shape:
            value.flags.writeable = False
        r = self.slot(o.result)
        return lambda env: env.__setitem__(r, value)

    def op_ARANGE(self, o: Operation):
        t = o.result.type
        value = np.arange(o.attrs.value, o.attrs.value + t.shape[0], dtype=t.dtype.np)
        value.flags.writeable = False
        r = self.slot(o.result)
        return lambda env: env.__setitem__(r, value)

    def op_PROGRAM_ID(self, o: Operation):
        axis, r = o.attrs.axis, self.slot(o.result)
        return lambda env: env.__setitem__(r, env[0][axis])

    def op_NUM_PROGRAMS(self, o: Operation):
        axis, r = o.attrs.axis, self.slot(o.result)
        return lambda env: env.__setitem__(r, env[1][axis])

    def op_FOR(self, o: Operation):
        lb, ub, st, *inits = [self.slot(v) for v in o.operands]
        region = o.regions[0]
        iv, *carried = [self.slot(a) for a in region.args]
        iv_type = region.args[0].type.dtype.np.type
        body, results = self.block(region), [self.slot(v) for v in o.results]

        def run_for(env):
            i, stop, step = int(env[lb]), int(env[ub]), int(env[st])
            if step == 0:
                raise LaunchError("a for loop has step 0")
            values = [env[s] for s in inits]
            while (i < stop) if step > 0 else (i > stop):
                env[iv] = iv_type(i)
                for s, v in zip(carried, values):
                    env[s] = v
                values = body(env)
                i += step
            for s, v in zip(results, values):
                env[s] = v
        return run_for

    def op_IF(self, o: Operation):
        cond = self.slot(o.operands[0])
        then_body, else_body = self.block(o.regions[0]), self.block(o.regions[1])
        results = [self.slot(v) for v in o.results]

        def run_if(env):
            values = then_body(env) if env[cond] else else_body(env)
            for s, v in zip(results, values):
                env[s] = v
        return run_if

    def op_WHILE(self, o: Operation):
        inits = [self.slot(v) for v in o.operands]
        args = [self.slot(a) for a in o.regions[0].args]
        body, results = self.block(o.regions[0]), [self.slot(v) for v in o.results]

        def run_while(env):
            values = [env[s] for s in inits]
            while True:                              # do-while: the region runs at least once
                for s, v in zip(args, values):
                    env[s] = v
                cond, *values = body(env)
                if not cond:
                    break
            for s, v in zip(results, values):
                env[s] = v
        return run_while


_ELEMENTWISE = (frozenset(_BINARY) | frozenset(_COMPARE) | frozenset(_FLOAT_UNARY) | frozenset(_PREDICATE)
                | {Op.NEG, Op.INVERT, Op.ABS, Op.FMA, Op.WHERE, Op.CAST, Op.BITCAST})


# ----------------------------------------------------------------------------------- programs
class Program:
    """A tile-IR function compiled for the interpreter; ``launch`` runs it over a grid."""

    def __init__(self, fn: Function):
        self.fn = fn
        compiler = _Compiler()
        self.arg_slots = [compiler.slot(a) for a in fn.args]
        self.body = compiler.block(fn.body)
        self.num_slots = len(compiler.slots) + 2
        stored = {id(o.operands[0]) for o in fn.walk() if o.op in (Op.STORE, Op.ATOMIC)}
        self.stored_args = [i for i, a in enumerate(fn.args) if id(a) in stored]
        self.writes = tuple(self.stored_args)              # runtime arguments it stores to

    def launch(self, grid: tuple[int, int, int], args: list) -> None:
        """Run every program of ``grid`` in order (x fastest) on host ``args``."""
        if len(args) != len(self.arg_slots):
            raise LaunchError(f"kernel '{self.fn.name}' takes {len(self.arg_slots)} runtime "
                              f"arguments, got {len(args)}")
        args = [_host_value(a, v.type, name) for a, v, name in zip(args, self.fn.args, self.fn.arg_names)]
        for i in self.stored_args:
            if not args[i].flags.writeable:
                raise LaunchError(f"argument '{self.fn.arg_names[i]}' is stored to but is read-only",
                                  kernel=self.fn.name)
        env = [None] * self.num_slots
        for s, a in zip(self.arg_slots, args):
            env[s] = a
        gx, gy, gz = grid
        env[1] = (np.int32(gx), np.int32(gy), np.int32(gz))
        with np.errstate(all="ignore"):
            for z in range(gz):
                for y in range(gy):
                    for x in range(gx):
                        env[0] = (np.int32(x), np.int32(y), np.int32(z))
                        self.body(env)


def _host_value(arg, type_, name: str):
    """A NumPy view of an array argument (no copy), or a scalar argument as a NumPy scalar."""
    if isinstance(type_, TileType):
        return _to(np.asarray(arg), type_.dtype.np)
    if isinstance(arg, np.ndarray):
        return arg
    device = getattr(arg, "__dlpack_device__", None)
    if device is not None and device()[0] == 1:          # kDLCPU: host memory, zero-copy view
        return np.from_dlpack(arg)
    raise LaunchError(f"argument '{name}': the interpret backend runs on host memory and cannot "
                      f"read a {type(arg).__name__}; pass a NumPy array")


def run(fn: Function, grid, args: list) -> None:
    """Interpret ``fn`` over ``grid`` (an int or a tuple of up to 3 ints) on ``args``."""
    grid = (grid,) if isinstance(grid, int) else tuple(grid)
    Program(fn).launch(grid + (1,) * (3 - len(grid)), list(args))


class InterpretBackend:
    """Backend ``interpret``: the artifact is a ``Program``; launches run on the host."""
    name = "interpret"
    target = "numpy"

    def compile(self, tile_fn: Function, options: dict) -> Program:
        from tilejit.backends import switch_options
        from tilejit.backends.resources import check_resources
        from tilejit.passes.pipeline import clone_function, compile_to_simt
        from tilejit.passes.strip_asserts import strip_asserts
        from tilejit.passes.widen_offsets import widen_offsets
        # a kernel the GPU could not hold is refused here too, with the same error at the same
        # line (the SIMT program is built only for that check)
        check_resources(compile_to_simt(tile_fn, num_warps=options.get("num_warps", 4),
                                        **switch_options(options)), "sm_90a")
        # 64-bit offsets into arrays of 2**31 elements or more, as on the other backends
        return Program(widen_offsets(strip_asserts(clone_function(tile_fn), options.get("debug", False))))

    def launch(self, program: Program, grid, args: list, stream=None) -> None:
        emulate = sys.modules.get("tilejit.backends.emulate")
        if emulate is not None:         # the last launch is no longer the emulator's
            emulate.forget_writes()
        program.launch(grid, args)


backends.register("interpret", InterpretBackend())
