"""SIMT-IR passes for shared memory: planning (byte offsets, reusing the bytes of buffers whose
live ranges do not overlap) and barrier insertion.

Shared memory exists explicitly only in SIMT IR (lowering makes one SHARED_ALLOC per layout
conversion, cross-warp reduction, DOT operand tile and cp.async ring), so both passes run after
lowering and see every buffer without a side table.  LDMATRIX reads and CP_ASYNC writes count
as accesses (so do TMA copies and mbarrier ops); those in ``meta["self_synced_ops"]`` (a cp.async ring inside its pipelined loop)
are ordered by the pipeliner's own barriers.

The tensor cores' wgmma and the TMA copies reach shared memory through the *async proxy*: bytes
that threads stored with ordinary stores are visible to it only after each storing thread's
``fence.proxy.async`` and then a barrier.  ``insert_barriers`` puts that fence after every run
of stores whose bytes an async-proxy op may touch later (in the same block, or anywhere in a
loop around both), whichever barrier then publishes them (on the H200, a warp-specialised
attention read a stale q tile when the only barrier was the mbarriers' initialisation); the
emulator stops a WGMMA or TMA store that reads bytes stored without it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import ir, simt
from tilejit.simt import SimtOp

SHARED_ACCESS = (SimtOp.LOAD_SHARED, SimtOp.STORE_SHARED, SimtOp.LDMATRIX, SimtOp.CP_ASYNC, SimtOp.MBARRIER_INIT,
                 SimtOp.MBARRIER_EXPECT_TX, SimtOp.MBARRIER_WAIT, SimtOp.MBARRIER_INVAL, SimtOp.MBARRIER_ARRIVE)
SHARED_READS = (SimtOp.LOAD_SHARED, SimtOp.LDMATRIX, SimtOp.WGMMA, SimtOp.TMA_STORE, SimtOp.TMA_STORE_WAIT)
# shared memory a CTA may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin), per target
MAX_SHARED_BYTES = {"sm_80": 166912, "sm_90a": 232448}
DEDICATED_BYTES = 512    # buffers this small keep their own bytes: reuse would save almost
                         # nothing and would cost a barrier before the next writer


def accessed_buffers(o: ir.Operation) -> tuple:
    """The SHARED_ALLOC buffers op ``o`` reads or writes (a WGMMA reads A's and B's tiles)."""
    if o.op is SimtOp.WGMMA:
        return tuple(b for b in o.attrs.buffers if b is not None)
    if o.op is SimtOp.TMA_LOAD:
        return (o.attrs.buffer, o.attrs.bar_buffer)
    if o.op in (SimtOp.TMA_STORE, SimtOp.TMA_STORE_WAIT):
        return (o.attrs.buffer,)
    return (o.attrs.buffer,) if o.op in SHARED_ACCESS else ()


# ------------------------------------------------------------------------------------ planning
@dataclass
class Buffer:
    id: int
    size: int
    align: int
    start: int = 0        # live range, in pre-order op positions (inclusive)
    end: int = 0
    offset: int = 0


def _number(block: ir.Block, parent, pos: dict, end: dict, owner: dict, counter: list) -> None:
    """Pre-order position of each op, the last position inside it, and its enclosing op."""
    for o in block.ops:
        pos[o] = counter[0]
        owner[o] = parent
        counter[0] += 1
        for r in o.regions:
            _number(r, o, pos, end, owner, counter)
        end[o] = counter[0] - 1


def live_ranges(fn: ir.Function) -> list[Buffer]:
    """Each buffer lives from its SHARED_ALLOC to its last access; an access nested in a loop
    keeps the buffer live until that loop (in the allocating block) ends."""
    pos, end, owner = {}, {}, {}
    _number(fn.body, None, pos, end, owner, [0])
    allocs = {o.attrs.buffer: o for o in pos if o.op is SimtOp.SHARED_ALLOC}
    buffers = {b: Buffer(b, o.attrs.size, o.attrs.align, pos[o], pos[o]) for b, o in allocs.items()}
    for o in pos:
        for b in accessed_buffers(o):
            if b not in buffers:
                continue
            home = owner[allocs[b]]
            x = o
            while owner[x] is not home:
                x = owner[x]
            buffers[b].end = max(buffers[b].end, end[x])
    return sorted(buffers.values(), key=lambda b: (b.start, b.id))


def _overlaps_in_time(a: Buffer, b: Buffer) -> bool:
    if a.size <= DEDICATED_BYTES or b.size <= DEDICATED_BYTES:
        return True
    return a.start <= b.end and b.start <= a.end


def ring_buffers(fn: ir.Function) -> set:
    """The buffers of ``fn``'s TMA rings and their mbarriers (``meta.tma_loops``)."""
    out = set()
    for rec in fn.meta.tma_loops:
        out.add(rec.bar_buf)
        out |= {o.attrs.buffer for o in rec.fills + rec.body_fills if o.op is SimtOp.TMA_LOAD}
    return out


