"""Softmax exponentials as ``exp2`` with a folded log2(e) scale (tile IR -> tile IR).

``exp(a - b)`` where ``b`` is a row or running maximum (a MAXIMUM or a REDUCE(max), or a row's
maximum combined over a cluster (CLUSTER_REDUCE(max), ``cluster_rows``), or a part's maximum read
as 0 where it is -inf (``where(m == -inf, 0, m)``: every element is then -inf), possibly
seen through SPLAT / RESHAPE / BROADCAST) becomes ``exp2(fma(a, L, nb))`` with
``L = float32(log2 e)`` and ``nb = b0 * -L`` computed once at the maximum's own (small) shape,
then reshaped/broadcast like ``b`` was.  Per element that is one FFMA and one MUFU.EX2 instead
of EXP's accurate ~7-instruction sequence (FlashAttention's form).  float32 EXP only.

``exp((a - b) * c)`` (or ``c * (a - b)``), the softmax kept in the raw scores' units and scaled
inside the exponential, becomes ``exp2(fma(a, K, nb))`` with ``K = float32(c * L)`` and
``nb = b0 * -K`` where ``c`` is known positive (``positive_scale``: a finite CONSTANT > 0, or a
float parameter the launch specialised as positive), so the argument is still <= 0 and the
bound below holds with the one rounding of K added (|x| * 2**-24 relative, as L's own).  Without
it that spelling took the accurate EXP: the attention loop of ``scripts/probes/attention_exp2.py``
(``raw``) was 1951 SASS instructions against 633 now (sm_90a, D128 128x128, 8 warps).  The same
for ``exp2((a - b) * c)`` (k = 1 in place of L): one FFMA a score instead of FADD and FMUL.

Why the pattern restriction makes the fast form accurate enough.  In a softmax ``a <= b``, so
the argument x = a - b is <= 0 and exp(x) is in (0, 1]; errors are *absolute*, at most ~1.
The exponent t = x*log2(e) carries three errors (L*ln2 = 1, u = 2**-24):
  * ``nb = -(b*L)`` rounds once: half an ulp of |b*L| <= |b|*L*u in t, i.e. <= |b|*u relative
    in the result; for |b| < 44 (|b*L| < 64) that is 2**-19 * ln2 = 1.3e-6 absolute;
  * the FMA rounds a*L + nb once: <= |t|*u in t; 2**t * |t| * u * ln2 <= 2.2e-8;
  * L differs from log2(e) by 1.9e-8 (relative 1.3e-8): |x| * 1.3e-8 * exp(x) <= 5e-9.
ex2.approx.ftz adds ~2 ulp (<= 1.2e-7 for results <= 1) and flushes results below 2**-126
(x < -87.3) to 0 (absolute error < 1.2e-38).  So |fast - exp(x)| <= 1.5e-6 < 2e-6 for
|b| < 44 and any x <= 0 (tests/test_fold_exp.py checks x in [-100, 0]); for larger maxima the
bound is |b| * 6e-8, the same error FlashAttention accepts.  A general exp keeps its accurate
lowering: for x > 0 the result is unbounded and the relative error (|b| + |x*L|) * u grows
with the argument, and without a maximum nothing bounds x.  The pass trusts the pattern: it
does not prove a <= b (for an unrelated ``a`` the error is still (|b| + |x*L|) * u relative).

Special values: masked scores a = -inf give -inf*L + nb = -inf (nb finite) and exp2(-inf) = 0,
as exp(-inf - b) did; a fully masked row (a = b = -inf) gives nb = +inf and -inf + inf = NaN,
as -inf - (-inf) = NaN did.  At a = b the result is 2**(rounding error of b*L), up to
|b|*u above 1, where exp gave 1.  A maximum above 2.3e38 makes nb overflow to -inf (NaN or 0
where exp(x) was finite): such scores are outside what a softmax should see.
"""
from __future__ import annotations

import math

import numpy as np

from tilejit import dtypes, ir
from tilejit.ir import ConstAttrs, ReduceKind, TileOp, TileType

LOG2E = float(np.float32(math.log2(math.e)))          # 1.4426950216293335, the float32 value
SHAPE_OPS = frozenset({TileOp.BROADCAST, TileOp.RESHAPE, TileOp.SPLAT})


