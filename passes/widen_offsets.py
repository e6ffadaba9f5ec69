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


def _large_arrays(fn: ir.Function) -> set:
    specs = fn.meta.get("specs") or []
    return {a for a, s in zip(fn.args, specs) if getattr(s, "large", False)}


def widen_offsets(fn: ir.Function) -> ir.Function:
    large = _large_arrays(fn)
    if large:
        _block(fn.body, large)
    return fn


def _block(block: ir.Block, large: set) -> None:
    out: list[ir.Operation] = []
    memo: dict[ir.Value, ir.Value] = {}
    for o in block.ops:
        for r in o.regions:
            _block(r, large)
        if o.op in (TileOp.LOAD, TileOp.STORE) and o.operands[0] in large:
            last = len(o.operands) - (1 if o.op is TileOp.STORE else 0)
            for i in range(1, last):
                o.operands[i] = _wide(o.operands[i], out, memo, o.loc)
        out.append(o)
    block.ops = out


def _wide(v: ir.Value, out: list, memo: dict, loc) -> ir.Value:
    """``v`` as int64, computed by ops appended to ``out`` (memoised per block)."""
    if v.type != ir.scalar(D.int32):
        return v
    if v in memo:
        return memo[v]
    o = v.owner
    if o is not None and o.op is TileOp.CONSTANT:
        new = ir.Operation(TileOp.CONSTANT, [], [I64], ConstAttrs(int(o.attrs.value)), loc=o.loc)
    elif o is not None and o.op in WIDENED and all(x.type == v.type for x in o.operands):
        new = ir.Operation(o.op, [_wide(x, out, memo, loc) for x in o.operands], [I64], o.attrs, loc=o.loc)
    else:                                       # program id, loop variable, argument, ...
        new = ir.Operation(TileOp.CAST, [v], [I64], loc=o.loc if o is not None else loc)
    out.append(new)
    memo[v] = new.result
    return new.result