def plan_shared_memory(fn: ir.Function, keep: set = frozenset(), limit: int | None = None) -> ir.Function:
    """Give each buffer a byte offset (first fit among the buffers live at the same time),
    replace each SHARED_ALLOC by a CONSTANT of its offset, and record ``meta["shared_bytes"]``
    and ``meta["shared_buffers"]`` ({id: (offset, size)}).  The buffers in ``keep`` share their
    bytes with no other (a persistent kernel's rings are refilled while its epilogue runs),
    unless that takes more than ``limit`` bytes."""
    buffers = live_ranges(fn)
    if keep:
        kept = sorted((Buffer(b.id, b.size, b.align, -1, 1 << 62) if b.id in keep else b for b in buffers),
                      key=lambda b: (b.start, b.id))
        if limit is None or _place(kept) <= limit:
            buffers = kept
    _place(buffers)
    offsets = {b.id: b for b in buffers}
    for o in fn.walk():
        if o.op is SimtOp.SHARED_ALLOC:
            o.op, o.attrs = SimtOp.CONSTANT, simt.VectorConstAttrs((offsets[o.attrs.buffer].offset,))
    fn.meta.shared_bytes = max((b.offset + b.size for b in buffers), default=0)
    fn.meta.shared_buffers = {b.id: (b.offset, b.size) for b in buffers}
    return fn


