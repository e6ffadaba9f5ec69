"""Tiles larger than the register file are split, not spilled: a row-reduction kernel whose rows
do not fit in 32 warps' registers is rewritten into loops over chunks of its last axis.

    chunk_rows(fn) -> fn          plan_chunks(fn) -> ChunkPlan | None

A *wide* tile is one whose last axis has the width ``W`` of the kernel's largest loaded or stored
tile.  A kernel is split when that tile has more than ``CHUNK_VALUES`` elements (16 per thread at
32 warps, the most a CTA has: more do not fit in the 64 registers each of 1024 threads gets), or
when its row-wide loads together have more (``COUNT_LOADS``: a layernorm's x, weight and bias).
The pass applies when every wide value is made at the top level of the kernel by a load,
``arange``, constant, splat, broadcast, a reshape that adds or drops unit dims or an elementwise
op, and is used only by other such ops, by a reduction over the last axis (sum, max or min) or
by a store.  Then:

- each reduction of a wide value becomes a loop over chunks of ``K`` columns (``K`` divides
  ``W``; the chunks of all the wide loads together have at most ``CHUNK_BUDGET`` elements): the
  loop recomputes the chunk from its loads and accumulates it (16-bit float sums in float32);
- each store of a wide value becomes a loop that recomputes and stores chunk by chunk;
- everything else stays where it was.

How the loops run is the plan's ``mode`` (``ChunkPlan``): for rows past ``CHUNK_VALUES`` a
reduction loop carries a chunk-shaped accumulator, combined elementwise (each thread keeps its
own partial results, so the loop has no barrier), reduced once after the loop, at 32 warps; for
rows split only for their several loads (``SEVERAL_LOADS``) each chunk is reduced across the CTA,
one-load loops prefetch the next chunk, at 16 warps.  Softmax thus reads its row three times
(max, sum, then the store), the later times mostly from L2: one program per SM keeps 132 rows of
at most 256 KB in flight.  Module switches, measured in ``benchmarks/chunk_variants.py``, select
the alternatives (the figures are in the comments below), among them softmax's ``max`` and
``sum(exp(x - m))`` in one loop with a running max (online softmax).

Loads past the array read ``other`` and stores past it are dropped, exactly as for the whole
tile; sums are reassociated per chunk (within the float tolerance of any reordered sum).  The
pass refuses (returns ``fn`` unchanged) when a store could change what a later chunk loop
reloads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilejit import dtypes, ir
from tilejit.ir import ConstAttrs, ForAttrs, ReduceKind, TileOp

CHUNK_VALUES = 32 * 32 * 16         # a row tile of more values is split: 16 per thread at 32 warps
CHUNK_BUDGET = CHUNK_VALUES         # the values of all the loads of one chunk (with PREFETCH, twice)
# The switches below were measured on the H200 (benchmarks/chunk_variants.py, 2026-12-03): with
# chunk-shaped accumulators and neither the prefetch nor the online softmax, 65536-column rows
# ran at 0.47-0.62x copy (softmax), 0.61-0.62x (RMSNorm), 0.27-0.50x (layernorm), against
# 0.41-0.46x, 0.51-0.57x and 0.20-0.32x with a CTA-wide reduction per chunk.  The online softmax
# costs two exps per element and lost (0.37-0.57x); the prefetch lost on softmax and won on
# layernorm at 32768 columns.
PREFETCH = False                    # each chunk loop loads the next chunk before computing this one
ONLINE_SOFTMAX = False              # max(x) and sum(exp(x - max)) in one loop (a running max)
ELEMENTWISE_ACC = True              # accumulate chunk-shaped tiles, reduce once after the loop
COUNT_LOADS = True                  # rows of several loads that fit alone but not together are split too
# How a kernel split only because of its several row loads (a layernorm or RMSNorm of 8K-16K
# columns: x, weight and bias) is run.  Measured (H200, the same run as above) against the
# unsplit kernel that spilled: layernorm 16K 0.85 / 0.48x copy (fp32 / bf16; was 0.66 / 0.17),
# RMSNorm bf16 16K 0.74 (was 0.51), layernorm bf16 8K 0.48 (was 0.36); RMSNorm fp32 16K 0.90
# (was 0.91).
SEVERAL_LOADS = {"elementwise": False, "prefetch": True, "num_warps": 16}


# ops that make a wide value from wide operands (or from nothing)
_WIDE_OPS = ir.ELEMENTWISE_OPS | {TileOp.LOAD, TileOp.ARANGE, TileOp.CONSTANT, TileOp.SPLAT, TileOp.BROADCAST,
                                  TileOp.RESHAPE}          # (unit dims only: _unit_reshape)
_COMBINE = {ReduceKind.SUM: TileOp.ADD, ReduceKind.MAX: TileOp.MAXIMUM, ReduceKind.MIN: TileOp.MINIMUM}


@dataclass(frozen=True)
class ChunkPlan:
    width: int          # W: the last-axis size of the wide tiles
    chunk: int          # K: columns per loop iteration (divides W)
    wide: frozenset     # the wide values (results of top-level ops)
    elementwise: bool = True    # chunk-shaped accumulators (else a CTA-wide reduction per chunk)
    prefetch: bool = False      # loops with one load prefetch the next chunk
    num_warps: int = 32         # the warps passes.warps gives the kernel


def _memory_tile(o: ir.Operation):
    v = o.result if o.op is TileOp.LOAD else o.operands[-1] if o.op is TileOp.STORE else None
    return v if v is not None and isinstance(v.type, ir.TileType) and v.type.shape else None


def plan_chunks(fn: ir.Function) -> ChunkPlan | None:
    """The chunking of ``fn`` (None when its tiles fit, or when it is not a kernel the pass
    can split; see the module docstring)."""
    tiles = [v for o in fn.walk() if (v := _memory_tile(o)) is not None]
    if not tiles:
        return None
    big = max(tiles, key=lambda v: v.type.numel)
    size, width = big.type.numel, big.type.shape[-1]
    row_loads = sum(1 for v in tiles
                    if v.owner is not None and v.owner.op is TileOp.LOAD and v.type.shape[-1] == width)
    if size * (max(row_loads, 1) if COUNT_LOADS else 1) <= CHUNK_VALUES or width & (width - 1):
        return None
    mode = {"elementwise": ELEMENTWISE_ACC, "prefetch": PREFETCH, "num_warps": 32} if size > CHUNK_VALUES \
        else SEVERAL_LOADS
    top = fn.body.ops
    if any(_memory_tile(o) is not None and o not in top for o in fn.walk()):
        return None                                 # a load or store in a loop or branch
    wide: set[ir.Value] = set()
    for o in top:
        shaped = [r for r in o.results if isinstance(r.type, ir.TileType) and r.type.shape]
        if not any(r.type.shape[-1] == width for r in shaped):
            continue
        if o.op is TileOp.RESHAPE and not _unit_reshape(o, width):
            return None
        if o.op not in _WIDE_OPS or any(isinstance(x.type, ir.TileType) and x.type.shape
                                         and x not in wide and not _broadcast_source(o, x, width)
                                         for x in o.operands):
            return None
        wide.add(o.result)
    users = ir.users(fn)
    for v in wide:
        for u in users.get(v, []):
            if u not in top:
                return None
            if u.op is TileOp.REDUCE:
                if u.attrs.axis != len(v.type.shape) - 1 or u.attrs.kind not in _COMBINE:
                    return None
            elif u.op is TileOp.STORE:
                if any(x is v for x in u.operands[:-1]):
                    return None
            elif u.op not in _WIDE_OPS or u.result not in wide:
                return None
    if not _no_store_before_reload(top, wide):
        return None
    # the loads a loop body may hold at once share the 16 values per thread
    loads = sum(1 for v in wide if v.owner.op is TileOp.LOAD)
    loads = max(loads, 2) if mode["prefetch"] and loads == 1 else loads         # the prefetched copy
    parts = 1
    while size // parts * loads > CHUNK_BUDGET and parts < width:
        parts *= 2
    return ChunkPlan(width, width // parts, frozenset(wide), **mode)


def _unit_reshape(o: ir.Operation, width: int) -> bool:
    """``o`` (a RESHAPE) only adds or drops unit dims and keeps the last axis (``t[None, :]``)."""
    src, dst = o.operands[0].type.shape, o.result.type.shape
    return (bool(src) and src[-1] == width == dst[-1]
            and [d for d in src if d != 1] == [d for d in dst if d != 1])


def _broadcast_source(o: ir.Operation, x: ir.Value, width: int) -> bool:
    """``x`` is a narrow operand ``o`` may take: the (…, 1) source of a BROADCAST or SPLAT's scalar."""
    return o.op is TileOp.BROADCAST and x.type.shape[-1] == 1 and width != 1


