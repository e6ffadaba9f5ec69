"""Stream-K for persistent warp-specialised GEMMs: the last waves of output tiles are shared out
by k-iterations, so every CTA ends at about the same time.

    StreamK(tiles, ...)                 the schedule (``specialise_warps._Tiles`` asks it)
    accumulators(loop) -> bool          whether a k-loop's carried values may be split

A persistent kernel (``specialise_warps.PERSIST_TILES``) runs P CTAs over T output tiles; when
P does not divide T the last wave leaves ``P - T % P`` SMs idle (4096^3 at 128x256: 512 tiles,
3.88 waves, 3% of the time).  With ``STREAM_K`` on, each CTA ``c`` runs

    its data-parallel tiles c, c + P, ... below DP = T - SK (whole k-loops), then
    the k-iterations [lo, hi) = [c * I // P, (c + 1) * I // P) of the SK = T % P + P last tiles
    (all T when T < P; none when P divides T), I = SK * Kt and Kt the k-loop's trip count

so a stream-K tile is split into two or more *pieces* (k-ranges) of consecutive CTAs.  A
piece's producer fills and consumer waits count the CTA's k-iterations over all its units as
before (``base``).  After its loop a piece that is not the whole tile

    stores its accumulators to its own slot of the workspace (each thread its registers:
    ``slot + r * C + tid``, so a warp writes 128 consecutive bytes)
    named barrier; thread 0: atom.add.acq_rel.gpu(counter[s], its k-iterations) -> old
    (the count broadcast through shared memory); named barrier
    last = old + its k-iterations == Kt     # every other piece of the tile has stored

and only the last piece to arrive sums the slots of every piece of the tile (in k order: the
same result whoever arrives last), resets the counter for the next launch, and runs the
epilogue; the others skip it.  No CTA ever waits for another, so any launch order (and the
emulator's) is safe.  The workspace is a float32 buffer the runtime owns (``ParamKind.WORKSPACE``:
``2P`` counters, then two slots of ``R * C`` words per CTA, ``R`` accumulator registers a
thread and ``C`` consumer threads: a CTA holds at most a first and a last partial piece); its
counters are zero between launches.  Only loops whose carried values are float32 accumulators
that start at zero and are only added to by ``wgmma`` are split (a sum over k).
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.abi import ParamDesc, ParamKind
from tilejit.ir import TileOp
from tilejit.simt import PtrType, RegType, SimtOp

I32, I64, F32 = D.int32, D.int64, D.float32
# The switch (benchmarks/switch_probe.py): True shares the last waves of a persistent
# warp-specialised GEMM's tiles out by k-iterations where ``accumulators`` allows it.  Off: on the
# H100 (2026-12-05) it was 22% / 42% / 16% slower than the persistent kernel at 4096^3 / M4096
# N4096 K14336 / M128 N8192 K8192 -- each CTA's share starts at its own k offset, so the CTAs
# stop sharing A's and B's k-slices in L2 (hit rate 76% -> 64%, DRAM bytes 2.1x at 4096^3).
STREAM_K = False
CHUNK = 8                  # registers of a partial read and added at a time (ptxas: no spills at 128 a thread)


def accumulators(loop: ir.Operation) -> bool:
    """Whether every value ``loop`` carries is a float32 accumulator that starts at zero and that
    only ``wgmma`` adds to (through ``wgmma_wait``), so the loop's result is the sum of its
    iterations' products and any k-range of it may run apart."""
    body = loop.regions[0]
    args = body.args[1:]
    if not args or body.ops[-1].op is not SimtOp.YIELD:
        return False
    chain = set(args)
    for arg, init, out in zip(args, loop.operands[3:], body.ops[-1].operands):
        if arg.type.dtype != F32 or not _zero(init):
            return False
        v, seen = out, []
        while v is not arg:
            o = v.owner
            if o is None or o not in body.ops or o.op not in (SimtOp.WGMMA, SimtOp.WGMMA_WAIT):
                return False
            seen.append(v)
            v = o.operands[0] if o.op is SimtOp.WGMMA else o.operands[o.results.index(v)]
        chain |= set(seen)
    for o in body.walk():
        for i, x in enumerate(o.operands):
            if x in chain and not ((o.op is SimtOp.WGMMA and i == 0) or o.op in (SimtOp.WGMMA_WAIT, SimtOp.YIELD)):
                return False
    return True


