"""Index arithmetic in 64 bits where an array needs it.

    widen_offsets(fn) -> fn

Python integers do not wrap, so ``i = tj.program_id(0) * BLOCK`` means the true product.  The
tile IR computes it in int32, which wraps past 2**31 - 1: on an array of 2**31 + 2**20
elements the tail programs' offsets went negative, their edge mask hid every element, and the
tail was silently left unwritten.  For each LOAD and STORE on an array the specialisation marks
``large`` (2**31 elements or more), this pass recomputes the int32 scalar arithmetic its
offsets come from (``+ - * // % min max`` over program ids, loop variables, arguments and
constants) in int64, right before the access, from int64 casts of the leaves.  Other
accesses keep their 32-bit math (faster, and it cannot overflow: every offset into an array
smaller than 2**31 elements fits).

The same holds wherever int32 arithmetic meets an int64 value (a large array's size, an int64
argument): promotion casts the int32 result to int64 *after* it wrapped, so a mask such as
``start * BLOCK + tj.arange(0, BLOCK) < n`` compared a wrapped offset.  A CAST from int32 to
int64 of such arithmetic (scalar or tile: ``arange``, splats and broadcasts included) is
replaced by the arithmetic itself recomputed in int64.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir
from tilejit.ir import ConstAttrs, TileOp

# int32 ops whose int64 form computes the same mathematical value from widened operands
# (Python semantics: floor division and modulo as NumPy's, which the backends implement)
WIDENED = frozenset({TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.FLOORDIV, TileOp.MOD,
                     TileOp.MAXIMUM, TileOp.MINIMUM, TileOp.NEG})
I64 = ir.scalar(D.int64)
SHAPE_OPS = frozenset({TileOp.SPLAT, TileOp.BROADCAST, TileOp.RESHAPE})


def _large_arrays(fn: ir.Function) -> set:
    specs = fn.meta.get("specs") or []
    return {a for a, s in zip(fn.args, specs) if getattr(s, "large", False)}


def widen_offsets(fn: ir.Function) -> ir.Function:
    _block(fn.body, _large_arrays(fn))
    return fn


def _block(block: ir.Block, large: set) -> None:
    out: list[ir.Operation] = []
    memo: dict[ir.Value, ir.Value] = {}
    for o in block.ops:
        for r in o.regions:
            _block(r, large)
        if o.op in (TileOp.LOAD, TileOp.STORE, TileOp.ATOMIC) and o.operands[0] in large:
            last = 1 + o.operands[0].type.rank
            for i in range(1, last):
                o.operands[i] = _wide(o.operands[i], out, memo, o.loc)
        elif o.op is TileOp.CAST and _widening(o) and _computed(o.operands[0]):
            o.operands[0] = _wide(o.operands[0], out, memo, o.loc)      # (now an int64 -> int64 cast)
        out.append(o)
    block.ops = out


def _widening(o: ir.Operation) -> bool:
    return o.operands[0].type.dtype == D.int32 and o.result.type.dtype == D.int64


def _computed(v: ir.Value) -> bool:
    """``v`` is int32 arithmetic (not a leaf such as a program id or an argument)."""
    o = v.owner
    return o is not None and (o.op in WIDENED or o.op in SHAPE_OPS)


def _wide(v: ir.Value, out: list, memo: dict, loc) -> ir.Value:
    """``v`` (an int32 scalar or tile) as int64, computed by ops appended to ``out`` (memoised
    per block)."""
    if not isinstance(v.type, ir.TileType) or v.type.dtype != D.int32:
        return v
    if v in memo:
        return memo[v]
    o = v.owner
    wide = ir.TileType(v.type.shape, D.int64)
    if o is not None and o.op is TileOp.CONSTANT:
        new = ir.Operation(TileOp.CONSTANT, [], [wide], ConstAttrs(int(o.attrs.value)), loc=o.loc)
    elif o is not None and o.op in WIDENED and all(x.type == v.type for x in o.operands):
        new = ir.Operation(o.op, [_wide(x, out, memo, loc) for x in o.operands], [wide], o.attrs, loc=o.loc)
    elif o is not None and o.op in SHAPE_OPS and o.operands[0].type.dtype == D.int32:
        new = ir.Operation(o.op, [_wide(o.operands[0], out, memo, loc)], [wide], o.attrs, loc=o.loc)
    else:                                       # program id, loop variable, argument, arange, ...
        new = ir.Operation(TileOp.CAST, [v], [wide], loc=o.loc if o is not None else loc)
    out.append(new)
    memo[v] = new.result
    return new.result
