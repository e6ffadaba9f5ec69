"""A sum of squared deviations from a per-row value (a layernorm's variance) accumulated in the
chunk loop of the earlier ``sum(x)`` (``chunk_rows.ONE_PASS_VARIANCE``): one read of the row fewer.

    variance_pairs(top, plan) -> {variance sum op: VariancePair}
    variance_loop(b, pair, plan, remap, const) -> (sum(x), state)     at sum(x)'s place
    variance_sum(b, op, pair, state, remap) -> the variance sum      at its own place

The loop keeps per-slot deviations from the row's first value ``s``: ``S1 = sum(m (x - s))``,
``S2 = sum(m (x - s)**2)`` and ``N = sum(m)``; once the row value ``mu`` exists the variance sum
is ``S2 + 2 (s - mu) S1 + (s - mu)**2 N`` (exact in real arithmetic for any ``mu``; the shift
keeps the float32 cancellation that of the two-pass form).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import dtypes, ir
from tilejit.ir import ReduceKind, TileOp
from tilejit.passes.chunk_loops import ChunkPlan, _Chunk, _loop, _wide_loads


@dataclass(frozen=True)
class VariancePair:
    """``r2 = sum(c * c)`` with ``c = x - broadcast(mu)`` or ``where(m, x - broadcast(mu), 0)``,
    where ``r1 = sum(x)`` comes first and ``mu`` is any per-row value (a layernorm's mean)."""
    r1: ir.Operation
    x: ir.Value
    mu: ir.Value
    mask: ir.Value | None


def _zero(v: ir.Value) -> bool:
    o = v.owner
    return o is not None and o.op is TileOp.CONSTANT and o.attrs.value == 0


def _defined_before(v: ir.Value, r1: ir.Operation, top: list, wide: frozenset) -> bool:
    """Every narrow value the wide value ``v`` is made from exists where ``r1`` runs (so a
    loop at ``r1`` can make ``v``'s chunks), and ``v`` does not read ``r1``'s result."""
    if v is r1.result:
        return False
    if v in wide:
        return all(_defined_before(x, r1, top, wide) for x in v.owner.operands)
    return v.owner is None or v.owner not in top or top.index(v.owner) < top.index(r1)


def _squared(q: ir.Operation) -> ir.Value | None:
    """``c`` where ``q`` is ``c * c`` or ``c ** 2``."""
    if q.op is TileOp.MUL and q.operands[0] is q.operands[1]:
        return q.operands[0]
    if q.op is TileOp.POW and q.operands[1].owner is not None and q.operands[1].owner.op is TileOp.CONSTANT \
            and q.operands[1].owner.attrs.value == 2:
        return q.operands[0]
    return None


def _row_value(v: ir.Value) -> ir.Value | None:
    """The per-row value ``v`` spreads along the row: a BROADCAST or SPLAT of it, through a unit-dim
    RESHAPE (``mean[:, None]``)."""
    o = v.owner
    if o is None or o.op not in (TileOp.BROADCAST, TileOp.SPLAT):
        return None
    mu = o.operands[0]
    if mu.owner is not None and mu.owner.op is TileOp.RESHAPE:
        mu = mu.owner.operands[0]
    return mu


def variance_pairs(top: list, plan: ChunkPlan) -> dict:
    """sum REDUCE op -> ``VariancePair`` for each sum of squared deviations that the loop of an
    earlier ``sum(x)`` can accumulate (float32 ``x``, the last axis; ``c * c`` or ``c ** 2``, the
    row value broadcast, splat or reshaped, keepdims or not), where ``x``'s row is not stashed (a
    stashed row is read again from shared memory, and the fused loop's accumulators cost
    registers: a 16K-column layernorm spilled)."""
    pairs, f32 = {}, dtypes.float32
    sums = {o.operands[0]: o for o in top if o.op is TileOp.REDUCE and o.attrs.kind is ReduceKind.SUM
            and o.operands[0] in plan.wide}
    for r2 in top:
        if not (r2.op is TileOp.REDUCE and r2.attrs.kind is ReduceKind.SUM and r2.operands[0] in plan.wide):
            continue
        c, mask = _squared(r2.operands[0].owner), None
        if c is None:
            continue
        if c.owner.op is TileOp.WHERE:
            mask, c, other = c.owner.operands
            if not _zero(other) or mask not in plan.wide:
                continue
        if c.owner.op is not TileOp.SUB:
            continue
        x, spread = c.owner.operands
        r1, mu = sums.get(x), _row_value(spread)
        if (r1 is None or r1 is r2 or top.index(r1) > top.index(r2) or x.type.dtype != f32 or mu is None
                or mu.type != r1.result.type or r1.result.type != r2.result.type
                or r1.attrs.axis != r2.attrs.axis or any(p.r1 is r1 for p in pairs.values())):
            continue
        if mask is not None and not _defined_before(mask, r1, top, plan.wide):
            continue
        if plan.stashes and any(v in plan.stashes.ids for v in _wide_loads(x, plan.wide, [])):
            continue            # the later loop reads the row from shared memory: nothing to save
        pairs[r2] = VariancePair(r1, x, mu, mask)
    return pairs


def variance_loop(b: ir.Builder, pair: VariancePair, plan: ChunkPlan, remap, const):
    """``sum(x)`` of ``pair.r1`` from a loop that also accumulates, per element slot of the chunk,
    the deviations from a shift ``s`` (the row's first value, loaded before the loop):
    ``S1 = sum(m * (x - s))``, ``S2 = sum(m * (x - s)**2)`` and, with a mask, ``N = sum(m)``
    and ``sum(x)`` itself (without one, ``sum(x) = sum(S1) + s * W``).  Returns (the sum, the
    state ``variance_sum`` needs)."""
    r1, x, loc = pair.r1, pair.x, pair.r1.loc
    f32, i32 = dtypes.float32, dtypes.int32
    ct = ir.TileType(x.type.shape[:-1] + (plan.chunk,), f32)
    rt = r1.result.type

    def ew(builder, op, operands, t=ct):
        return builder.create(op, operands, [t], loc=loc).result

    def splat(value, builder, t=ct):
        return ew(builder, TileOp.SPLAT, [const(value, f32, loc)], t)

    first = ChunkPlan(plan.width, 1, plan.wide, plan.elementwise, False, plan.num_warps, None)
    shift = _Chunk(b, first, const(0, i32, loc), remap).value(x)          # (…, 1): the row's first value
    masked = pair.mask is not None
    inits = [splat(0.0, b) for _ in range(4 if masked else 2)]
    loop, body, chunk = _loop(b, r1, plan, remap, const, x, inits)
    s1, s2 = body.block.args[1:3]
    xc = chunk.value(x)
    d = ew(body, TileOp.SUB, [xc, ew(body, TileOp.BROADCAST, [shift])])
    if masked:
        mc = chunk.value(pair.mask)
        d = ew(body, TileOp.WHERE, [mc, d, splat(0.0, body)])
    outs = [ew(body, TileOp.ADD, [s1, d]), ew(body, TileOp.FMA, [d, d, s2])]
    if masked:
        outs.append(ew(body, TileOp.ADD, [body.block.args[3], ew(body, TileOp.WHERE, [mc, splat(1.0, body),
                                                                                     splat(0.0, body)])]))
        outs.append(ew(body, TileOp.ADD, [body.block.args[4], xc]))
    body.create(TileOp.YIELD, outs + chunk.nexts, loc=loc)

    def total(v):
        return b.create(TileOp.REDUCE, [v], [rt], r1.attrs, loc=loc).result
    sum1, sum2 = total(loop.results[0]), total(loop.results[1])
    first_value = total(shift)                  # (one element: exact) in the sums' shape
    if masked:
        count, result = total(loop.results[2]), total(loop.results[3])
    else:
        count = const(float(plan.width), f32, loc)
        if isinstance(rt, ir.TileType):
            count = ew(b, TileOp.SPLAT, [count], rt)
        result = ew(b, TileOp.FMA, [first_value, count, sum1], rt)
    result.hint = r1.result.hint
    return result, (first_value, sum1, sum2, count)


def variance_sum(b: ir.Builder, r2: ir.Operation, pair: VariancePair, state, remap) -> ir.Value:
    """``r2``'s ``sum(m * (x - mu)**2)`` from ``variance_loop``'s sums, once ``mu`` exists:
    ``sum(S2) + 2 (s - mu) sum(S1) + (s - mu)**2 sum(N)``."""
    shift, sum1, sum2, count = state
    loc, rt = r2.loc, r2.result.type

    def ew(op, operands):
        return b.create(op, operands, [rt], loc=loc).result
    gap = ew(TileOp.SUB, [shift, remap(pair.mu)])
    result = ew(TileOp.FMA, [gap, ew(TileOp.FMA, [gap, count, ew(TileOp.ADD, [sum1, sum1])]), sum2])
    result.hint = r2.result.hint
    return result