def trip_count(e, k, lb, ub, step: int, into: list) -> ir.Value:
    """max(ceil((ub - lb) / step), 0): the trip count of a loop from ``lb`` to ``ub`` by ``step``,
    built into ``into`` with ``e(kind, a, b, into=)`` (an elementwise op) and ``k(v, into)`` (an
    int32 constant)."""
    span = e(TileOp.ADD, e(TileOp.SUB, ub, lb, into=into), k(step - 1, into), into=into)
    return e(TileOp.MAXIMUM, e(TileOp.FLOORDIV, span, k(step, into), into=into), k(0, into), into=into)


def _zero(v: ir.Value) -> bool:
    o = v.owner
    if o is not None and o.op is SimtOp.SPLAT:
        o = o.operands[0].owner
    return o is not None and o.op is SimtOp.CONSTANT and all(x == 0 for x in o.attrs.values)


class StreamK:
    """The stream-K schedule of a persistent kernel whose k-loop runs from ``lb`` to ``ub`` by
    ``step`` (values of the kernel's head: the same in every program).  ``tiles`` is the
    ``specialise_warps._Tiles`` it serves: its ``count`` becomes this CTA's units."""

    def __init__(self, fn, tiles, head: list, op, lb, ub, step: int, consumers: int):
        self.op, self.step, self.consumers, self.lb, self.ub = op, step, consumers, lb, ub
        self.units: dict = {}               # id(block) -> (block, its unit's values)
        self.words = 0
        e, k, h = self.e, self.k, head
        T, P, c = tiles.total, tiles.ctas, tiles.cta
        self.P, self.c = P, c
        self.kt = kt = trip_count(e, k, lb, ub, step, h)
        r = e(TileOp.MOD, T, P, into=h)
        on = e(TileOp.AND, e(TileOp.NE, r, k(0, h), into=h, dt=D.bool_), e(TileOp.GT, kt, k(0, h), into=h, dt=D.bool_),
               into=h, dt=D.bool_)
        sk = e(TileOp.WHERE, on, e(TileOp.MINIMUM, T, e(TileOp.ADD, r, P, into=h), into=h), k(0, h), into=h)
        self.dp = e(TileOp.SUB, T, sk, into=h)
        # this CTA's data-parallel tiles c, c + P, ... below dp (dp / P when stream-K is on; without
        # it -- P divides T, or the k-loop is empty -- every tile, ragged over the CTAs)
        self.n_dp = e(TileOp.FLOORDIV, e(TileOp.ADD, e(TileOp.SUB, self.dp, c, into=h), e(TileOp.SUB, P, k(1, h), into=h),
                                        into=h), P, into=h)
        self.kt1 = e(TileOp.MAXIMUM, kt, k(1, h), into=h)
        # k-iteration numbers fit 32 bits (I < 2^31); only the products c * I need 64
        self.I = e(TileOp.MUL, sk, kt, into=h)
        self.I1 = e(TileOp.MAXIMUM, self.I, k(1, h), into=h)
        self.lo = self.share(c, h)
        self.hi = self.share(e(TileOp.ADD, c, k(1, h), into=h), h)
        self.t0 = e(TileOp.FLOORDIV, self.lo, self.kt1, into=h)
        t1 = e(TileOp.FLOORDIV, e(TileOp.SUB, self.hi, k(1, h), into=h), self.kt1, into=h)
        pieces = e(TileOp.ADD, e(TileOp.SUB, t1, self.t0, into=h), k(1, h), into=h)
        n_sk = e(TileOp.WHERE, e(TileOp.GT, self.hi, self.lo, into=h, dt=D.bool_), pieces, k(0, h), into=h)
        self.t0_less_dp = e(TileOp.SUB, self.t0, self.n_dp, into=h)
        tiles.count = e(TileOp.ADD, self.n_dp, n_sk, into=h)
        # the workspace: a float32 buffer after the grid's extents
        index = len(fn.meta.params)
        fn.meta.params = list(fn.meta.params) + [ParamDesc(ParamKind.WORKSPACE, len(fn.arg_names) + 3, None, F32)]
        self.ws = op(SimtOp.PARAM, [], PtrType(F32), ir.AxisAttrs(index), into=h)
        # one word a consumer warp in shared memory: the arrival count thread 0 read, broadcast
        buffer = 1 + max(fn.meta.shared_buffers, default=-1)
        at = -(-fn.meta.shared_bytes // 16) * 16
        fn.meta.shared_buffers = {**fn.meta.shared_buffers, buffer: (at, 4 * (consumers // 32))}
        fn.meta.shared_bytes = at + 4 * (consumers // 32)
        self.flag, self.flag_buf = at, buffer

    # --- helpers
    def share(self, c, into):
        """The first k-iteration of CTA ``c``'s stream-K share, ``c * I // P`` (64-bit product)."""
        e = self.e
        return self.narrow(e(TileOp.FLOORDIV, e(TileOp.MUL, self.wide(c, into), self.wide(self.I, into), into=into, dt=I64),
                             self.wide(self.P, into), into=into, dt=I64), into)

    def e(self, kind, *xs, into, dt=I32, n=1):
        return self.op(SimtOp.ELEMENTWISE, list(xs), RegType(dt, n), simt.EwAttrs(kind), into=into)

    def k(self, value, into, dt=I32, n=1):
        return self.op(SimtOp.CONSTANT, [], RegType(dt, n), simt.VectorConstAttrs((value,) * n), into=into)

    def wide(self, x, into):
        return self.e(TileOp.CAST, x, into=into, dt=I64)

    def narrow(self, x, into):
        return self.e(TileOp.CAST, x, into=into)

    # --- one unit of the CTA's list
    def unit(self, blk: ir.Block) -> dict:
        """The values of unit ``blk.args[0]`` (emitted at the start of ``blk`` once): its output
        ``tile``, the loop bounds ``lb``/``ub`` that run its k-range and ``shift`` (``base`` less
        its first trip number: slot numbers continue the CTA's count)."""
        if id(blk) in self.units:
            return self.units[id(blk)][1]
        e, k, into = self.e, self.k, blk.ops
        i, base = blk.args
        in_sk = e(TileOp.GE, i, self.n_dp, into=into, dt=D.bool_)
        s = e(TileOp.ADD, i, self.t0_less_dp, into=into)
        tile = e(TileOp.WHERE, in_sk, e(TileOp.ADD, self.dp, s, into=into),
                 e(TileOp.ADD, self.c, e(TileOp.MUL, i, self.P, into=into), into=into), into=into)
        start = e(TileOp.MUL, s, self.kt1, into=into)
        first = e(TileOp.MAXIMUM, e(TileOp.SUB, self.lo, start, into=into), k(0, into), into=into)
        end = e(TileOp.MINIMUM, e(TileOp.SUB, self.hi, start, into=into), self.kt, into=into)
        a = e(TileOp.WHERE, in_sk, first, k(0, into), into=into)
        b = e(TileOp.WHERE, in_sk, end, self.kt, into=into)
        step = k(self.step, into)
        lb = e(TileOp.ADD, self.lb, e(TileOp.MUL, a, step, into=into), into=into)
        ub = e(TileOp.MINIMUM, e(TileOp.ADD, self.lb, e(TileOp.MUL, b, step, into=into), into=into), self.ub,
               into=into)
        out = dict(tile=tile, lb=lb, ub=ub, shift=e(TileOp.SUB, base, a, into=into))
        self.units[id(blk)] = (blk, out)          # (the block kept: its id stays its own)
        return out

    def after(self, blk: ir.Block, into: list) -> dict:
        """Unit ``blk``'s values a k-loop's end needs, computed again there from the loop bounds
        (so that they do not hold registers through the loop): its ``trips``, whether it is a
        ``partial`` piece (fewer trips than the tile's), its stream-K tile ``s`` (meaningful in
        a partial piece) and its workspace ``side`` (0: the CTA's first stream-K unit)."""
        e, k = self.e, self.k
        u, i = self.unit(blk), blk.args[0]
        step = k(self.step, into)
        a = e(TileOp.FLOORDIV, e(TileOp.SUB, u["lb"], self.lb, into=into), step, into=into)
        b = e(TileOp.FLOORDIV, e(TileOp.ADD, e(TileOp.SUB, u["ub"], self.lb, into=into), k(self.step - 1, into),
                                 into=into), step, into=into)
        trips = e(TileOp.SUB, b, a, into=into)
        return dict(trips=trips, partial=e(TileOp.LT, trips, self.kt, into=into, dt=D.bool_),
                    s=e(TileOp.ADD, e(TileOp.SUB, i, self.n_dp, into=into), self.t0, into=into),
                    side=e(TileOp.WHERE, e(TileOp.EQ, i, self.n_dp, into=into, dt=D.bool_), k(0, into), k(1, into),
                           into=into))

    def _slot(self, cta, side, tid, into):
        """The word of this thread's register 0 in ``cta``'s slot ``side``."""
        e, k = self.e, self.k
        slot = e(TileOp.ADD, e(TileOp.MUL, cta, k(2, into), into=into), side, into=into)
        return e(TileOp.ADD, e(TileOp.ADD, e(TileOp.MUL, self.P, k(2, into), into=into),
                               e(TileOp.MUL, slot, k(self.words, into), into=into), into=into), tid, into=into)

    def _offsets(self, first, r0: int, n: int, into):
        splat = self.op(SimtOp.SPLAT, [first], RegType(I32, n), into=into)
        step = self.op(SimtOp.CONSTANT, [], RegType(I32, n),
                       simt.VectorConstAttrs(tuple((r0 + q) * self.consumers for q in range(n))), into=into)
        return self.e(TileOp.ADD, splat, step, into=into, n=n)

    def fixup(self, blk: ir.Block, accs: list, bar_id, loc) -> tuple[list, list, ir.Value]:
        """(ops, the accumulators summed over every piece of the tile, ``last``): run after a
        unit's loop (``accs``: its accumulators once no wgmma is in flight); the epilogue runs
        where ``last`` holds."""
        op, e, k = self.op, self.e, self.k
        ops: list = []
        u = self.after(blk, ops)
        sizes = [a.type.n for a in accs]
        self.words = sum(sizes) * self.consumers
        tid = op(SimtOp.THREAD_ID, [], RegType(I32), into=ops)
        first = e(TileOp.EQ, tid, k(0, ops), into=ops, dt=D.bool_)
        own = self._slot(self.c, u["side"], tid, ops)
        r0 = 0
        for acc, n in zip(accs, sizes):
            mask = op(SimtOp.SPLAT, [u["partial"]], RegType(D.bool_, n), into=ops)
            op(SimtOp.STORE_GLOBAL, [self.ws, self._offsets(own, r0, n, ops), acc, mask], None, simt.GlobalAttrs(),
               into=ops)
            r0 += n
        barrier = simt.BarrierAttrs(self.consumers)
        op(SimtOp.BARRIER, [bar_id], None, barrier, into=ops)
        trips = e(TileOp.CAST, u["trips"], into=ops, dt=F32)
        arrive = e(TileOp.AND, first, u["partial"], into=ops, dt=D.bool_)
        old = op(SimtOp.ATOMIC_GLOBAL, [self.ws, u["s"], trips, arrive], RegType(F32),
                 ir.AtomicAttrs("add", "acq_rel", "gpu"), into=ops)
        old = op(SimtOp.SHUFFLE_IDX, [old, k(0, ops)], RegType(F32), into=ops)
        warp = e(TileOp.MUL, e(TileOp.SHR, tid, k(5, ops), into=ops), k(4, ops), into=ops)
        op(SimtOp.STORE_SHARED, [e(TileOp.ADD, k(self.flag, ops), warp, into=ops), old], None,
           simt.SharedAttrs(1, self.flag_buf), into=ops)
        op(SimtOp.BARRIER, [bar_id], None, barrier, into=ops)
        got = op(SimtOp.LOAD_SHARED, [k(self.flag, ops)], RegType(F32), simt.SharedAttrs(1, self.flag_buf), into=ops)
        whole = e(TileOp.CAST, self.kt, into=ops, dt=F32)
        done = e(TileOp.EQ, e(TileOp.ADD, got, trips, into=ops, dt=F32), whole, into=ops, dt=D.bool_)
        fixing = e(TileOp.AND, u["partial"], done, into=ops, dt=D.bool_)
        last = e(TileOp.OR, e(TileOp.XOR, u["partial"], k(True, ops, D.bool_), into=ops, dt=D.bool_), done,
                 into=ops, dt=D.bool_)
        op(SimtOp.STORE_GLOBAL, [self.ws, u["s"], k(0.0, ops, F32), e(TileOp.AND, first, fixing, into=ops, dt=D.bool_)],
           None, simt.GlobalAttrs(), into=ops)
        # the CTAs whose k-ranges meet tile s: CTA ((x + 1) * P - 1) // I runs iteration x
        x0 = e(TileOp.MUL, u["s"], self.kt1, into=ops)

        def runs(x):
            past = e(TileOp.SUB, e(TileOp.MUL, self.wide(e(TileOp.ADD, x, k(1, ops), into=ops), ops),
                                   self.wide(self.P, ops), into=ops, dt=I64), k(1, ops, I64), into=ops, dt=I64)
            return self.narrow(e(TileOp.FLOORDIV, past, self.wide(self.I1, ops), into=ops, dt=I64), ops)
        lo = e(TileOp.WHERE, fixing, runs(x0), k(0, ops), into=ops)
        last_x = e(TileOp.SUB, e(TileOp.ADD, x0, self.kt1, into=ops), k(1, ops), into=ops)
        hi = e(TileOp.WHERE, fixing, e(TileOp.ADD, runs(last_x), k(1, ops), into=ops), k(0, ops), into=ops)
        inits = []
        for acc, n in zip(accs, sizes):          # a piece's own registers count only through its slot
            mask = op(SimtOp.SPLAT, [u["partial"]], RegType(D.bool_, n), into=ops)
            inits.append(e(TileOp.WHERE, mask, k(0.0, ops, F32, n), acc, into=ops, dt=F32, n=n))
        # the loop over those CTAs' slots, in k order
        cc = ir.Value(RegType(I32), "cta")
        carried = [ir.Value(a.type, "sum") for a in accs]
        body: list = []
        # tile s is CTA cc's first stream-K unit when cc's share starts in it: cc * I >= s * kt * P
        # (products only: a 64-bit division in this loop costs registers the sums need)
        head = e(TileOp.GE, e(TileOp.MUL, self.wide(cc, body), self.wide(self.I, body), into=body, dt=I64),
                 e(TileOp.MUL, self.wide(x0, body), self.wide(self.P, body), into=body, dt=I64), into=body, dt=D.bool_)
        theirs = self._slot(cc, e(TileOp.WHERE, head, k(0, body), k(1, body), into=body), tid, body)
        sums, r0 = [], 0
        for v, n in zip(carried, sizes):          # a few registers at a time: loaded, then added, so
            parts = []                             # the loads do not all wait in registers at once
            for q in range(0, n, CHUNK):
                m = min(CHUNK, n - q)
                got = op(SimtOp.LOAD_GLOBAL, [self.ws, self._offsets(theirs, r0 + q, m, body),
                                              k(True, body, D.bool_, m)], RegType(F32, m), simt.GlobalAttrs(), into=body)
                mine = op(SimtOp.GATHER, [v], RegType(F32, m), simt.IndicesAttrs(tuple(range(q, q + m))), into=body)
                parts.append(e(TileOp.ADD, mine, got, into=body, dt=F32, n=m))
            sums.append(parts[0] if len(parts) == 1 else op(SimtOp.CONCAT, parts, RegType(F32, n), into=body))
            r0 += n
        body.append(ir.Operation(SimtOp.YIELD, sums, loc=loc))
        loop = ir.Operation(SimtOp.FOR, [lo, hi, k(1, ops)] + inits, [a.type for a in accs], None,
                            [ir.Block([cc] + carried, body)], loc)
        ops.append(loop)
        return ops, list(loop.results), last

    def epilogue(self, consumer: ir.Block, loop: ir.Operation, blk: ir.Block, bar_id, loc) -> None:
        """In place: after unit ``blk``'s loop in the consumers' ``consumer`` block (ending with its
        YIELD), and the wgmma wait that ends it, the pieces' hand-off (``fixup``); the rest of
        the program (its epilogue) runs only in the piece that completes the tile."""
        ops = consumer.ops
        at = ops.index(loop) + 1
        accs = list(loop.results)
        if ops[at].op is SimtOp.WGMMA_WAIT and list(ops[at].operands) == accs:
            accs = list(ops[at].results)
            at += 1
        rest = ops[at:-1]
        fix, sums, last = self.fixup(blk, accs, bar_id, loc)
        subst = dict(zip(accs, sums))
        for o in ir.Block([], rest).walk():
            o.operands = [subst.get(x, x) for x in o.operands]
        then = ir.Block([], rest + [ir.Operation(SimtOp.YIELD, [], loc=loc)])
        skip = ir.Block([], [ir.Operation(SimtOp.YIELD, [], loc=loc)])
        ops[at:] = fix + [ir.Operation(SimtOp.IF, [last], [], None, [then, skip], loc), ops[-1]]
