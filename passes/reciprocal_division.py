"""Division by a broadcast value as one reciprocal and a multiply, for 16-bit float results
(tile IR -> tile IR).

    reciprocal_division(fn) -> fn

``a / b`` where the result is float16, bfloat16 or float8 and ``b`` is a smaller value ``b0``
seen through SPLAT / BROADCAST / RESHAPE (softmax's ``t / sum(t)``, a row statistic) becomes
``cast(float32(a) * broadcast(1 / float32(b0)))``: one IEEE float32 reciprocal per value of
``b0`` instead of a division per element.  The float32 product is within 1.5 float32 ulps of
the quotient, so its rounding to 16 bits is the correctly rounded quotient but for near-ties
(as ``div.full`` is, which 16-bit divisions use anyway); float32 results keep IEEE division.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir
from tilejit.ir import ConstAttrs, TileOp, TileType

SHAPE_OPS = frozenset({TileOp.BROADCAST, TileOp.RESHAPE, TileOp.SPLAT})


def _size(t: TileType) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def match(o: ir.Operation):
    """``(a, b0, chain)`` for a 16-bit ``a / b`` with ``b`` a smaller ``b0`` broadcast, else None."""
    if o.op is not TileOp.TRUEDIV or not o.result.type.dtype.is_float or o.result.type.dtype.bits > 16:
        return None
    a, b = o.operands
    chain = []
    while b.owner is not None and b.owner.op in SHAPE_OPS:
        chain.append(b.owner)
        b = b.owner.operands[0]
    if not chain or _size(b.type) >= _size(o.result.type) or not b.type.dtype.is_float:
        return None
    return a, b, chain[::-1]


def rewrite(o: ir.Operation, a: ir.Value, b0: ir.Value, chain: list) -> list[ir.Operation]:
    """The ops replacing ``o``; the last CAST takes over its result value."""
    f32, loc = D.float32, o.loc
    wide = ir.Operation(TileOp.CAST, [b0], [TileType(b0.type.shape, f32)], loc=loc)
    one = ir.Operation(TileOp.CONSTANT, [], [TileType(b0.type.shape, f32)], ConstAttrs(1.0), loc=loc)
    recip = ir.Operation(TileOp.TRUEDIV, [one.result, wide.result], [TileType(b0.type.shape, f32)], loc=loc)
    ops, r = [wide, one, recip], recip.result
    for shape_op in chain:
        ops.append(ir.Operation(shape_op.op, [r], [TileType(shape_op.result.type.shape, f32)], shape_op.attrs, loc=loc))
        r = ops[-1].result
    a32 = ir.Operation(TileOp.CAST, [a], [TileType(a.type.shape, f32)], loc=loc)
    mul = ir.Operation(TileOp.MUL, [a32.result, r], [TileType(a.type.shape, f32)], loc=loc)
    back = ir.Operation(TileOp.CAST, [mul.result], [], loc=loc)
    back.results = [o.result]
    o.result.owner = back
    return ops + [a32, mul, back]


def _block(block: ir.Block) -> None:
    out = []
    for o in block.ops:
        for r in o.regions:
            _block(r)
        found = match(o)
        out.extend(rewrite(o, *found) if found else [o])
    block.ops = out


def reciprocal_division(fn: ir.Function) -> ir.Function:
    _block(fn.body)
    return fn
