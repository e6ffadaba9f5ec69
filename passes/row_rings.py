"""Thread-private cp.async rings for memory-bound loops: the loads of a FOR loop without tensor
cores (a long row's chunk loops, ``chunk_rows``) are copied ``stages - 1`` iterations ahead
into shared memory, so each thread keeps several chunks in flight without holding registers
for them.  Each thread copies its own 16-byte chunks and reads them back itself, so the ring
needs no barrier: a thread's ``cp.async.wait_group`` is enough.

    row_ring_plans(fn, layouts, multiples, loop, num_warps, target) -> (stages, (RowRingPlan, ...))
    lower_row_ring_for(lw, loop, plan)

    prologue:     for s in 0..S-2: copy iteration s into slot s; commit     (zero past ub)
    iteration t:  copy iteration t+S-1 into slot (t+S-1)%S; commit          (the slot read at t-1)
                  wait_group(S-1)                                           # slot t%S landed
                  the body, each ringed load read from slot t%S (elements outside the array
                  read ``other``: a copy zero-fills them)
    after:        wait_group(0)

A tensor-core loop whose DOT operands come through cp.async rings may ring its other big loads
too (``DOT_LOOP_ROW_RINGS``, off: measured slower for W4A16), in the operand rings' commit
groups, so the same wait lands them.  The packed 4-bit B of a DOT that takes its fragments from
the bytes (``nibble_operands``) is always ringed there, but not thread-private: each slot is one
swizzled (K, N/2) tile that every warp reads with ``ldmatrix.trans`` after the operand rings'
barrier (``nibble_ringable``, ``RowRing.read_nibbles``).

A loop that stores rings only loads of the stored block (an in-place update of the same array,
or another array: launches take arrays that are the same or do not overlap, the README says).
The slot a copy overwrites was read in the previous iteration by the same thread, and those
values were used there (a load nobody uses is gone by now), so the read is complete.  Chunk
``c`` of thread ``t`` lives at ``slot + (c * threads + t) * 16``: neighbouring threads read
neighbouring 16 bytes.  A row stride that is not a multiple of 16 bytes is checked at run time
and takes the plain loop (as the DOT rings do).

On the H200 (2026-12-04, same call, ratio to copy, rings / none): layernorm bf16 16K 0.71 /
0.58, 64K 0.47 / 0.45, float32 32K 0.58 / 0.52; RMSNorm bf16 16K 0.92 / 0.84, 64K 0.70 /
0.58, float32 32K 0.84 / 0.77; RMSNorm bf16 32K 0.80 / 0.81; the other cells of softmax,
layernorm and RMSNorm from 8K to 64K within 1%.  A ring that took shared memory the SM
needed for a CTA lost (``ring_budget``).
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_dot, lower_memory
from tilejit.passes import mma_layouts as ML
from tilejit.passes.assign_layouts import array_spec, is_tile, memory_layout
from tilejit.passes.plans import RowRingPlan
from tilejit.passes.ring_sources import offset_slice
from tilejit.simt import SimtOp

I32 = D.int32
ROW_RINGS = True                    # ring the loads of loops without tensor cores (False: never)
ROW_RING_BYTES = 64 * 1024          # the shared memory a loop's rings may take, all slots
ROW_RING_STAGES = 4                 # the most slots (3 iterations ahead)
# The switch: True also rings, thread-private, the other loads of a tensor-core loop whose DOT
# operands come through cp.async rings (``dot_loop_row_rings``: W4A16's packed weights), in the
# same commit groups, so their memory latency leaves the iteration's critical path as the
# operands' does.  Off: on the H100 (2026-12-05, session 20, scripts/gpu_w4_ab.sh) W4A16 was
# 12-14% slower with it at M 1-16 N 28672 (130.3-133.0 against 115.6-117.2 us), 10-40% at M16
# N 8192 and 3-15% at M64, with the same bits (ptxas 96 registers either way at 16x64x128x4);
# loading the bytes one iteration ahead into registers (``prefetch_loads``) was 23-35% slower.
# The loop is bound by its instructions, not by the weights' latency.
DOT_LOOP_ROW_RINGS = False
DOT_LOOP_MIN_BYTES = 1024           # smaller loads (a row of scales) stay plain
# Loops carrying more tiles than this get 2 slots at most: a 65,536-column bf16 layernorm's one-
# pass loop (four chunk-shaped sums) spilled 8 bytes at 64 registers with 4 slots, none with 2.
MAX_CARRIED = 3
# A ring never takes the shared memory that would cost the SM a CTA: with the kernel's stashes
# (``chunk_rows``), CTAs of ``num_warps`` warps must still fit as many per SM as before, counting
# at most ``RING_THREADS_PER_SM`` threads (what the occupancy wishes usually get).
SHARED_PER_SM = {"sm_80": 164 * 1024, "sm_90a": 228 * 1024}
CTA_RESERVED = 1024                 # shared memory the hardware keeps per CTA
OTHER_BYTES = 4096                  # room left for the kernel's other buffers (reductions' scratch)
MAX_CTAS_PER_SM = 32
RING_THREADS_PER_SM = 1536


def ringable(fn: ir.Function, layouts: dict, multiples, body: ir.Block, o: ir.Operation) -> RowRingPlan | None:
    """LOAD ``o`` of loop ``body`` as a ring, or None: a block (not a gather) of an array with a
    unit-stride, 16-byte aligned last dim, a last offset that is a multiple of 16 bytes, offsets
    from the induction variable and loop invariants only, and a layout of whole 16-byte chunks."""
    if o.op is not TileOp.LOAD or not is_tile(o.result) or o.result not in layouts:
        return None
    spec = array_spec(fn, o.operands[0])
    item = spec.dtype.itemsize
    if not (spec.unit_inner_stride and spec.aligned16) or item > 16 or spec.dtype.bits < 8:
        return None
    layout = layouts[o.result]
    if L.contiguous_run(layout) * item < 16 or layout.n % (16 // item):
        return None
    if (multiples.of(o.operands[-1]) * item) % 16:
        return None
    offsets = offset_slice(body, o)
    return None if offsets is None else RowRingPlan(o, tuple(offsets))


def nibble_ringable(fn: ir.Function, multiples, body: ir.Block, o: ir.Operation, num_warps: int) -> RowRingPlan | None:
    """LOAD ``o`` of a DOT loop as a shared ring read with ``ldmatrix.trans`` into the interleaved
    4-bit fragments of ``nibble_operands`` (``fn.meta["nibble_loads"]``), or None: copied in
    16-byte chunks of its memory layout (no replicas) into a swizzled row-major tile of K rows
    of N/2 bytes (a power of two, at least 16), K a multiple of 32, zeros outside the array."""
    cfg = fn.meta.get("nibble_loads", {}).get(o)
    if cfg is None or o.op is not TileOp.LOAD or (o.attrs and o.attrs.other not in (None, 0)):
        return None
    spec = array_spec(fn, o.operands[0])
    k, half = cfg.k, cfg.n // 2
    if not (spec.unit_inner_stride and spec.aligned16) or k % 32 or half < 16 or half & (half - 1) \
            or o.result.type.shape[-1] != half:
        return None
    mem = memory_layout(o.result.type.shape, spec, num_warps)
    if L.contiguous_run(mem) < 16 or mem.n % 16 or mem.replica_bits("lane") or mem.replica_bits("warp"):
        return None
    if multiples.of(o.operands[-1]) % 16:
        return None
    offsets = offset_slice(body, o)
    return None if offsets is None else RowRingPlan(o, tuple(offsets), cfg)


def row_ring_plans(fn: ir.Function, layouts: dict, multiples, loop: ir.Operation,
                   num_warps: int, target: str = "sm_90a") -> tuple[int, tuple[RowRingPlan, ...]]:
    """(stages, rings) for FOR ``loop``: its ringable loads (``ringable``) at as many slots as
    ``ROW_RING_BYTES`` holds (at most ``ROW_RING_STAGES``, at least 2), or (0, ()) when there
    are none or the switch is off.  Loops with DOTs keep their own plans; a loop that writes
    memory rings only the loads whose block every write of the loop is (``_same_block``)."""
    body = loop.regions[0]
    if not ROW_RINGS or any(o.op is TileOp.DOT for o in body.walk()):
        return 0, ()
    most = ROW_RING_STAGES if sum(1 for a in body.args[1:] if is_tile(a)) <= MAX_CARRIED else 2
    writes = [o for o in body.walk() if o.op in (TileOp.STORE, TileOp.ATOMIC)]
    rings = tuple(r for r in (ringable(fn, layouts, multiples, body, o) for o in body.ops)
                  if r is not None and all(_same_block(w, r.load, body) for w in writes))
    per_stage = sum(slot_bytes(layouts[r.load.result], r.load.result.type.dtype.itemsize, num_warps) for r in rings)
    stages = min(most, ring_budget(fn, num_warps, target) // per_stage) if rings else 0
    return (stages, rings) if stages >= 2 else (0, ())


def dot_loop_row_rings(fn: ir.Function, layouts: dict, multiples, loop: ir.Operation, rings, num_warps: int,
                       stages: int) -> tuple[RowRingPlan, ...]:
    """The thread-private rings of a tensor-core loop pipelined through cp.async ``rings`` (its
    DOT operands' RingPlans) at ``stages`` slots: the loop's other ringable loads (``ringable``,
    of at least ``DOT_LOOP_MIN_BYTES`` a CTA: a quantised GEMM's packed weights, which reach the
    DOT through ``tj.unpack`` and arithmetic, not as a ring's operand), copied in the rings'
    commit groups and read back by each thread (``DOT_LOOP_ROW_RINGS``; none in a loop that
    writes memory, or past ``ROW_RING_BYTES`` for all slots)."""
    body = loop.regions[0]
    if stages < 2 or any(o.op in (TileOp.STORE, TileOp.ATOMIC) for o in body.walk()):
        return ()
    ringed = {r.load for r in rings}
    out, total = [], 0
    for o in body.ops:
        r = None if o in ringed else nibble_ringable(fn, multiples, body, o, num_warps)
        if r is None and o not in ringed and DOT_LOOP_ROW_RINGS:
            r = ringable(fn, layouts, multiples, body, o)
        if r is None:
            continue
        size = o.result.type.numel if r.nibbles else \
            slot_bytes(layouts[o.result], o.result.type.dtype.itemsize, num_warps)
        if o.result.type.numel * o.result.type.dtype.itemsize < DOT_LOOP_MIN_BYTES or \
                total + stages * size > ROW_RING_BYTES:
            continue
        out.append(r)
        total += stages * size
    return tuple(out)


def ring_budget(fn: ir.Function, num_warps: int, target: str = "sm_90a") -> int:
    """The bytes one loop's rings may take (see ``RING_THREADS_PER_SM``): a 32,768-column bf16
    softmax stashes its 64 KiB row, three CTAs of 512 threads per SM; a ring of 32 KiB would
    leave room for two (H200: 0.71 -> 0.62x copy)."""
    per_sm = SHARED_PER_SM.get(target, SHARED_PER_SM["sm_80"])
    stashed = stash_bytes(fn) + CTA_RESERVED
    ctas = max(1, min(RING_THREADS_PER_SM // (32 * num_warps), per_sm // stashed, MAX_CTAS_PER_SM))
    return max(0, min(ROW_RING_BYTES, per_sm // ctas - stashed, per_sm - stashed - OTHER_BYTES))


def stash_bytes(fn: ir.Function) -> int:
    """Shared memory ``fn``'s stashes take (each stash buffer holds its rows at full width)."""
    found: dict[int, int] = {}
    for o in fn.walk():
        if o.op is TileOp.STASH:
            tile = o.operands[0].type
            rows = tile.numel // tile.shape[-1]
            found[o.attrs.buffer] = max(found.get(o.attrs.buffer, 0), rows * o.attrs.width * tile.dtype.itemsize)
    return sum(found.values())


def _same_block(write: ir.Operation, load: ir.Operation, body: ir.Block) -> bool:
    """Whether ``write`` (a STORE or ATOMIC of the loop) cannot change what a copy issued ahead
    reads: a top-level STORE of ``load``'s block (the same offsets and shape), which writes the
    columns of this iteration only, after its own load.  Any other write might alias a later
    iteration's block (two arguments may be one array), so the load is not ringed."""
    rank = load.operands[0].type.rank
    return write.op is TileOp.STORE and write in body.ops and write.operands[0].type.rank == rank \
        and tuple(write.operands[1:1 + rank]) == tuple(load.operands[1:]) \
        and ir.stored_tile(write).type.shape == load.result.type.shape


def slot_bytes(layout: L.Layout, item: int, num_warps: int) -> int:
    """One slot of a ring of ``item``-byte tiles in ``layout``: every thread's registers
    (replicas keep their own copy)."""
    return layout.n * item * 32 * num_warps


class RowRing:
    """The S-slot thread-private ring of one load (``plan`` is its ``RowRingPlan``)."""

    def __init__(self, lw, plan: RowRingPlan, stages: int):
        self.load, self.offsets, self.nibbles = plan.load, plan.offsets, plan.nibbles
        self.spec = array_spec(lw.fn, self.load.operands[0])
        self.layout = memory_layout(self.load.result.type.shape, self.spec, lw.num_warps) if self.nibbles \
            else lw.layouts[self.load.result]
        self.item = self.spec.dtype.itemsize
        self.per = 16 // self.item                      # elements per chunk
        self.chunks = L.Layout(L.LayoutKind.CHUNKS, self.layout.shape, self.layout.num_warps,
                               self.layout.regs[::self.per], self.layout.terms)
        self.threads = 32 * lw.num_warps
        if self.nibbles:                                # one swizzled (K, N/2) tile a slot, shared
            self.rows = (self.nibbles.k, self.nibbles.n // 2)
            self.slot_bytes = self.rows[0] * self.rows[1]
            self.base, self.buf = lw.alloc_shared(stages * self.slot_bytes, align=128)
        else:
            self.slot_bytes = self.chunks.n * 16 * self.threads
            self.base, self.buf = lw.alloc_shared(stages * self.slot_bytes, align=16)
        self.ops: list[ir.Operation] = []             # its copies and reads (ordered by the ring)

    def chunk_addresses(self, lw, slot) -> ir.Value:
        """Shared byte address of each of the thread's chunks in ``slot`` (i32, one per chunk)."""
        if self.nibbles:
            start = lw.ew(TileOp.ADD, [self.base, lw.ew(TileOp.MUL, [slot, lw.const(I32, [self.slot_bytes])], I32)], I32)
            flat = L.unit_dims_changed(self.chunks, self.rows)
            offsets, _ = lower_dot.swizzled_offsets(lw, flat, self.rows[1], 1)
            return lw.ew(TileOp.ADD, [lw.splat(start, flat.n), offsets], I32)
        tid = lw.thread_id("tid", placing=False)
        start = lw.ew(TileOp.ADD, [lw.ew(TileOp.MUL, [slot, lw.const(I32, [self.slot_bytes])], I32),
                                   lw.ew(TileOp.MUL, [tid, lw.const(I32, [16])], I32)], I32)
        start = lw.ew(TileOp.ADD, [self.base, start], I32)
        n = self.chunks.n
        return lw.ew(TileOp.ADD, [lw.splat(start, n), lw.const(I32, [c * 16 * self.threads for c in range(n)])], I32)

    def issue(self, lw, iv: ir.Value, iv_value, slot, valid) -> None:
        """cp.async of the thread's chunks of the tile the load reads when the induction variable
        is ``iv_value``, into ``slot``; zero-filled unless ``valid`` (bool scalar)."""
        from tilejit.passes.pipeline_loads import _chunk_sources
        with lw.at_iteration(iv, iv_value):
            lw.block(ir.Block([], list(self.offsets)))
            ptr, offs, src = _chunk_sources(lw, self.load, self.chunks, self.item)
            n = self.chunks.n
            src = lw.ew(TileOp.WHERE, [lw.splat(valid, n), src, lw.const(I32, [0] * n)], I32)
            addr = self.chunk_addresses(lw, slot)
            self.ops.append(lw.emit(SimtOp.CP_ASYNC, [ptr, offs, addr, src], None, simt.SharedAttrs(1, self.buf)))

    def read(self, lw, slot) -> ir.Value:
        """The load's tile, in its layout, from ``slot`` (elements outside the array: ``other``)."""
        if self.nibbles:
            return self.read_nibbles(lw, slot)
        n, per = self.layout.n, self.per
        chunk = self.chunk_addresses(lw, slot)
        addr = lw.ew(TileOp.ADD, [lw.gather(chunk, [r // per for r in range(n)]),
                                  lw.const(I32, [(r % per) * self.item for r in range(n)])], I32)
        dt = self.load.result.type.dtype
        op = lw.emit(SimtOp.LOAD_SHARED, [addr], simt.RegType(dt, n), simt.SharedAttrs(per, self.buf))
        self.ops.append(op)
        other = self.load.attrs.other if self.load.attrs else 0
        if other == 0:
            return op.result
        _, _, inside, _ = lower_memory.element_offsets(lw, self.load.operands[0], self.load.operands[1:], self.layout)
        return lw.ew(TileOp.WHERE, [inside, op.result, lw.const(dt, [other] * n)], dt)


    def read_nibbles(self, lw, slot) -> ir.Value:
        """The packed bytes from ``slot`` by ``ldmatrix.x4.trans`` (``mma_layouts.nibble_ldmatrix_layout``),
        in the load's layout (the same elements as ``nibble_bytes_layout``: a renaming)."""
        cfg, (k, half) = self.nibbles, self.rows
        rows = ML.nibble_ldmatrix_layout((k, half), cfg.warps)
        offsets, _ = lower_dot.swizzled_offsets(lw, rows, half, 1)
        start = lw.ew(TileOp.ADD, [self.base, lw.ew(TileOp.MUL, [slot, lw.const(I32, [self.slot_bytes])], I32)], I32)
        addr = lw.ew(TileOp.ADD, [lw.splat(start, rows.n), offsets], I32)
        words = []
        for j in range(rows.n):
            op = lw.emit(SimtOp.LDMATRIX, [lw.gather(addr, [j])], simt.RegType(I32, 4), simt.LdmatrixAttrs(4, True, self.buf))
            self.ops.append(op)
            words.append(op.result)
        chunks = half // cfg.warps[1] // ML.LDMATRIX_ROW_BYTES
        order = []                      # natural word (k step, chunk, row + 8) <- (ldmatrix j, register m)
        for kk in range(k // 16):
            for c in range(chunks):
                for h in range(2):
                    order.append((kk // 2 * chunks + c) * 4 + (kk % 2) * 2 + h)
        raw = lw.gather(lw.concat(words), order)
        dt = self.load.result.type.dtype
        values = lw.emit(SimtOp.UNPACK, [raw], simt.RegType(dt, 4 * len(order))).result
        natural = L.unit_dims_changed(ML.nibble_bytes_layout((k, half), cfg.warps), self.load.result.type.shape)
        return lw.gather(values, L.same_elements(natural, lw.layouts[self.load.result]))


def lower_row_ring_for(lw, o: ir.Operation, plan) -> None:
    """FOR ``o`` with the loads of ``plan.row_rings`` read from thread-private rings (see the
    module docstring)."""
    stages, ahead = plan.stages, plan.ahead
    region = o.regions[0]
    iv, args = region.args[0], region.args[1:]
    lb, ub = (lw.get(x) for x in o.operands[:2])
    step = o.operands[2].owner.attrs.value
    iv_dt = iv.type.dtype
    ub_iv, lb_iv = lw.cast(ub, iv_dt), lw.cast(lb, iv_dt)
    rings = [RowRing(lw, r, stages) for r in plan.row_rings]
    for s in range(ahead):
        iv_s = lw.ew(TileOp.ADD, [lb_iv, lw.const(iv_dt, [s * step])], iv_dt)
        valid = lw.ew(TileOp.LT, [iv_s, ub_iv], D.bool_)
        for ring in rings:
            ring.issue(lw, iv, iv_s, lw.const(I32, [s]), valid)
        lw.emit(SimtOp.CP_ASYNC_COMMIT, [])

    def before_body(iv_value):
        trip = lw.ew(TileOp.FLOORDIV, [lw.cast(lw.ew(TileOp.SUB, [iv_value, lb_iv], iv_dt), I32),
                                       lw.const(I32, [step])], I32)
        write = lw.ew(TileOp.MOD, [lw.ew(TileOp.ADD, [trip, lw.const(I32, [ahead])], I32),
                                   lw.const(I32, [stages])], I32)
        iv_ahead = lw.ew(TileOp.ADD, [iv_value, lw.const(iv_dt, [ahead * step])], iv_dt)
        valid = lw.ew(TileOp.LT, [iv_ahead, ub_iv], D.bool_)
        for ring in rings:
            ring.issue(lw, iv, iv_ahead, write, valid)
        lw.emit(SimtOp.CP_ASYNC_COMMIT, [])
        lw.emit(SimtOp.CP_ASYNC_WAIT, [], None, simt.WaitAttrs(ahead))
        read = lw.ew(TileOp.MOD, [trip, lw.const(I32, [stages])], I32)
        for ring in rings:
            lw.ring_read(ring.load, ring, read)

    inits = [lw.get(x, lw.layouts.get(a)) for x, a in zip(o.operands[3:], args)]
    body = lw.region(region, args, before=before_body)
    lw.control(o, SimtOp.FOR, [lw.get(x) for x in o.operands[:3]] + inits, [body])
    for ring in rings:
        lw.ring_done(ring.load)
    lw.emit(SimtOp.CP_ASYNC_WAIT, [], None, simt.WaitAttrs(0))
    lw.ordered_by_pipeliner(op for ring in rings for op in ring.ops)
