"""Multiply-adds contracted into one FMA (tile IR -> tile IR), as CUDA's ``--fmad=true`` and
Triton's ``enable_fp_fusion`` do by default:

    a * b + c  ->  fma(a, b, c)        c + a * b  ->  fma(a, b, c)
    a * b - c  ->  fma(a, b, -c)       c - a * b  ->  fma(-a, b, c)

on float32 tiles and scalars, where the product has no other use and sits in the
same block as the sum (a product hoisted out of a loop stays there: contracting it into the
loop would compute it every trip), and the sum is not what a loop carries to its next trip: an
accumulator (``acc + x * x`` in a chunked row loop, ``acc + dot * scale`` in a block-scaled
GEMM) keeps its product and sum apart, as those loops were tuned (contracted, RMSNorm's
bfloat16 65536-column loop needed more registers than its occupancy allows and spilled 16
bytes).  The negation is free: ptxas folds it into the FFMA's
operand.  One rounding instead of two, so the result is as accurate or more; an FMA's
instruction replaces two.  FlashAttention's softmax spelled as Triton's tutorial spells it,
``exp2(s * qk_scale - m)``, becomes one FFMA and one MUFU.EX2 per score.

float64 keeps its products and sums apart: its math library (``frontend/mathlib.py``'s exp, log
and pow) computes exact products' rounding errors as ``a * b - p`` (Dekker), which one FMA would
turn into zero.

The FMA takes over the sum's result value (its users need no update); the product is left for
``dce``.  ``FUSE = False`` keeps every product and sum apart (``tilejit.passes.switches``).
"""
from __future__ import annotations

from tilejit import dtypes, ir
from tilejit.ir import TileOp

FUSE = True
FLOATS = (dtypes.float32,)


def fuse_fma(fn: ir.Function) -> ir.Function:
    """Contract each single-use float32 product into the sum it feeds (in place)."""
    if FUSE:
        _block(fn.body, ir.users(fn))
    return fn


def _product(v: ir.Value, here: set, uses: dict) -> ir.Operation | None:
    """The MUL of the block (``here``: its ops' ids) that only ``v``'s one user reads, else None."""
    o = v.owner
    if o is None or o.op is not TileOp.MUL or id(o) not in here or len(uses.get(v, ())) != 1:
        return None
    return o if all(x.type == v.type for x in o.operands) else None


def _block(block: ir.Block, uses: dict, carried: frozenset = frozenset()) -> None:
    """``carried``: the values a loop body yields to its next trip (its accumulators)."""
    ops, here = [], {id(o) for o in block.ops}
    for o in block.ops:
        for r in o.regions:
            yields = r.ops[-1].operands if o.op is TileOp.FOR and r.ops and r.ops[-1].op is TileOp.YIELD else ()
            _block(r, uses, frozenset(map(id, yields)))
        if o.op in (TileOp.ADD, TileOp.SUB) and o.result.type.dtype in FLOATS and id(o.result) not in carried \
                and all(x.type == o.result.type for x in o.operands):
            ops.extend(_fused(o, here, uses) or [o])
        else:
            ops.append(o)
    block.ops = ops


def _fused(o: ir.Operation, here: set, uses: dict) -> list[ir.Operation] | None:
    """The ops replacing sum ``o`` (an optional NEG, then the FMA), or None."""
    x, y = o.operands
    sub = o.op is TileOp.SUB
    product = _product(x, here, uses)
    if product is not None:                    # a*b + c, a*b - c (c negated)
        (a, b), addend, negated = product.operands, y, "addend" if sub else None
    else:                                      # c + a*b, c - a*b (a negated)
        product = _product(y, here, uses)
        if product is None:
            return None
        (a, b), addend, negated = product.operands, x, "factor" if sub else None
    out = []
    if negated == "addend":
        out.append(ir.Operation(TileOp.NEG, [addend], [addend.type], loc=o.loc))
        addend = out[-1].result
    elif negated == "factor":
        out.append(ir.Operation(TileOp.NEG, [a], [a.type], loc=o.loc))
        a = out[-1].result
    fma = ir.Operation(TileOp.FMA, [a, b, addend], [], loc=o.loc)
    fma.results = [o.result]
    o.result.owner = fma
    uses.pop(product.result, None)             # (the product is read no more)
    return out + [fma]
