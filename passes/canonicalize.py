"""Canonicalisation of tile IR: local rewrites as a rule table, plus constant folding.

A rule is ``(applies(o, *operands), rewrite(o, *operands))``; ``rewrite`` returns an existing
value to use instead of the op's result, or a new Operation to put in its place.  Rules never
change a result's type, and float rules are exact in IEEE arithmetic (``x + 0.0`` is *not*
``x`` when x is -0.0, so only ``x + (-0.0)`` folds for floats).

A transpose inside a loop of a tile defined before it (``tj.dot(k.T, ...)`` where ``k`` was
loaded before the loop) is moved before the loop (``hoist_invariant_transposes``): the same
value, computed once, and the DOT then sees a loop-invariant operand it can stage once, as it
does for ``k_t = k.T`` written before the loop.
"""
from __future__ import annotations

import math

import numpy as np

from tilejit import ir
from tilejit.ir import BINARY_OPS, COMPARE_OPS, ConstAttrs, TileOp

# --------------------------------------------------------------------------------- matching
def const_of(v: ir.Value):
    """The Python constant ``v`` is filled with (a CONSTANT, or a SPLAT of one), else None."""
    o = v.owner
    if o is None:
        return None
    if o.op is TileOp.CONSTANT:
        return o.attrs.value
    if o.op is TileOp.SPLAT:
        return const_of(o.operands[0])
    return None


def is_const(v: ir.Value, value) -> bool:
    c = const_of(v)
    if c is None or type(c) is bool or c != value:
        return False
    if value == 0 and isinstance(value, float):       # -0.0 and 0.0 differ as addends
        return math.copysign(1.0, float(c)) == math.copysign(1.0, value)
    return True


def is_int(v: ir.Value) -> bool:
    return v.type.dtype.is_int


def constant(o: ir.Operation, value) -> ir.Operation:
    return ir.Operation(TileOp.CONSTANT, [], [o.result.type], ConstAttrs(value), loc=o.loc)


# ------------------------------------------------------------------------------------ rules
RULES = {
    TileOp.MUL: [
        (lambda o, x, y: is_const(y, 1), lambda o, x, y: x),                    # x*1 -> x
        (lambda o, x, y: is_const(x, 1), lambda o, x, y: y),                    # 1*x -> x
    ],
    TileOp.ADD: [
        (lambda o, x, y: is_int(x) and is_const(y, 0), lambda o, x, y: x),     # x+0 -> x (ints)
        (lambda o, x, y: is_int(x) and is_const(x, 0), lambda o, x, y: y),     # 0+x -> x (ints)
        (lambda o, x, y: is_const(y, -0.0), lambda o, x, y: x),                # x+(-0.0) -> x
    ],
    TileOp.SUB: [
        (lambda o, x, y: is_const(y, 0 if is_int(x) else 0.0), lambda o, x, y: x),  # x-0 -> x (not x-(-0.0))
    ],
    TileOp.TRUEDIV: [
        (lambda o, x, y: not is_int(x) and is_const(y, 1), lambda o, x, y: x),  # x/1.0 -> x
    ],
    TileOp.FLOORDIV: [
        (lambda o, x, y: is_int(x) and is_const(y, 1), lambda o, x, y: x),     # x//1 -> x (ints)
    ],
    TileOp.CAST: [
        (lambda o, x: x.type == o.result.type, lambda o, x: x),                 # cast(x: T, T) -> x
    ],
    TileOp.BROADCAST: [
        (lambda o, x: x.type == o.result.type, lambda o, x: x),                 # broadcast to own shape -> x
    ],
    TileOp.RESHAPE: [
        (lambda o, x: x.type == o.result.type, lambda o, x: x),                 # reshape to own shape -> x
    ],
    TileOp.TRANS: [
        (lambda o, x: tuple(o.attrs.perm) == tuple(range(len(o.attrs.perm))),
         lambda o, x: x),                                                       # trans(x, identity) -> x
    ],
    TileOp.SPLAT: [
        (lambda o, x: const_of(x) is not None,
         lambda o, x: constant(o, const_of(x))),                                # splat(c) -> constant tile c
    ],
}


# -------------------------------------------------------------------------- constant folding
_FOLD = {
    TileOp.ADD: np.add, TileOp.SUB: np.subtract, TileOp.MUL: np.multiply,
    TileOp.MAXIMUM: np.maximum, TileOp.MINIMUM: np.minimum,
    TileOp.AND: np.bitwise_and, TileOp.OR: np.bitwise_or, TileOp.XOR: np.bitwise_xor,
    TileOp.EQ: np.equal, TileOp.NE: np.not_equal, TileOp.LT: np.less, TileOp.LE: np.less_equal,
    TileOp.GT: np.greater, TileOp.GE: np.greater_equal,
}