# --------------------------------------------------------------------------------- matching
def is_maximum(v: ir.Value) -> bool:
    o = v.owner
    if o is None:
        return False
    if o.op is TileOp.WHERE:                # where(m == -inf, 0, m): a part's maximum (cluster_rows)
        cond, zero, m = o.operands
        test = cond.owner
        return (constant_of(zero) == 0.0 and test is not None and test.op is TileOp.EQ
                and test.operands[0] is m and constant_of(test.operands[1]) == float("-inf") and is_maximum(m))
    return o.op is TileOp.MAXIMUM or (o.op in (TileOp.REDUCE, TileOp.CLUSTER_REDUCE) and o.attrs.kind is ReduceKind.MAX)


def constant_of(v: ir.Value):
    """The value of a CONSTANT, seen through SPLAT (None for anything else)."""
    while v.owner is not None and v.owner.op is TileOp.SPLAT:
        v = v.owner.operands[0]
    return v.owner.attrs.value if v.owner is not None and v.owner.op is TileOp.CONSTANT else None


def maximum_chain(b: ir.Value) -> tuple[ir.Value, list[ir.Operation]] | None:
    """``(b0, chain)``: b is the maximum b0 through the shape ops ``chain`` (innermost first),
    or None when b is not a maximum seen through SPLAT / RESHAPE / BROADCAST."""
    chain = []
    while b.owner is not None and b.owner.op in SHAPE_OPS:
        chain.append(b.owner)
        b = b.owner.operands[0]
    return (b, chain[::-1]) if is_maximum(b) else None


def positive_scale(v: ir.Value, positive_args: set):
    """What ``v`` multiplies by when that is known > 0: a float (a finite float32 CONSTANT, of any
    shape, through SPLATs) or a float32 parameter the launch specialised as positive (its Value,
    ``ScalarSpec.positive``); else None."""
    while v.owner is not None and v.owner.op is TileOp.SPLAT:
        v = v.owner.operands[0]
    if v.type.dtype != dtypes.float32:
        return None
    value = constant_of(v)
    if value is not None:
        return float(value) if isinstance(value, float) and 0 < value < math.inf else None
    return v if v in positive_args else None


def positive_args(fn: ir.Function) -> set:
    """The float parameters the launch specialised as positive."""
    return {a for a, s in zip(fn.args, fn.meta.get("specs") or []) if getattr(s, "positive", False)}


def match(o: ir.Operation, positive: set = frozenset()):
    """``(a, b0, chain, c, k)`` when ``o`` is a float32 ``exp(a - b)`` with b a maximum (c None),
    ``exp((a - b) * c)`` with c known positive (``positive_scale``), both with k = L, or
    ``exp2((a - b) * c)`` (k = 1), else None."""
    if o.op not in (TileOp.EXP, TileOp.EXP2) or o.result.type.dtype != dtypes.float32:
        return None
    x, c = o.operands[0], None
    mul = x.owner
    if mul is not None and mul.op is TileOp.MUL:
        for diff, factor in (mul.operands, mul.operands[::-1]):
            if diff.owner is not None and diff.owner.op is TileOp.SUB and diff.type == x.type:
                c = positive_scale(factor, positive)
                if c is not None:
                    x = diff
                    break
    if o.op is TileOp.EXP2 and c is None:
        return None                        # exp2(a - b): one FADD, as short as an FFMA
    sub = x.owner
    if sub is None or sub.op is not TileOp.SUB or sub.result.type.dtype != dtypes.float32:
        return None
    a, b = sub.operands
    found = maximum_chain(b)
    return None if found is None else (a, *found, c, LOG2E if o.op is TileOp.EXP else 1.0)


# --------------------------------------------------------------------------------- rewriting
def _constant(value: float, type_: TileType, loc: ir.Loc) -> ir.Operation:
    return ir.Operation(TileOp.CONSTANT, [], [type_], ConstAttrs(value), loc=loc)