def _place(buffers: list[Buffer]) -> int:
    """Set each buffer's offset (first fit, in order); the bytes they take."""
    placed: list[Buffer] = []
    for buf in buffers:
        offset = 0
        for other in sorted((p for p in placed if _overlaps_in_time(p, buf)), key=lambda p: p.offset):
            if offset + buf.size <= other.offset:
                break
            offset = max(offset, -(-(other.offset + other.size) // buf.align) * buf.align)
        buf.offset = offset
        placed.append(buf)
    return max((b.offset + b.size for b in placed), default=0)


# ----------------------------------------------------------------------------------- barriers
@dataclass(frozen=True)
class Pending:
    """Byte ranges written and read since the last barrier."""
    written: frozenset = frozenset()
    read: frozenset = frozenset()

    def __or__(self, other: "Pending") -> "Pending":
        return Pending(self.written | other.written, self.read | other.read)


_ASYNC_PROXY = (SimtOp.WGMMA, SimtOp.TMA_STORE, SimtOp.TMA_LOAD)


def _hits(ranges, rng) -> bool:
    return any(lo < rng[1] and rng[0] < hi for lo, hi in ranges)


def _stores_before_async_ops(fn: ir.Function, ranges: dict) -> set:
    """The STORE_SHARED ops an async-proxy op (a WGMMA, a TMA copy) may follow on bytes they
    share: later in a block they share, or anywhere in a loop around both.  Their stores need a
    proxy fence; one in the other branch of an IF, or after the last such op, does not."""
    paths, stores, asyncs = {}, [], []

    def visit(block, path):
        for i, o in enumerate(block.ops):
            here = path + ((o, i),)
            if o.op is SimtOp.STORE_SHARED:
                stores.append(o)
            elif o.op in _ASYNC_PROXY:
                asyncs.append(o)
            paths[o] = here
            for k, region in enumerate(o.regions):
                visit(region, here + ((None, k),))
    visit(fn.body, ())

    def touched(o):
        if o.op is SimtOp.TMA_LOAD:
            return {ranges[o.attrs.buffer]}
        return {ranges[b] for b in accessed_buffers(o)}

    def may_follow(store, op) -> bool:
        for (s_op, s_i), (a_op, a_i) in zip(paths[store], paths[op]):
            if s_i != a_i:                   # first difference: the same block, or an IF's two regions
                return a_i > s_i and s_op is not None
            if s_op is not None and s_op.op in (SimtOp.FOR, SimtOp.WHILE):
                return True                  # a loop around both: its next iteration follows
        return False

    return {s for s in stores for a in asyncs
            if any(_hits(touched(a), ranges[b]) for b in accessed_buffers(s)) and may_follow(s, a)}


class BarrierInserter:
    """A BARRIER goes before a shared read of bytes written since the last barrier (another
    thread wrote them) and before a shared write of bytes read or written since then (another
    thread may not have read them yet).  Loops are analysed with their back edge.  Ops in
    ``meta["self_synced_ops"]`` (a cp.async ring inside its loop) are skipped: the pipeliner
    knows each iteration touches another slot and places one barrier per iteration; after the
    loop its copies count as writes (other threads' may still land), so a buffer reusing the
    ring's bytes waits for a barrier.  A thread's
    store to a buffer the async proxy reads (a WGMMA operand, a TMA store's staging) is followed
    by a FENCE_PROXY_ASYNC after the run of stores it ends, so whichever barrier comes next
    publishes it to the tensor cores and the copy engine."""

    def __init__(self, fn: ir.Function):
        self.ranges = {b: (off, off + size) for b, (off, size) in fn.meta.shared_buffers.items()}
        self.skip = fn.meta.self_synced_ops
        self.count = 0
        # bytes the async proxy touches (wgmma operands, TMA copies' boxes): a thread's ordinary
        # store to them is followed by its fence.proxy.async, before any barrier that publishes
        # it (a barrier placed for other reasons, such as the mbarriers' initialisation, may
        # already separate the store from the wgmma, so the fence cannot wait for the wgmma);
        # a store to another buffer sharing their bytes counts too (a TMA copy overwrites it)
        self.fenced_stores = _stores_before_async_ops(fn, self.ranges)

    def ring_writes(self, body: ir.Block) -> frozenset:
        """The byte ranges of the self-synchronised copies in ``body`` (at any depth)."""
        return frozenset(self.ranges[b] for x in body.walk() if x in self.skip and x.op is SimtOp.CP_ASYNC
                         for b in accessed_buffers(x))

    def block(self, block: ir.Block, state: Pending, insert: bool) -> Pending:
        out = []
        unfenced = False                # a store to bytes the async proxy reads is not fenced yet
        final = block.ops[-1] if block.ops else None
        for o in block.ops:
            buffers = accessed_buffers(o) if o not in self.skip else ()
            # one fence for a run of such stores (arithmetic between them does not end the run)
            if unfenced and (o.regions or o.op is SimtOp.BARRIER or o is final
                             or (buffers and o.op is not SimtOp.STORE_SHARED)):
                out.append(ir.Operation(SimtOp.FENCE_PROXY_ASYNC, loc=o.loc))
                unfenced = False
            if insert and o in self.fenced_stores:
                unfenced = True
            if buffers:
                rngs = {self.ranges[b] for b in buffers}
                reading = o.op in SHARED_READS
                if any(_hits(state.written if reading else state.written | state.read, r) for r in rngs):
                    if insert:
                        fenced = out and out[-1].op is SimtOp.FENCE_PROXY_ASYNC
                        if o.op in (SimtOp.WGMMA, SimtOp.TMA_STORE) and not fenced:
                            # bytes stored by threads (cp.async too), read by the async proxy
                            out.append(ir.Operation(SimtOp.FENCE_PROXY_ASYNC, loc=o.loc))
                        out.append(ir.Operation(SimtOp.BARRIER, loc=o.loc))
                        self.count += 1
                    state = Pending()
                state = Pending(state.written | (set() if reading else rngs),
                                state.read | (rngs if reading else set()))
            elif o.op is SimtOp.BARRIER:
                state = Pending()
            elif o.op in (SimtOp.FOR, SimtOp.WHILE):
                body = o.regions[0]
                first = self.block(body, state, False)
                last = self.block(body, state | first, insert)
                state = last if o.op is SimtOp.WHILE else state | last
                # the ring's copies (skipped above: the pipeliner orders them within the loop)
                # may still land after the loop, zero-filled past its end, until every thread has
                # waited for its own: bytes another buffer reuses afterwards need a barrier first
                state = Pending(state.written | self.ring_writes(body), state.read)
            elif o.op is SimtOp.IF:
                then, other = (self.block(r, state, insert) for r in o.regions)
                state = then | other
            out.append(o)
        if unfenced:
            out.append(ir.Operation(SimtOp.FENCE_PROXY_ASYNC, loc=block.ops[-1].loc))
        if insert:
            block.ops[:] = out
        return state


def insert_barriers(fn: ir.Function) -> ir.Function:
    inserter = BarrierInserter(fn)
    inserter.block(fn.body, Pending(), True)
    fn.meta.barriers = inserter.count
    return fn
