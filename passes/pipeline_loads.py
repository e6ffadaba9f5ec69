"""Software pipelining of the loads that feed ``tj.dot`` in ``tj.range(..., stages=S)`` loops:
each such load becomes 16-byte ``cp.async`` copies into an S-slot ring of swizzled shared
tiles, issued S-1 iterations ahead of the DOT that reads them.

    prologue:  for s in 0..S-2: copy iteration s into slot s; commit        (masked past ub)
    iteration j:  wait_group(S-2); barrier            # slot j%S landed; slot (j-1)%S is free
                  copy iteration j+S-1 into slot (j+S-1)%S; commit          (masked past ub)
                  the body, its DOT reading slot j%S with ldmatrix
    after:     wait_group(0); barrier                 # nothing in flight, the ring is free

One barrier per iteration covers both hazards: the wait makes each thread's copies visible to
the others, and every warp has finished reading slot (j-1)%S before it is overwritten.  Copies
past the loop's end or the array's edge use ``src_bytes`` to zero-fill (ragged K and trip
counts below S need no other code).  Which loads are ringed, in which layout, and how far
ahead is decided by ``plan_loops`` (a ``LoopPlan`` per loop); this module only emits it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tilejit.abi import ParamKind
from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_memory, wgmma
from tilejit.passes.assign_layouts import array_spec, memory_layout
from tilejit.passes.lower_dot import swizzled_offsets
from tilejit.passes import tma as tma_copies
from tilejit.passes.plans import CopyEngine, LoopPlan, RingPlan, Staged
from tilejit.simt import SimtOp

I32 = D.int32


class Ring:
    """The S-slot shared ring of one pipelined load (``plan`` is its ``RingPlan``)."""

    def __init__(self, lw, plan: RingPlan, stages: int):
        self.plan = plan
        self.load, self.tile, self.offsets = plan.load, plan.tile, plan.offsets
        self.cfg = lw.dot_plans.config(plan.dot)
        self.value, self.wgmma = plan.operand, plan.wgmma
        self.slot_bytes = self.cfg.tile_bytes(self.tile)
        # 128: ldmatrix's swizzle spreads rows over the banks of a line (lower_dot); 1024: a
        # wgmma swizzle atom starts on a 1024-byte boundary (passes.wgmma)
        self.base, self.buf = lw.alloc_shared(stages * self.slot_bytes, align=1024 if self.wgmma else 128)

    def issue(self, lw, iv: ir.Value, iv_value, slot, valid) -> None:
        """cp.async of the tile the load reads when the induction variable is ``iv_value``
        into ``slot`` (i32); everything is zero-filled unless ``valid`` (bool scalar)."""
        with lw.at_iteration(iv, iv_value):
            lw.block(ir.Block([], list(self.offsets)))      # the offsets at that iteration
            spec = array_spec(lw.fn, self.load.operands[0])
            item = spec.dtype.itemsize
            copy = memory_layout(self.load.result.type.shape, spec, lw.num_warps)
            assert L.contiguous_run(copy) >= 16 // item, copy
            # one register per 16-byte chunk: the first element of each group of 16 // item
            chunks = L.Layout(L.LayoutKind.CHUNKS, copy.shape, copy.num_warps, copy.regs[::16 // item], copy.terms)
            ptr, offs, src = _chunk_sources(lw, self.load, chunks, item)
            ok = lw.splat(valid, chunks.n)
            src = lw.ew(TileOp.WHERE, [ok, src, lw.const(I32, [0] * chunks.n)], I32)
            stored = L.unit_dims_changed(chunks, tuple(d for d in copy.shape if d != 1))   # as in the slot
            if self.tile.atoms:
                rel = wgmma.atom_offsets(lw, stored, item, stored.shape[0])
            else:
                rel, _ = swizzled_offsets(lw, stored, self.cfg.row_bytes(self.tile), item)
            addr = lw.ew(TileOp.ADD, [lw.splat(self.slot_base(lw, slot), chunks.n), rel], I32)
            primary = lw.primary_thread(chunks)        # replicas would copy the same bytes again
            lw.emit(SimtOp.CP_ASYNC, [ptr, offs, addr, src] + ([primary] if primary is not None else []),
                    None, simt.SharedAttrs(1, self.buf))

    def slot_base(self, lw, slot) -> ir.Value:
        return lw.ew(TileOp.ADD, [self.base, lw.ew(TileOp.MUL, [slot, lw.const(I32, [self.slot_bytes])], I32)], I32)


def _chunk_sources(lw, load: ir.Operation, chunks: L.Layout, item: int):
    """(pointer, element offset, bytes to read) of each chunk register: the whole 16 bytes
    inside the array, fewer at its right edge (a chunk never starts left of column 0: offsets
    are multiples of the chunk), none outside it.  Every chunk's address is 16-byte aligned,
    outside ones included (``element_offsets``' ``aligned_outside``), so a ring needs no
    run-time check of the strides."""
    array, offsets = load.operands[0], load.operands[1:]
    ptr, offs, mask, _ = lower_memory.element_offsets(lw, array, offsets, chunks, aligned_outside=True)
    n, idx_dt, last = chunks.n, offs.type.dtype, chunks.rank - 1
    first_col = lw.ew(TileOp.ADD, [lw.cast(lw.get(offsets[-1]), idx_dt),
                                   lw.cast(lw.thread_coord(chunks, last), idx_dt)], idx_dt)
    col0 = lw.ew(TileOp.ADD, [lw.splat(first_col, n), lw.const(idx_dt, [c[last] for c in chunks.regs])], idx_dt)
    dim = lw.cast(lw.param(ParamKind.DIM, lower_memory.arg_index(lw, array), last), idx_dt)
    left = lw.ew(TileOp.MINIMUM, [lw.ew(TileOp.SUB, [lw.splat(dim, n), col0], idx_dt),
                                  lw.const(idx_dt, [16 // item] * n)], idx_dt)
    nbytes = lw.ew(TileOp.MUL, [lw.cast(left, I32), lw.const(I32, [item] * n)], I32)
    return ptr, offs, lw.ew(TileOp.WHERE, [mask, nbytes, lw.const(I32, [0] * n)], I32)


def _sync(lw, wait: int, async_proxy: bool = False) -> None:
    lw.emit(SimtOp.CP_ASYNC_WAIT, [], None, simt.WaitAttrs(wait))
    if async_proxy:          # the copies' bytes are read by wgmma (the async proxy) next
        lw.emit(SimtOp.FENCE_PROXY_ASYNC, [])
    lw.emit(SimtOp.BARRIER, [])


def _bounds(lw, o: ir.Operation):
    """(induction variable, lower and upper bound, the constant step) of FOR ``o``."""
    lb, ub = (lw.get(x) for x in o.operands[:2])
    return o.regions[0].args[0], lb, ub, o.operands[2].owner.attrs.value


def _emit_loop(lw, o: ir.Operation, plan: LoopPlan, rings, before_body) -> ir.Block:
    """The pipelined FOR itself (``before_body(iv)`` opens each iteration), the last wgmma
    group retired after it, the rings' operands unstaged; its body."""
    region = o.regions[0]
    args = region.args[1:]
    inits = [lw.get(x, lw.layouts.get(a)) for x, a in zip(o.operands[3:], args)]
    with lw.pipelined_body(plan):
        body = lw.region(region, args, before=before_body)
    lw.control(o, SimtOp.FOR, [lw.get(x) for x in o.operands[:3]] + inits, [body])
    if o in lw.rotated:                       # a product carried in flight: unrolled by two (codegen)
        loop = lw.b.block.ops[-1]
        loop.attrs = dataclasses.replace(loop.attrs or ir.ForAttrs(), unroll=True)
    if plan.wgmma_in_flight:                  # the last group, before anything reads the results
        carried = [r for r in o.results if lw.reg_type(r).dtype == D.float32]
        for r, v in zip(carried, wgmma.wait_group(lw, [lw.values[r] for r in carried], 0)):
            lw.rebind(r, v)
    for ring in rings:
        lw.unstage(ring.value)
    return body


def lower_pipelined_for(lw, o: ir.Operation, plan: LoopPlan) -> None:
    """Lower FOR ``o`` with the loads of its ``plan`` issued through cp.async rings (or TMA,
    ``lower_tma_for``, when the plan's engine says so)."""
    if plan.engine is CopyEngine.TMA:
        return lower_tma_for(lw, o, plan)
    stages = plan.stages
    iv, lb, ub, step_value = _bounds(lw, o)
    iv_dt = iv.type.dtype
    rings = [Ring(lw, ring, stages) for ring in plan.rings]
    # the loop's other big loads through thread-private rings (``row_rings.dot_loop_row_rings``),
    # copied in the same commit groups: the wait before each iteration lands them too
    rows = [lw.row_ring(r, stages) for r in plan.row_rings]
    async_proxy = plan.async_proxy
    ahead = plan.ahead
    ub_iv = lw.cast(ub, iv_dt)
    for s in range(ahead):
        iv_s = lw.ew(TileOp.ADD, [lw.cast(lb, iv_dt), lw.const(iv_dt, [s * step_value])], iv_dt)
        valid = lw.ew(TileOp.LT, [iv_s, ub_iv], D.bool_)
        first = len(lw.b.block.ops)
        for ring in rings + rows:
            ring.issue(lw, iv, iv_s, lw.const(I32, [s]), valid)
        lw.emit(SimtOp.CP_ASYNC_COMMIT, [])
        if s:        # other slots of the ring: the barrier before slot 0's copies covers them
            lw.ordered_by_pipeliner(op for op in lw.b.block.ops[first:] if op.op is SimtOp.CP_ASYNC)
    for row in rows:
        if row.nibbles:             # a shared tile: its prologue copies are left to insert_barriers too
            row.ops.clear()

    def before_body(iv_value):
        _sync(lw, ahead - 1, async_proxy)
        trip = lw.ew(TileOp.FLOORDIV, [lw.cast(lw.ew(TileOp.SUB, [iv_value, lw.cast(lb, iv_dt)], iv_dt), I32),
                                       lw.const(I32, [step_value])], I32)
        lw.set_trip(trip)
        read = lw.ew(TileOp.MOD, [trip, lw.const(I32, [stages])], I32)
        write = lw.ew(TileOp.MOD, [lw.ew(TileOp.ADD, [trip, lw.const(I32, [ahead])], I32),
                                   lw.const(I32, [stages])], I32)
        iv_ahead = lw.ew(TileOp.ADD, [iv_value, lw.const(iv_dt, [ahead * step_value])], iv_dt)
        valid = lw.ew(TileOp.LT, [iv_ahead, ub_iv], D.bool_)
        for ring in rings + rows:
            ring.issue(lw, iv, iv_ahead, write, valid)
        lw.emit(SimtOp.CP_ASYNC_COMMIT, [])
        for ring in rings:
            lw.stage(ring.value, Staged(ring.slot_base(lw, read), ring.buf, ring.tile))
        for row in rows:            # each thread reads back its own chunks (or, nibble rings, any
            lw.ring_read(row.load, row, read)      # chunk after the barrier above): no barrier of their own

    body = _emit_loop(lw, o, plan, rings, before_body)
    for row in rows:
        lw.ring_done(row.load)
    lw.ordered_by_pipeliner(op for row in rows for op in row.ops)
    # inside the loop the ring's accesses are ordered by the barrier above; the prologue's
    # copies are left to insert_barriers (the ring may reuse bytes read before the loop)
    ring_ids = {ring.buf for ring in rings}
    lw.ordered_by_pipeliner(op for op in body.walk() if op.op in (SimtOp.CP_ASYNC, SimtOp.LDMATRIX,
                                                                   SimtOp.LOAD_SHARED)
                            and op.attrs.buffer in ring_ids)
    _sync(lw, 0)                              # drained; the ring's bytes may be reused


# ------------------------------------------------------------------------------------------- TMA
class TmaRing(Ring):
    """A ring filled by TMA boxes (``passes.tma``) issued by one thread."""

    def __init__(self, lw, plan: RingPlan, stages: int):
        super().__init__(lw, plan, stages)
        self.copies = tma_copies.ring_copies(lw.fn, plan, self.slot_bytes)
        array = self.load.operands[0]
        arg, dt = lower_memory.arg_index(lw, array), array.type.dtype
        self.maps = [lw.tensor_map(arg, dt, c.box, c.swizzle) for c in self.copies]
        self.bytes = sum(c.elements for c in self.copies) * dt.itemsize

    def issue_tma(self, lw, iv: ir.Value, iv_value, slot, bar, bar_buf: int, issue) -> None:
        """The boxes the load reads when the induction variable is ``iv_value``, into ``slot``,
        completing on mbarrier ``bar``, issued where ``issue`` holds."""
        with lw.at_iteration(iv, iv_value):
            lw.block(ir.Block([], list(self.offsets)))
            coords = [lw.cast(lw.get(x), I32) for x in self.load.operands[1:]]
            base = self.slot_base(lw, slot)
            for c, tmap in zip(self.copies, self.maps):
                at = coords[:-1] + [lw.ew(TileOp.ADD, [coords[-1], lw.const(I32, [c.inner])], I32)
                                    if c.inner else coords[-1]]
                dst = lw.ew(TileOp.ADD, [base, lw.const(I32, [c.dst])], I32) if c.dst else base
                lw.emit(SimtOp.TMA_LOAD, [tmap, dst, bar, issue, *at], None,
                        simt.TmaAttrs(c.box, c.swizzle, self.buf, bar_buf))


@dataclass
class TmaLoop:
    """What ``lower_tma_for`` emitted for one loop, for ``specialise_warps`` to move the copies
    to a producer warpgroup: the FOR, its ring depth, how far ahead it fills and how many wgmma
    groups stay in flight; the slots' mbarriers (``bars``, buffer ``bar_buf``) and the thread
    that issues (``leader``); the ops that set the mbarriers up, fill the slots before the loop
    (``fills``) and in it (``body_fills``, after the iteration's ``body_sync`` barrier), the
    iteration's trip number, and the ops that tear the mbarriers down."""
    loop: ir.Operation
    stages: int
    ahead: int
    in_flight: int
    step: int
    bars: ir.Value
    bar_buf: int
    leader: ir.Value
    setup: list = field(default_factory=list)
    fills: list = field(default_factory=list)
    body_sync: ir.Operation | None = None
    body_fills: list = field(default_factory=list)
    trip: ir.Value | None = None
    teardown: list = field(default_factory=list)


def lower_tma_for(lw, o: ir.Operation, plan: LoopPlan) -> None:
    """FOR ``o`` with its rings filled by TMA: one mbarrier per slot, thread 0 issuing.

        before:    thread 0: init the S mbarriers (one arrival each); fence; barrier
                   for s in 0..ahead-1: thread 0: expect_tx(bar s); boxes of iteration s -> slot s
        iteration j (trip t):  barrier                    # every warp is done with slot (t-1)%S
                   thread 0: expect_tx(bar w); boxes of iteration t+ahead -> slot w = (t+ahead)%S
                   wait(bar t%S, parity (t // S) & 1)     # slot t%S landed
                   the body, its DOT reading slot t%S
        after:     barrier; thread 0: inval the mbarriers (nothing is in flight)

    Copies past the loop's end are not issued (and never waited for); boxes past the array's
    edge are zero-filled by the TMA unit.  The loop is recorded (``TmaLoop``) in
    ``lw.tma_loops``."""
    stages, ahead = plan.stages, plan.ahead
    iv, lb, ub, step_value = _bounds(lw, o)
    iv_dt = iv.type.dtype
    rings = [TmaRing(lw, ring, stages) for ring in plan.rings]
    tx = sum(r.bytes for r in rings)
    bars, bar_buf = lw.alloc_shared(8 * stages, align=8)
    leader = lw.ew(TileOp.EQ, [lw.thread_id("tid", placing=False), lw.const(I32, [0])], D.bool_)
    ub_iv = lw.cast(ub, iv_dt)
    rec = TmaLoop(None, stages, ahead, plan.wgmma_in_flight, step_value, bars, bar_buf, leader)

    def bar_at(slot):
        return lw.ew(TileOp.ADD, [bars, lw.ew(TileOp.MUL, [slot, lw.const(I32, [8])], I32)], I32)

    def mbarrier(op, bar, operand, n=1):
        return lw.emit(op, [bar, operand], None, simt.MbarrierAttrs(n, bar_buf))

    def fill(iv_value, slot, into):
        valid = lw.ew(TileOp.LT, [iv_value, ub_iv], D.bool_)
        go = lw.ew(TileOp.AND, [leader, valid], D.bool_)
        bar = bar_at(slot)
        into.append(mbarrier(SimtOp.MBARRIER_EXPECT_TX, bar, go, tx))
        for ring in rings:
            first = len(lw.b.block.ops)
            ring.issue_tma(lw, iv, iv_value, slot, bar, bar_buf, go)
            into += [x for x in lw.b.block.ops[first:] if x.op is SimtOp.TMA_LOAD]

    for s in range(stages):
        rec.setup.append(mbarrier(SimtOp.MBARRIER_INIT, bar_at(lw.const(I32, [s])), leader))
    rec.setup.append(lw.emit(SimtOp.FENCE_MBARRIER_INIT, []))
    rec.setup.append(lw.emit(SimtOp.BARRIER, []))
    for s in range(ahead):
        fill(lw.ew(TileOp.ADD, [lw.cast(lb, iv_dt), lw.const(iv_dt, [s * step_value])], iv_dt), lw.const(I32, [s]),
             rec.fills)

    def before_body(iv_value):
        rec.body_sync = lw.emit(SimtOp.BARRIER, [])
        trip = rec.trip = lw.ew(TileOp.FLOORDIV, [lw.cast(lw.ew(TileOp.SUB, [iv_value, lw.cast(lb, iv_dt)], iv_dt), I32),
                                                  lw.const(I32, [step_value])], I32)
        lw.set_trip(trip)
        write = lw.ew(TileOp.MOD, [lw.ew(TileOp.ADD, [trip, lw.const(I32, [ahead])], I32), lw.const(I32, [stages])], I32)
        fill(lw.ew(TileOp.ADD, [iv_value, lw.const(iv_dt, [ahead * step_value])], iv_dt), write, rec.body_fills)
        read = lw.ew(TileOp.MOD, [trip, lw.const(I32, [stages])], I32)
        parity = lw.ew(TileOp.AND, [lw.ew(TileOp.FLOORDIV, [trip, lw.const(I32, [stages])], I32),
                                    lw.const(I32, [1])], I32)
        rec.body_fills.append(mbarrier(SimtOp.MBARRIER_WAIT, bar_at(read), parity))
        for ring in rings:
            lw.stage(ring.value, Staged(ring.slot_base(lw, read), ring.buf, ring.tile))

    body = _emit_loop(lw, o, plan, rings, before_body)
    rec.loop = next(x for x in reversed(lw.b.block.ops) if x.op is SimtOp.FOR)
    rec.teardown.append(lw.emit(SimtOp.BARRIER, []))
    for s in range(stages):
        rec.teardown.append(mbarrier(SimtOp.MBARRIER_INVAL, bar_at(lw.const(I32, [s])), leader))
    ring_ids = {ring.buf for ring in rings}
    lw.ordered_by_pipeliner(x for x in rec.setup + rec.fills + rec.body_fills + rec.teardown
                            if x.op is not SimtOp.TMA_LOAD or x in rec.body_fills)
    lw.ordered_by_pipeliner(op for op in body.walk() if op.op in (SimtOp.TMA_LOAD, SimtOp.LDMATRIX, SimtOp.LOAD_SHARED)
                            and op.attrs.buffer in ring_ids)
    lw.record_tma_loop(rec)