def _loads_of(v: ir.Value, wide: frozenset | set, seen: set) -> set:
    """The arrays the wide value ``v`` is loaded from."""
    if v not in wide or v in seen:
        return set()
    seen.add(v)
    o = v.owner
    found = {o.operands[0]} if o.op is TileOp.LOAD else set()
    for x in o.operands:
        found |= _loads_of(x, wide, seen)
    return found


def _no_store_before_reload(top: list, wide: set) -> bool:
    """No store precedes (in program order) a chunk loop that reloads the stored array, except
    the loop's own store (each chunk is read before it is written)."""
    stored: set = set()
    for o in top:
        reads = set()
        if o.op is TileOp.REDUCE and o.operands[0] in wide:
            reads = _loads_of(o.operands[0], wide, set())
        elif o.op is TileOp.STORE and o.operands[-1] in wide:
            reads = _loads_of(o.operands[-1], wide, set())
        if reads & stored:
            return False
        if o.op is TileOp.STORE:
            stored.add(o.operands[0])
    return True


def chunk_rows(fn: ir.Function) -> ir.Function:
    plan = plan_chunks(fn)
    if plan is None:
        return fn
    top, fn.body.ops = fn.body.ops, []
    b = ir.Builder(fn.body)
    mapped: dict[ir.Value, ir.Value] = {}

    def remap(v: ir.Value) -> ir.Value:
        return mapped.get(v, v)

    def const(value, dt, loc) -> ir.Value:
        return b.create(TileOp.CONSTANT, [], [ir.scalar(dt)], ConstAttrs(value), loc=loc).result

    pairs = _softmax_pairs(top, plan) if ONLINE_SOFTMAX else {}
    deferred = set(pairs.values())
    for o in top:
        if o in pairs:
            mapped[pairs[o].result], mapped[o.result] = _online_softmax_loop(b, pairs[o], o, plan, remap, const)
        elif o in deferred:
            continue                                # computed by its sum's online loop
        elif o.op is TileOp.REDUCE and o.operands[0] in plan.wide:
            mapped[o.result] = _reduce_loop(b, o, plan, remap, const)
        elif o.op is TileOp.STORE and o.operands[-1] in plan.wide:
            _store_loop(b, o, plan, remap, const)
        elif any(r in plan.wide for r in o.results):
            continue                                # made again inside the loops that use it
        else:
            o.operands = [remap(x) for x in o.operands]
            fn.body.ops.append(o)
    return fn


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
            operands = [self.remap(x) for x in o.operands]
            operands[-1] = self.offset(operands[-1], o.loc)
            new = b.create(TileOp.LOAD, operands, [t], o.attrs, loc=o.loc).result
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


