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
by a store (as its tile or its mask).  Then:

- each reduction of a wide value becomes a loop over chunks of ``K`` columns (``K`` divides
  ``W``; the chunks of all the wide loads together have at most ``CHUNK_BUDGET`` elements): the
  loop recomputes the chunk from its loads and accumulates it (16-bit float sums in float32);
- each store of a wide value becomes a loop that recomputes and stores chunk by chunk (a masked
  store with its mask's chunks);
- everything else stays where it was.

How the loops run is the plan's ``mode`` (``ChunkPlan``): for rows past ``CHUNK_VALUES`` a
reduction loop carries a chunk-shaped accumulator, combined elementwise (each thread keeps its
own partial results, so the loop has no barrier), reduced once after the loop, at 32 warps
(16 for 16-bit types, ``LONG_ROW_WARPS``); for rows split only for their several loads
(``SEVERAL_LOADS``) the same, at 16 warps.  A row load that several loops read is kept in
shared memory by the first (``STASH``) while it fits, and read there by the others; otherwise
softmax reads its row three times (max, sum, then the store), the later times from L2 where the rows in flight fit it (a 64K-column bf16 layernorm's do not:
ncu on the H200 shows DRAM 78% busy moving three reads and a write).  Module switches, measured in ``benchmarks/chunk_variants.py``, select
the alternatives (the figures are in the comments below), among them softmax's ``max`` and
``sum(exp(x - m))`` in one loop with a running max (online softmax), and a layernorm's
``sum((x - mean)**2)`` accumulated in the loop of ``sum(x)`` (``ONE_PASS_VARIANCE``, on: the
deviations from the row's first value, combined once the mean exists, where the row is not
stashed).

The loops are built by ``passes.chunk_loops``; ``plan_loops`` then gives their loads thread-
private cp.async rings where shared memory allows (``passes.row_rings``).  Loads past the array read ``other`` and stores
past it are dropped, exactly as for the whole tile; sums are reassociated per chunk (within the
float tolerance of any reordered sum).  The pass refuses (returns ``fn`` unchanged) when a store
could change what a later chunk loop reloads.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import ConstAttrs, TileOp
from tilejit.passes.chunk_loops import (_COMBINE, ChunkPlan, Stashes, _wide_loads, online_softmax_loop, reduce_loop,
                                         softmax_pairs, store_loop)
from tilejit.passes.chunk_variance import variance_loop, variance_pairs, variance_sum

CHUNK_VALUES = 32 * 32 * 16         # a row tile of more values is split: 16 per thread at 32 warps
CHUNK_BUDGET = CHUNK_VALUES         # the values of all the loads of one chunk (with PREFETCH, twice),
                                    # at 32 warps (a long row at fewer warps gets a share)
# The switches below were measured on the H200 (benchmarks/chunk_variants.py, 2026-12-03): with
# chunk-shaped accumulators and neither the prefetch nor the online softmax, 65536-column rows
# ran at 0.47-0.62x copy (softmax), 0.61-0.62x (RMSNorm), 0.27-0.50x (layernorm), against
# 0.41-0.46x, 0.51-0.57x and 0.20-0.32x with a CTA-wide reduction per chunk.  The online softmax
# costs two exps per element and lost (0.37-0.57x); the prefetch lost on softmax and won on
# layernorm at 32768 columns.
PREFETCH = False                    # each chunk loop loads the next chunk before computing this one
ONLINE_SOFTMAX = False              # max(x) and sum(exp(x - max)) in one loop (a running max)
# A sum of squared deviations from a per-row value (a layernorm's variance) accumulated in the
# loop of the earlier sum(x), as deviations from the row's first value (chunk_variance):
# one read of the row fewer where the row is not stashed.  H200 (2026-12-04, same call, ratio to
# copy, one pass / two): layernorm at 65536 columns 0.53 / 0.46 (bf16), 0.49 / 0.47 (fp32), the
# fused loop on a 2-slot ring (row_rings.MAX_CARRIED; 4 slots spilled in bf16).  Stashed rows
# (16K, 32K) are left alone (a fused 16K bf16 row spilled: 0.57 / 0.71).
ONE_PASS_VARIANCE = True
ELEMENTWISE_ACC = True              # accumulate chunk-shaped tiles, reduce once after the loop
COUNT_LOADS = True                  # rows of several loads that fit alone but not together are split too
# ... when they load more than this in all.  H200, 2026-12-04 (warps_probe.py --without chunk_rows,
# with one-register divisions inline): layernorm at 8192 columns (24576 values) unsplit at 16
# warps 0.89 / 0.61x copy (fp32 / bf16) against 0.75 / 0.45 split; RMSNorm bf16 at 16384
# (32768 values) split 0.71 against 0.22 unsplit (spilling) at 16 warps: the budget lies between.
LOADS_BUDGET = CHUNK_VALUES * 3 // 2
# How a kernel split only because of its several row loads (a layernorm or RMSNorm of 8K-16K
# columns: x, weight and bias) is run.  Measured (H200, the same run as above) against the
# unsplit kernel that spilled: layernorm 16K 0.85 / 0.48x copy (fp32 / bf16; was 0.66 / 0.17),
# RMSNorm bf16 16K 0.74 (was 0.51), layernorm bf16 8K 0.48 (was 0.36); RMSNorm fp32 16K 0.90
# (was 0.91).
# With the row stashed (H200, 2026-12-04, switch_probe.py, 16384 columns, ratio to copy): a
# chunk-shaped accumulator and no prefetch gave layernorm 0.56 / 0.77 (bf16 / fp32) and RMSNorm
# 0.69 / 0.95, against 0.38 / 0.63 and 0.70 / 0.89 for the per-chunk reduction with prefetch
# (which keeps no stash) and 0.58 / 0.70, 0.70 / 0.94 for a per-chunk reduction with the stash.
SEVERAL_LOADS = {"elementwise": True, "prefetch": False, "num_warps": 16}
# The warps of a row past CHUNK_VALUES, by the itemsize of its widest memory tile (64 bytes per
# thread of a 16384-value chunk: 32 warps in float32, 16 in 16-bit floats); a chunk loop's loads
# share CHUNK_BUDGET and each holds at most 16 values per thread.  Measured (H200,
# benchmarks/warps_probe.py, 2026-12-03), bf16 at 16 warps against 32: softmax (chunks of 8192)
# 32K 0.61 / 0.43x copy, 64K 0.49 / 0.47; layernorm (4096, 24 values per thread) 32K 0.50 / 0.26,
# 64K 0.42 / 0.24 (chunks of 2048: 0.29 / 0.24); RMSNorm 32K 0.71 / 0.60, 64K 0.57 / 0.61.
# fp32 keeps 32: softmax at 16 warps 32K 0.56 / 0.66, 64K 0.45 / 0.63.  One-byte types are
# unmeasured and take 16.
LONG_ROW_WARPS = {1: 16, 2: 16, 4: 32}
# Long rows (past CHUNK_VALUES) read by several chunk loops are kept in shared memory by the first
# loop that loads them (STASH), and the later loops read them there (UNSTASH) instead of from L2
# or DRAM, while the kept rows of one program fit STASH_BYTES (a 65,536-column bf16 row).
# Measured (H200, 2026-12-04, switch_probe.py, ratio to copy, stash on / off): 32768 columns
# softmax 0.65 / 0.60 (bf16), 0.74 / 0.65 (fp32), layernorm 0.66 / 0.51 (bf16), 0.54 / 0.51
# (fp32); but a 65536-column bf16 row (128 KiB) left one 16-warp CTA per SM instead of two:
# softmax 0.45 / 0.49, layernorm 0.36 / 0.44, RMSNorm 0.49 / 0.58.  So the kept rows of the CTAs
# an SM holds at the kernel's warps must fit STASH_SM_BYTES (what sm_80 and sm_90 both have).
STASH = True
STASH_BYTES = 128 * 1024
STASH_SM_BYTES = 160 * 1024


# ops that make a wide value from wide operands (or from nothing)
_WIDE_OPS = ir.ELEMENTWISE_OPS | {TileOp.LOAD, TileOp.ARANGE, TileOp.CONSTANT, TileOp.SPLAT, TileOp.BROADCAST,
                                  TileOp.RESHAPE}          # (unit dims only: _unit_reshape)


def _memory_tile(o: ir.Operation):
    v = o.result if o.op is TileOp.LOAD else ir.stored_tile(o) if o.op is TileOp.STORE else None
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
    if size <= CHUNK_VALUES and (not COUNT_LOADS or size * row_loads <= LOADS_BUDGET) or width & (width - 1):
        return None
    mode = {"elementwise": ELEMENTWISE_ACC, "prefetch": PREFETCH,
            "num_warps": LONG_ROW_WARPS[min(big.type.dtype.itemsize, 4)]} if size > CHUNK_VALUES else SEVERAL_LOADS
    top = fn.body.ops
    wide = splittable(fn, width)
    if wide is None or not _no_store_before_reload(top, wide):
        return None
    # the loads a loop body may hold at once share the 16 values per thread
    loads = sum(1 for v in wide if v.owner.op is TileOp.LOAD)
    loads = max(loads, 2) if mode["prefetch"] and loads == 1 else loads         # the prefetched copy
    # and a long row's chunk holds at most 16 values per thread (more spilled softmax at 16 warps)
    most = 16 * 32 * mode["num_warps"] if size > CHUNK_VALUES else size
    parts = 1
    while (size // parts * loads > CHUNK_BUDGET or size // parts > most) and parts < width:
        parts *= 2
    ctas = max(1, 1024 // (32 * mode["num_warps"]))          # the CTAs pipeline.occupancy_hint asks an SM for
    budget = min(STASH_BYTES, STASH_SM_BYTES // ctas)        # ... which a stash must not cut
    stashes = _stashes(top, wide, budget) if STASH and not mode["prefetch"] else None
    return ChunkPlan(width, width // parts, frozenset(wide), **mode, stashes=stashes)


def splittable(fn: ir.Function, width: int) -> set | None:
    """The wide values of ``fn`` (those whose last axis is ``width``) when its row tiles can be cut
    along their last axis: every wide value is made at the top level by a load, ``arange``,
    constant, splat, broadcast, unit-dim reshape or elementwise op, and used only by such ops, by
    a sum, max or min over the last axis, or as a stored tile; None otherwise."""
    top = fn.body.ops
    if any(_memory_tile(o) is not None and o not in top for o in fn.walk()):
        return None                                 # a load or store in a loop or branch
    if any(o.op in (TileOp.ATOMIC, TileOp.SCAN) or o.op in (TileOp.LOAD, TileOp.STORE) and ir.gathers(o)
           for o in fn.walk()):
        return None                                 # atomics, scans, gathers are not split (yet)
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
                if any(x is v for x in u.operands[:1 + u.operands[0].type.rank]):
                    return None                     # (as an offset; the stored tile and its mask split)
            elif u.op not in _WIDE_OPS or u.result not in wide:
                return None
    return wide


def _stashes(top: list, wide: set, budget: int) -> Stashes | None:
    """The row loads that more than one chunk loop reads, kept in shared memory while their
    rows fit ``budget`` bytes together (the first loop's reads, in program order, first)."""
    uses: dict[ir.Value, int] = {}
    for o in top:
        found: list = []
        for root in loop_roots(o, wide):
            _wide_loads(root, frozenset(wide), found)
        for v in found:
            uses[v] = uses.get(v, 0) + 1
    kept, total = [], 0
    for v, n in uses.items():
        size = v.type.numel * v.type.dtype.itemsize
        if n > 1 and total + size <= budget:
            kept.append(v)
            total += size
    return Stashes(kept) if kept else None


def loop_roots(o: ir.Operation, wide) -> list:
    """The wide values a chunk loop for top-level ``o`` makes: a reduction's operand, a store's
    tile and its mask; none for other ops."""
    if o.op is TileOp.REDUCE and o.operands[0] in wide:
        return [o.operands[0]]
    if o.op is TileOp.STORE and ir.stored_tile(o) in wide:
        mask = ir.store_mask(o)
        return [ir.stored_tile(o)] + ([mask] if mask is not None and mask in wide else [])
    return []


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
        reads, seen = set(), set()
        for root in loop_roots(o, wide):
            reads |= _loads_of(root, wide, seen)
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

    pairs = softmax_pairs(top, plan) if ONLINE_SOFTMAX else {}
    deferred = set(pairs.values())
    variances = variance_pairs(top, plan) if ONE_PASS_VARIANCE and plan.elementwise else {}
    firsts, states = {p.r1: p for p in variances.values()}, {}
    for o in top:
        if o in pairs:
            mapped[pairs[o].result], mapped[o.result] = online_softmax_loop(b, pairs[o], o, plan, remap, const)
        elif o in firsts:                           # sum(x), with the deviations a later sum squares
            mapped[o.result], states[o] = variance_loop(b, firsts[o], plan, remap, const)
        elif o in variances:
            mapped[o.result] = variance_sum(b, o, variances[o], states[variances[o].r1], remap)
        elif o in deferred:
            continue                                # computed by its sum's online loop
        elif o.op is TileOp.REDUCE and o.operands[0] in plan.wide:
            mapped[o.result] = reduce_loop(b, o, plan, remap, const)
        elif o.op is TileOp.STORE and ir.stored_tile(o) in plan.wide:
            store_loop(b, o, plan, remap, const)
        elif any(r in plan.wide for r in o.results):
            continue                                # made again inside the loops that use it
        else:
            o.operands = [remap(x) for x in o.operands]
            fn.body.ops.append(o)
    return fn
