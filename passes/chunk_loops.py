"""How ``passes.chunk_rows`` builds its loops over column chunks: the plan it decided
(``ChunkPlan``), the loop with its induction variable and optional prefetch, the chunk of each
wide value made again inside a loop, and the loops for a reduction (chunk-shaped accumulators,
or a CTA-wide reduction per chunk), for a store, and for softmax's max and sum together (online
softmax).

    reduce_loop(b, op, plan, remap, const) -> value      store_loop(b, op, plan, remap, const)
    softmax_pairs(top, plan) -> {sum op: max op}         online_softmax_loop(b, max op, sum op, ...)

A layernorm's variance summed in its mean's loop is ``passes.chunk_variance``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilejit import dtypes, ir
from tilejit.ir import ConstAttrs, ForAttrs, ReduceKind, TileOp

_COMBINE = {ReduceKind.SUM: TileOp.ADD, ReduceKind.MAX: TileOp.MAXIMUM, ReduceKind.MIN: TileOp.MINIMUM}


@dataclass(frozen=True)
class ChunkPlan:
    width: int          # W: the last-axis size of the wide tiles
    chunk: int          # K: columns per loop iteration (divides W)
    wide: frozenset     # the wide values (results of top-level ops)
    elementwise: bool = True    # chunk-shaped accumulators (else a CTA-wide reduction per chunk)
    prefetch: bool = False      # loops with one load prefetch the next chunk
    num_warps: int = 32         # the warps passes.warps gives the kernel
    stashes: "Stashes | None" = None    # row loads kept in shared memory for the loops after the first


class Stashes:
    """The wide LOADs whose chunks the first loop that loads them also STASHes (one shared
    buffer each), so that later loops UNSTASH them instead of reading global memory again."""

    def __init__(self, loads):
        self.ids = {v: i for i, v in enumerate(loads)}
        self.kept: set = set()                  # those a loop built so far stashed

    def chunk(self, b: ir.Builder, v: ir.Value, make, iv: ir.Value, t: ir.TileType, width: int, loc) -> ir.Value:
        """``v``'s chunk at column ``iv``: UNSTASHed when a loop before stashed it, else made by
        ``make()`` (the load) and STASHed when ``v`` is kept."""
        if v not in self.ids:
            return make()
        attrs = ir.StashAttrs(self.ids[v], width)
        if v in self.kept:
            return b.create(TileOp.UNSTASH, [iv], [t], attrs, loc=loc).result
        new = make()
        b.create(TileOp.STASH, [new, iv], [], attrs, loc=loc)
        self.kept.add(v)
        return new


def _wide_loads(v: ir.Value, wide: frozenset, found: list) -> list:
    """The wide LOADs ``v`` is computed from, in first-use order."""
    if v in wide and v not in found:
        if v.owner.op is TileOp.LOAD:
            found.append(v)
        else:
            for x in v.owner.operands:
                _wide_loads(x, wide, found)
    return found


def _loop(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const, root: ir.Value, inits: list):
    """A FOR over the chunks at ``o``'s line that makes ``root``'s chunk, with ``inits`` carried:
    (the op, the body builder, the chunk maker).  With ``plan.prefetch`` the load of a loop that has one
    is rotated: chunk 0 is loaded before the loop and each iteration loads the next chunk (the
    last one again at the end: never a column outside the tile) before it computes on the
    current one."""
    i32 = dtypes.int32
    bounds = [const(0, i32, o.loc), const(plan.width, i32, o.loc), const(plan.chunk, i32, o.loc)]
    loads = _wide_loads(root, plan.wide, []) if plan.prefetch else []
    if len(loads) > 1:
        loads = []          # (bf16 layernorm's x, weight and bias, twice over, spill at 32 warps)
    zero, last = bounds[0], const(plan.width - plan.chunk, i32, o.loc)
    first = [_Chunk(b, plan, zero, remap).value(v) for v in loads]
    iv = ir.Value(ir.scalar(i32), "chunk")
    args = [ir.Value(x.type, "partial") for x in inits] + [ir.Value(x.type, "chunk_tile") for x in first]
    body = ir.Block([iv] + args, [])
    loop = b.create(TileOp.FOR, bounds + inits + first, [x.type for x in inits + first], ForAttrs(),
                    regions=[body], loc=o.loc)
    bb = b.at(body)
    nexts = []
    if loads:
        ahead = bb.create(TileOp.ADD, [iv, bounds[2]], [iv.type], loc=o.loc).result
        ahead = bb.create(TileOp.MINIMUM, [ahead, last], [iv.type], loc=o.loc).result
        nexts = [_Chunk(bb, plan, ahead, remap).value(v) for v in loads]
    chunk = _Chunk(bb, plan, iv, remap, dict(zip(loads, args[len(inits):])))
    chunk.nexts = nexts
    return loop, bb, chunk


class _Chunk:
    """Clones the wide values a loop body needs, as chunks at column ``iv``."""

    def __init__(self, b: ir.Builder, plan: ChunkPlan, iv: ir.Value, remap, given: dict | None = None):
        self.b, self.plan, self.iv, self.remap, self.done = b, plan, iv, remap, dict(given or {})
        self.nexts: list = []           # the prefetched next chunks the loop body yields

    def offset(self, off: ir.Value, loc) -> ir.Value:
        iv = self.iv
        if off.type.dtype != iv.type.dtype:
            iv = self.b.create(TileOp.CAST, [iv], [off.type], loc=loc).result
        return self.b.create(TileOp.ADD, [off, iv], [off.type], loc=loc).result

    def value(self, v: ir.Value) -> ir.Value:
        if v not in self.plan.wide:
            return self.remap(v)
        if v in self.done:
            return self.done[v]
        o, b = v.owner, self.b
        t = ir.TileType(v.type.shape[:-1] + (self.plan.chunk,), v.type.dtype)
        if o.op is TileOp.LOAD:
            def load():
                operands = [self.remap(x) for x in o.operands]
                operands[-1] = self.offset(operands[-1], o.loc)
                return b.create(TileOp.LOAD, operands, [t], o.attrs, loc=o.loc).result
            stashes = self.plan.stashes
            new = stashes.chunk(b, v, load, self.iv, t, self.plan.width, o.loc) if stashes else load()
        elif o.op is TileOp.ARANGE:
            r = b.create(TileOp.ARANGE, [], [t], o.attrs, loc=o.loc).result
            step = b.create(TileOp.SPLAT, [self.iv], [ir.TileType(t.shape, self.iv.type.dtype)], loc=o.loc).result
            if step.type.dtype != t.dtype:
                step = b.create(TileOp.CAST, [step], [t], loc=o.loc).result
            new = b.create(TileOp.ADD, [r, step], [t], loc=o.loc).result
        else:
            new = b.create(o.op, [self.value(x) for x in o.operands], [t], o.attrs, loc=o.loc).result
        new.hint = v.hint
        self.done[v] = new
        return new


def identity(kind: ReduceKind, dt: dtypes.DType):
    if kind is ReduceKind.SUM:
        return False if dt.is_bool else 0.0 if dt.is_float else 0
    if dt.is_float:
        return float("-inf") if kind is ReduceKind.MAX else float("inf")
    if dt.is_bool:
        return kind is ReduceKind.MIN
    info = np.iinfo(dt.np)
    return int(info.min if kind is ReduceKind.MAX else info.max)


def _reduce_loop_per_chunk(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const) -> ir.Value:
    """The reduction ``o`` as a loop that reduces each chunk and combines the partial results
    (a CTA-wide reduction, with its barriers, per iteration); returns the value that replaces
    ``o``'s result."""
    t = o.result.type
    kind = o.attrs.kind
    narrow_sum = kind is ReduceKind.SUM and t.dtype.is_float and t.dtype.bits < 32
    acc_t = ir.TileType(t.shape, dtypes.float32) if narrow_sum else t
    init = const(identity(kind, acc_t.dtype), acc_t.dtype, o.loc)
    if acc_t.shape:
        init = b.create(TileOp.SPLAT, [init], [acc_t], loc=o.loc).result
    loop, body, chunk = _loop(b, o, plan, remap, const, o.operands[0], [init])
    part = body.create(TileOp.REDUCE, [chunk.value(o.operands[0])], [t], o.attrs, loc=o.loc).result
    if acc_t != t:
        part = body.create(TileOp.CAST, [part], [acc_t], loc=o.loc).result
    total = body.create(_COMBINE[kind], [body.block.args[1], part], [acc_t], loc=o.loc).result
    body.create(TileOp.YIELD, [total] + chunk.nexts, loc=o.loc)
    result = loop.results[0]
    if acc_t != t:
        result = b.create(TileOp.CAST, [result], [t], loc=o.loc).result
    result.hint = o.result.hint
    return result