def _identity(kind: ReduceKind, dt: dtypes.DType):
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
    init = const(_identity(kind, acc_t.dtype), acc_t.dtype, o.loc)
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


def _store_loop(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const) -> None:
    """The store ``o`` of a wide value as a loop that stores chunk by chunk."""
    loop, body, chunk = _loop(b, o, plan, remap, const, o.operands[-1], [])
    tile = chunk.value(o.operands[-1])
    operands = [remap(x) for x in o.operands[:-1]]
    operands[-1] = chunk.offset(operands[-1], o.loc)
    body.create(TileOp.STORE, operands + [tile], [], o.attrs, loc=o.loc)
    body.create(TileOp.YIELD, chunk.nexts, loc=o.loc)


# ------------------------------------------------------------------------------ online softmax
def _depends(v: ir.Value, on: ir.Value, wide: frozenset) -> bool:
    """The wide value ``v`` is computed from ``on`` (through wide ops only)."""
    if v is on:
        return True
    return v in wide and any(_depends(x, on, wide) for x in v.owner.operands)


def _softmax_pairs(top: list, plan: ChunkPlan) -> dict:
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
def _reduce_loop(b: ir.Builder, o: ir.Operation, plan: ChunkPlan, remap, const) -> ir.Value:
    """The reduction ``o`` as a loop over chunks; returns the value that replaces its result.
    With ``plan.elementwise`` the loop carries a chunk-shaped accumulator combined elementwise
    (each thread its own partial results: no barrier in the loop) and reduces it once after."""
    if not plan.elementwise:
        return _reduce_loop_per_chunk(b, o, plan, remap, const)
    t, src, kind, loc = o.result.type, o.operands[0], o.attrs.kind, o.loc
    acc_dt = dtypes.float32 if kind is ReduceKind.SUM and t.dtype.is_float and t.dtype.bits < 32 else t.dtype
    acc_t = ir.TileType(src.type.shape[:-1] + (plan.chunk,), acc_dt)
    init = b.create(TileOp.SPLAT, [const(_identity(kind, acc_dt), acc_dt, loc)], [acc_t], loc=loc).result
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


def _online_softmax_loop(b: ir.Builder, r1: ir.Operation, r2: ir.Operation, plan: ChunkPlan, remap, const):
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