def _python(value, dtype):
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        return int(value)
    return float(value)


def fold(o: ir.Operation):
    """A CONSTANT replacing ``o`` when all its operands are constants and NumPy computes it the
    way the device does (integer and float32 arithmetic, comparisons, casts), else None."""
    values = [const_of(x) for x in o.operands]
    if not o.results or not o.operands or any(v is None for v in values):
        return None
    src, dst = o.operands[0].type.dtype, o.result.type.dtype
    if o.op is TileOp.CAST and (src.is_int or src.is_bool or dst == src):
        arr = np.asarray(values[0], src.np)
        with np.errstate(all="ignore"):                 # int -> float16 overflows to inf, as on the GPU
            return constant(o, _python(arr.astype(dst.np)[()], dst))
    if o.op not in _FOLD or (src.is_float and src.bits != 32):
        return None
    if src.is_float and o.op in (TileOp.AND, TileOp.OR, TileOp.XOR):
        return None
    with np.errstate(all="ignore"):
        args = [np.asarray(v, src.np) for v in values]
        result = _FOLD[o.op](*args)
    return constant(o, _python(np.asarray(result).astype(dst.np)[()], dst))


assert set(_FOLD) <= BINARY_OPS | COMPARE_OPS


# ----------------------------------------------------------------------------------- driver
def rewrite(o: ir.Operation):
    """The first applicable rule's replacement for ``o`` (or its folded constant), else None."""
    for applies, make in RULES.get(o.op, ()):
        if applies(o, *o.operands):
            return make(o, *o.operands)
    if o.op is not TileOp.CONSTANT:
        return fold(o)
    return None


def _block(block: ir.Block, subst: dict) -> bool:
    changed = False
    kept = []
    for o in block.ops:
        o.operands = [subst.get(x, x) for x in o.operands]
        for r in o.regions:
            changed |= _block(r, subst)
        new = rewrite(o) if len(o.results) == 1 else None
        if new is None:
            kept.append(o)
            continue
        changed = True
        if isinstance(new, ir.Operation):
            kept.append(new)
            new = new.result
        subst[o.result] = new
    block.ops = kept
    return changed


def _zero_acc_dot(v: ir.Value, uses: dict) -> ir.Operation | None:
    o = v.owner
    if o is None or o.op is not TileOp.DOT or len(uses.get(v, ())) != 1:
        return None
    return o if is_const(o.operands[2], 0.0) or is_const(o.operands[2], 0) else None


def fuse_dot_accumulate(block: ir.Block, uses: dict) -> None:
    """``x + dot(a, b, 0)`` -> ``dot(a, b, x)`` when the DOT has no other use: the tensor cores
    add into ``x`` directly, so the product and ``x`` are not both live (FlashAttention's
    ``acc * alpha + dot(p, v)`` would otherwise hold two accumulators).  Like FMA contraction,
    this rounds once where the source rounds twice."""
    for i, o in enumerate(block.ops):
        for r in o.regions:
            fuse_dot_accumulate(r, uses)
        if o.op is not TileOp.ADD:
            continue
        for d, x in ((o.operands[1], o.operands[0]), (o.operands[0], o.operands[1])):
            dot = _zero_acc_dot(d, uses)
            # same block only: a DOT before a loop must not move into it (it would rerun there)
            if dot is not None and x.type == dot.result.type and dot in block.ops:
                new = ir.Operation(TileOp.DOT, [dot.operands[0], dot.operands[1], x], [o.result.type],
                                   dot.attrs, loc=dot.loc)
                new.results[0] = o.result          # the ADD's users keep their operand
                o.result.owner = new
                block.ops[i] = new
                break


def hoist_invariant_transposes(block: ir.Block) -> None:
    """Move each TRANS in a FOR's body whose operand is defined outside that body to just before
    the FOR (inner loops first, so a transpose climbs out of every loop it does not depend on)."""
    out: list[ir.Operation] = []
    for o in block.ops:
        for r in o.regions:
            hoist_invariant_transposes(r)
        if o.op is TileOp.FOR:
            body = o.regions[0]
            inside = {id(a) for a in body.args} | {id(r) for op in body.walk() for r in op.results}
            moved = [t for t in body.ops if t.op is TileOp.TRANS and id(t.operands[0]) not in inside]
            body.ops = [t for t in body.ops if t not in moved]
            out += moved
        out.append(o)
    block.ops[:] = out


def canonicalize(fn: ir.Function) -> ir.Function:
    """Apply the rules and constant folding until nothing changes, hoist loop-invariant
    transposes, then contract ``x + dot(a, b, 0)`` (in place; returns ``fn``)."""
    for _ in range(8):
        if not _block(fn.body, {}):
            break
    hoist_invariant_transposes(fn.body)
    fuse_dot_accumulate(fn.body, ir.users(fn))
    return fn