def store_loop(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const) -> None:
    """The store ``o`` of a wide value as a loop that stores chunk by chunk (its mask, when it
    has one, chunk by chunk alongside)."""
    stored, mask = ir.stored_tile(o), ir.store_mask(o)
    loop, body, chunk = _loop(b, o, plan, remap, const, stored, [])
    tiles = [chunk.value(stored)] + ([chunk.value(mask)] if mask is not None else [])
    operands = [remap(x) for x in o.operands[:1 + o.operands[0].type.rank]]
    operands[-1] = chunk.offset(operands[-1], o.loc)
    body.create(TileOp.STORE, operands + tiles, [], o.attrs, loc=o.loc)
    body.create(TileOp.YIELD, chunk.nexts, loc=o.loc)


# ------------------------------------------------------------------------------ online softmax
def _depends(v: ir.Value, on: ir.Value, wide: frozenset) -> bool:
    """The wide value ``v`` is computed from ``on`` (through wide ops only)."""
    if v is on:
        return True
    return v in wide and any(_depends(x, on, wide) for x in v.owner.operands)


def softmax_pairs(top: list, plan: ChunkPlan) -> dict:
    """sum REDUCE op -> max REDUCE op for each ``m = max(x, keepdims)`` ... ``sum(exp(x - m))``
    (same ``x``, the last axis) that one loop can compute with a running max: nothing between
    the two needs ``m`` except wide values, which the later loops make again."""
    pairs = {}
    for i, r2 in enumerate(top):
        if not (r2.op is TileOp.REDUCE and r2.attrs.kind is ReduceKind.SUM and r2.operands[0] in plan.wide):
            continue
        e = r2.operands[0].owner
        if e.op is not TileOp.EXP or e.operands[0].owner.op is not TileOp.SUB:
            continue
        x, bcast = e.operands[0].owner.operands
        if bcast.owner is None or bcast.owner.op is not TileOp.BROADCAST:
            continue
        r1 = bcast.owner.operands[0].owner
        if (r1 is None or r1 not in top or r1.op is not TileOp.REDUCE or r1.attrs.kind is not ReduceKind.MAX
                or r1.operands[0] is not x or not r1.attrs.keepdims or not x.type.dtype.is_float):
            continue
        between = top[top.index(r1) + 1:i]
        if any(o.op in (TileOp.REDUCE, TileOp.STORE) and any(_depends(v, r1.result, plan.wide) for v in o.operands)
               or not any(r in plan.wide for r in o.results) and r1.result in o.operands for o in between):
            continue
        if r2.attrs.keepdims:
            pairs[r2] = r1
    return pairs