def times(c, k: float, type_: TileType, loc: ir.Loc) -> tuple[list[ir.Operation], ir.Value]:
    """(ops, value): ``c * k`` at ``type_``'s shape, for c None (1), a float (one CONSTANT) or a
    float32 scalar Value (the scalar product, then its SPLAT).  ``times(c, -k)`` is exactly
    ``-times(c, k)``."""
    if c is None or isinstance(c, float):
        value = k if c is None else float(np.float32(c) * np.float32(k))
        const = _constant(value, type_, loc)
        return [const], const.result
    scalar, ops = TileType((), dtypes.float32), []
    if k != 1.0:
        ops.append(_constant(k, scalar, loc))
        ops.append(ir.Operation(TileOp.MUL, [c, ops[0].result], [scalar], loc=loc))
        c = ops[-1].result
    if type_.shape != ():
        ops.append(ir.Operation(TileOp.SPLAT, [c], [type_], loc=loc))
        c = ops[-1].result
    return ops, c


def negated_scaled_max(b0: ir.Value, loc: ir.Loc, c=None, k: float = LOG2E) -> list[ir.Operation]:
    """``nb = b0 * -(c k)`` at b0's shape (negating is exact, so this is -(b0 * (c k)))."""
    ops, minus_k = times(c, -k, b0.type, loc)
    return ops + [ir.Operation(TileOp.MUL, [b0, minus_k], [b0.type], loc=loc)]


def fast_exp(exp: ir.Operation, a: ir.Value, nb: ir.Value, chain: list[ir.Operation], c=None,
             k: float = LOG2E) -> list[ir.Operation]:
    """The ops replacing ``exp``: nb re-shaped like the maximum was, ``exp2(fma(a, c k, nb))``;
    the EXP2 takes over the EXP's result value, so its users need no update."""
    ops = []
    for shape_op in chain:
        ops.append(ir.Operation(shape_op.op, [nb], [shape_op.result.type], shape_op.attrs, loc=exp.loc))
        nb = ops[-1].result
    scale_ops, scale = times(c, k, a.type, exp.loc)
    fma = ir.Operation(TileOp.FMA, [a, scale, nb], [a.type], loc=exp.loc)
    exp2 = ir.Operation(TileOp.EXP2, [fma.result], [], loc=exp.loc)
    exp2.results = [exp.result]
    exp.result.owner = exp2
    return ops + scale_ops + [fma, exp2]


def _plan(block: ir.Block, after: dict, replace: dict, nbs: dict, positive: set) -> None:
    """Fill ``after`` (op -> ops to insert after it) and ``replace`` (EXP -> its new ops)."""
    for o in block.ops:
        for r in o.regions:
            _plan(r, after, replace, nbs, positive)
        found = match(o, positive)
        if found is None:
            continue
        a, b0, chain, c, k = found
        key = (b0, c if isinstance(c, ir.Value) else ("c", c), k)
        if key not in nbs:                 # computed once, right after the maximum: it dominates
            ops = negated_scaled_max(b0, o.loc, c, k)
            after.setdefault(b0.owner, []).extend(ops)
            nbs[key] = ops[-1].result
        replace[o] = fast_exp(o, a, nbs[key], chain, c, k)


def apply(block: ir.Block, replace: dict, before: dict | None = None, after: dict | None = None) -> None:
    """Rebuild ``block`` and its regions: each op becomes ``before[op] + replace[op] (or op) +
    after[op]``."""
    before, after, ops = before or {}, after or {}, []
    for o in block.ops:
        for r in o.regions:
            apply(r, replace, before, after)
        ops.extend(before.get(o, []))
        ops.extend(replace.get(o, [o]))
        ops.extend(after.get(o, []))
    block.ops = ops


def fold_exp(fn: ir.Function) -> ir.Function:
    """Rewrite every float32 ``exp(a - maximum)`` into ``exp2(fma(a, L, -maximum*L))``, and
    ``exp((a - maximum) * c)`` for a positive c into ``exp2(fma(a, c*L, -maximum*c*L))`` and
    ``exp2((a - maximum) * c)`` into ``exp2(fma(a, c, -maximum*c))`` (in place; returns
    ``fn``).  The SUB, MUL and the old shape ops are left for ``dce``."""
    after, replace = {}, {}
    _plan(fn.body, after, replace, {}, positive_args(fn))
    apply(fn.body, replace, after=after)
    return fn