def _online_softmax_loop_per_chunk(b: ir.Builder, r1: ir.Operation, r2: ir.Operation, plan: ChunkPlan, remap, const):
    """(max, sum) of ``r1``/``r2`` from one loop.  Per chunk: m' = max(m, max(chunk)),
    s' = s * exp(m - m') + sum(exp(chunk - m')), with m' read as 0 while it is -inf (every
    value so far -inf: the terms are then 0, not NaN), in float32; a row that is -inf
    throughout gets NaN, as exp(-inf - -inf) gives it in the unsplit sum."""
    loc, x = r2.loc, r1.operands[0]
    mt, st = r1.result.type, r2.result.type
    f32 = dtypes.float32
    ft = ir.TileType(mt.shape, f32)
    bool_t = ir.TileType(mt.shape, dtypes.bool_)

    def splat(value, t, builder):
        c = builder.create(TileOp.CONSTANT, [], [ir.scalar(t.dtype)], ConstAttrs(value), loc=loc).result
        return builder.create(TileOp.SPLAT, [c], [t], loc=loc).result

    m0, s0 = splat(float("-inf"), ft, b), splat(0.0, ft, b)
    loop, body, chunk = _loop(b, r2, plan, remap, const, x, [m0, s0])
    m_run, s_run = body.block.args[1:3]
    xc = chunk.value(x)
    m_c = body.create(TileOp.REDUCE, [xc], [mt], r1.attrs, loc=loc).result
    if mt.dtype != f32:
        m_c = body.create(TileOp.CAST, [m_c], [ft], loc=loc).result
    m_new = body.create(TileOp.MAXIMUM, [m_run, m_c], [ft], loc=loc).result
    empty = body.create(TileOp.EQ, [m_new, splat(float("-inf"), ft, body)], [bool_t], loc=loc).result
    m_safe = body.create(TileOp.WHERE, [empty, splat(0.0, ft, body), m_new], [ft], loc=loc).result
    gap = body.create(TileOp.SUB, [m_run, m_safe], [ft], loc=loc).result
    scale = body.create(TileOp.EXP, [gap], [ft], loc=loc).result
    ct = xc.type
    m_b = m_safe if mt.dtype == f32 else body.create(TileOp.CAST, [m_safe], [mt], loc=loc).result
    m_b = body.create(TileOp.BROADCAST, [m_b], [ct], loc=loc).result
    terms = body.create(TileOp.EXP, [body.create(TileOp.SUB, [xc, m_b], [ct], loc=loc).result], [ct], loc=loc).result
    part = body.create(TileOp.REDUCE, [terms], [st], r2.attrs, loc=loc).result
    if st.dtype != f32:
        part = body.create(TileOp.CAST, [part], [ft], loc=loc).result
    s_new = body.create(TileOp.FMA, [s_run, scale, part], [ft], loc=loc).result
    body.create(TileOp.YIELD, [m_new, s_new] + chunk.nexts, loc=loc)
    m, s = loop.results[:2]
    none = b.create(TileOp.EQ, [m, splat(float("-inf"), ft, b)], [bool_t], loc=loc).result
    s = b.create(TileOp.WHERE, [none, splat(float("nan"), ft, b), s], [ft], loc=loc).result
    if mt.dtype != f32:
        m = b.create(TileOp.CAST, [m], [mt], loc=loc).result
    if st.dtype != f32:
        s = b.create(TileOp.CAST, [s], [st], loc=loc).result
    m.hint, s.hint = r1.result.hint, r2.result.hint
    return m, s


# ---------------------------------------------------------------- chunk-shaped accumulators
def reduce_loop(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const) -> ir.Value:
    """The reduction ``o`` as a loop over chunks; returns the value that replaces its result.
    With ``plan.elementwise`` the loop carries a chunk-shaped accumulator combined elementwise
    (each thread its own partial results: no barrier in the loop) and reduces it once after."""
    if not plan.elementwise:
        return _reduce_loop_per_chunk(b, o, plan, remap, const)
    t, src, kind, loc = o.result.type, o.operands[0], o.attrs.kind, o.loc
    acc_dt = dtypes.float32 if kind is ReduceKind.SUM and t.dtype.is_float and t.dtype.bits < 32 else t.dtype
    acc_t = ir.TileType(src.type.shape[:-1] + (plan.chunk,), acc_dt)
    init = b.create(TileOp.SPLAT, [const(identity(kind, acc_dt), acc_dt, loc)], [acc_t], loc=loc).result
    loop, body, chunk = _loop(b, o, plan, remap, const, src, [init])
    value = chunk.value(src)
    if value.type.dtype != acc_dt:
        value = body.create(TileOp.CAST, [value], [acc_t], loc=loc).result
    total = body.create(_COMBINE[kind], [body.block.args[1], value], [acc_t], loc=loc).result
    body.create(TileOp.YIELD, [total] + chunk.nexts, loc=loc)
    result = b.create(TileOp.REDUCE, [loop.results[0]], [ir.TileType(t.shape, acc_dt)], o.attrs, loc=loc).result
    if acc_dt != t.dtype:
        result = b.create(TileOp.CAST, [result], [t], loc=loc).result
    result.hint = o.result.hint
    return result


def online_softmax_loop(b: ir.Builder, r1: ir.Operation, r2: ir.Operation, plan: ChunkPlan, remap, const):
    """(max, sum) of ``r1``/``r2`` from one loop.  With ``plan.elementwise`` each element slot
    of the chunk keeps its own running max m and sum s (float32): m' = max(m, x),
    s' = s * exp(m - m') + exp(x - m'), with m' read as 0 while it is -inf (the terms are then
    0, not NaN); after the loop M = max(m) and S = sum(s * exp(m - M)).  A row that is -inf
    throughout gets S = NaN, as exp(-inf - -inf) gives it in the unsplit sum."""
    if not plan.elementwise:
        return _online_softmax_loop_per_chunk(b, r1, r2, plan, remap, const)
    loc, x = r2.loc, r1.operands[0]
    mt, st = r1.result.type, r2.result.type
    f32 = dtypes.float32
    ct = ir.TileType(x.type.shape[:-1] + (plan.chunk,), f32)
    rt = ir.TileType(mt.shape, f32)

    def splat(value, t, builder):
        c = builder.create(TileOp.CONSTANT, [], [ir.scalar(f32)], ConstAttrs(value), loc=loc).result
        return builder.create(TileOp.SPLAT, [c], [t], loc=loc).result

    def ew(builder, op, operands, t):
        return builder.create(op, operands, [t], loc=loc).result

    def not_inf(builder, v):
        """``v`` with -inf read as 0."""
        empty = ew(builder, TileOp.EQ, [v, splat(float("-inf"), v.type, builder)],
                   ir.TileType(v.type.shape, dtypes.bool_))
        return ew(builder, TileOp.WHERE, [empty, splat(0.0, v.type, builder), v], v.type)

    m0, s0 = splat(float("-inf"), ct, b), splat(0.0, ct, b)
    loop, body, chunk = _loop(b, r2, plan, remap, const, x, [m0, s0])
    m, s = body.block.args[1:3]
    xc = chunk.value(x)
    if xc.type.dtype != f32:
        xc = ew(body, TileOp.CAST, [xc], ct)
    m_new = ew(body, TileOp.MAXIMUM, [m, xc], ct)
    safe = not_inf(body, m_new)
    scale = ew(body, TileOp.EXP, [ew(body, TileOp.SUB, [m, safe], ct)], ct)
    term = ew(body, TileOp.EXP, [ew(body, TileOp.SUB, [xc, safe], ct)], ct)
    body.create(TileOp.YIELD, [m_new, ew(body, TileOp.FMA, [s, scale, term], ct)] + chunk.nexts, loc=loc)
    m_all, s_all = loop.results[:2]
    big_m = b.create(TileOp.REDUCE, [m_all], [rt], r1.attrs, loc=loc).result
    wide_m = ew(b, TileOp.BROADCAST, [not_inf(b, big_m)], ct)
    scaled = ew(b, TileOp.MUL, [s_all, ew(b, TileOp.EXP, [ew(b, TileOp.SUB, [m_all, wide_m], ct)], ct)], ct)
    total = b.create(TileOp.REDUCE, [scaled], [ir.TileType(st.shape, f32)], r2.attrs, loc=loc).result
    none = ew(b, TileOp.EQ, [big_m, splat(float("-inf"), rt, b)], ir.TileType(rt.shape, dtypes.bool_))
    total = ew(b, TileOp.WHERE, [none, splat(float("nan"), total.type, b), total], total.type)
    if mt.dtype != f32:
        big_m = ew(b, TileOp.CAST, [big_m], mt)
    if st.dtype != f32:
        total = ew(b, TileOp.CAST, [total], st)
    big_m.hint, total.hint = r1.result.hint, r2.result.hint
    return big_m, total
