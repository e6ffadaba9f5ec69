"""Warp specialisation of a TMA-filled wgmma loop: a producer warpgroup issues the copies, the
kernel's own warps only compute.

    specialise_warps(fn) -> fn        specialisable(fn) -> (TmaLoop, guard IF | None) | None

Input: a kernel whose one TMA loop (``pipeline_loads.TmaLoop``) sits at its top level, or in
the then-branch of a top-level IF (the kernel's own ``if`` around its loop).  Output::

    <the pure ops the copies need: parameters, program ids, shared addresses>  (all threads)
    thread 0: init full[s] (1 arrival), empty[s] (C arrivals) for each slot s; fence; barrier
    if tid < C:                                   # the C = 32 * num_warps compute threads
        setmaxnreg.inc                            # (where the register file allows it)
        the kernel as before, without the copies: each iteration waits full[t % S], runs the
        body, then arrives on empty[(t - in_flight) % S] (the slot whose wgmma has retired);
        every CTA-wide barrier becomes named barrier 1 over the C threads
    else:                                         # one producer warpgroup
        setmaxnreg.dec
        the copies before the loop, as before (slots 0..ahead-1)
        for each iteration t < trips - ahead: wait empty[p % S] (parity (p // S + 1) & 1, which a
            fresh mbarrier passes) for p = t + ahead; expect_tx(full[p % S]); the boxes of p

Registers (``ctas_per_sm``): built for one CTA an SM, whose consumers' ``setmaxnreg.inc`` takes
what the producer's ``.dec`` gives back of the register file.  Where the CTA's shared memory
fits 2 or 3 on an SM (up to ``CTAS_PER_SM``), the kernel wishes for that many
(``meta.ws_ctas_wishes``), most first: the cuda backend assembles it for each wish, with the
register file's share of one of that many CTAs, and keeps the first that ptxas neither refuses
nor spills (``backends.cuda.assemble_wished``).  Small tiles (attention at head dim 64) then run
the warpgroups of several CTAs side by side on an SM.

The producer's thread C issues (the copies are predicated on it); all four producer warps run
the loop and wait.  The mbarriers are never invalidated: the loop runs once per CTA, and its
mbarrier buffer is too small to be shared with another (``shared_memory.DEDICATED_BYTES``).
Ping-pong (``PINGPONG``, off until measured on the GPU): with two consumer warpgroups whose loop
issues two or more wgmma groups (attention's QK^T and PV), the warpgroups take turns at the
tensor cores through named barriers 2-4 (``pingpong``), so one's softmax overlaps the other's
products; with ``PINGPONG_PROMOTION`` (on: measured +5-7% on the fp8 blockwise GEMM) a loop of
one wgmma group whose product is waited for and scaled in the loop (a block-scaled GEMM's
promotion) takes turns too.

TMA multicast (``passes/multicast.py``; ``multicast.MULTICAST``, off until measured on the GPU):
neighbouring programs along grid axis 0 run as a cluster of two CTAs, and a box both load (a
GEMM's B column block, attention's K and V) is read from L2 once, each CTA copying half of it
into both; then every slot waits for both CTAs' consumers.

The pass refuses (returns ``fn`` unchanged) when the copies depend on anything but pure values
of the kernel's top level, the ops before the loop in the guard and the loop body, or when a
buffer the kernel uses before the loop shares bytes with the rings (``_shared_before``).  A loop
after a wgmma product (``product_before_loop``: a rotated loop's first product) has its rings'
bytes kept to themselves by ``plan_shared_memory``, and its producer keeps
``LEAN_PRODUCER_REGISTERS`` so the consumers, which hold two products, get 240 a thread.

Persistent (``PERSIST_TILES``, where ``persistable``; ``meta.persistent_tiles``): the launch
runs at most as many CTAs as the GPU holds at once, 1-D, and passes the grid's extents
(``backends.launch_geometry``).  Each side loops over its CTA's programs ``c, c + n, ...``
(program ids from the program number, the grouped order on top), carrying ``base``, the
k-tiles of its earlier programs: every slot number and phase counts ``base + t``, so the
producer fills the next program's first slots while the consumers still run this one's
epilogue (its loop starts ``ahead`` iterations early instead of filling slots before it, and
every fill waits for its slot).  The consumers release the last slots of a program in the next
one's first iterations, and end each program with a named barrier.  The rings keep their
bytes to themselves (``plan_shared_memory(keep=)``); where that does not fit, or another
buffer shares their bytes, the kernel is specialised without the loop.  With
``stream_k.STREAM_K`` (off: measured slower, see ``passes/stream_k.py``) the last waves of tiles
are shared out by k-iterations: each side's units come from ``stream_k.StreamK`` (a tile and a
k-range), and the consumers hand a partial tile over through the runtime's workspace.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit.abi import ParamDesc, ParamKind
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import multicast as multicast_module
from tilejit.passes import stream_k
from tilejit.simt import RegType, SimtOp

I32 = D.int32
PRODUCER_WARPS = 4
PRODUCER_REGISTERS = 40          # what a warpgroup that only computes addresses keeps
# the producer's registers where the consumers carry a product in flight (a rotated loop,
# ``product_before_loop``): attention D128 rotated (128x128, 8 warps) needs the consumers'
# 240 registers a thread (232 with 40 spilled 80 bytes; ptxas, 2026-12-06)
LEAN_PRODUCER_REGISTERS = 24
REGISTER_FILE = 65536            # 32-bit registers per SM (and the most one CTA may take)
SHARED_PER_SM = 228 * 1024       # shared memory per SM on sm_90a ...
CTA_SHARED_RESERVED = 1024       # ... of which the system takes this much per CTA
MAX_REGISTERS = 248              # per thread: ptxas's limit is 255; setmaxnreg wants multiples of 8
_PURE = (SimtOp.PARAM, SimtOp.THREAD_ID, SimtOp.BLOCK_ID, SimtOp.GRID_DIM, SimtOp.CONSTANT, SimtOp.SPLAT,
         SimtOp.GATHER, SimtOp.CONCAT, SimtOp.ELEMENTWISE, SimtOp.SHARED_ALLOC)
_FILLS = (SimtOp.MBARRIER_EXPECT_TX, SimtOp.TMA_LOAD)
_IDS = (SimtOp.BLOCK_ID, SimtOp.GRID_DIM)
# The switch (benchmarks/switch_probe.py): True makes every specialised kernel that can be
# persistent (``persistable``), False none.
PERSIST_TILES = False
# The most CTAs an SM a warp-specialised kernel wishes to run at once.  It is built for one CTA
# (the whole register file: the consumers' ``setmaxnreg`` takes what the producer gives back) and
# records as wishes (``meta.ws_ctas_wishes``) each larger count, down from this, whose CTAs'
# shared memory fits an SM; the cuda backend assembles the kernel for each wish in turn
# (``ctas_per_sm``: the register file's share of one of that many CTAs) and keeps the first that
# ptxas neither refuses nor spills.  Small tiles then run several CTAs' warpgroups side by side,
# each one's softmax beside another's wgmma and each one's start and end beside another's loop:
# attention at B16 H16 S1024 D64 on the H100 (2026-12-07, same runs, against SDPA cuDNN):
# 128x64 (8 warps) at 2 CTAs 373-378 TFLOP/s (0.90x), causal 64x64 (4 warps) at 3 CTAs 270-271
# (0.87x), against 307 / 235 (0.74x / 0.76x) with one CTA at the best tiling; 64x64 at 4 CTAs
# spills (57 TFLOP/s: the reason spills end a wish).  1: no wishes.
CTAS_PER_SM = 3
# The switch: True keeps every TMA ring's bytes to itself (``plan_shared_memory(keep=)``) where
# warp specialisation is allowed, so shared memory the kernel uses before the loop never
# shares them (``_shared_before``) and such loops can be specialised too; False (the default)
# leaves the planner free and such loops unspecialised.
PRIVATE_RINGS = False
# The switch: True puts two consumer warpgroups whose loop issues two or more wgmma groups
# (attention's QK^T and PV) in ping-pong (``pingpong``); False (the default until measured on
# the GPU) lets them run out of step as they fall.
PINGPONG = False
# The switch: True puts two consumer warpgroups whose loop issues one wgmma group and waits for
# its product in the loop (a block-scaled GEMM's promotion, ``promotes``) in ping-pong too, so one
# warpgroup scales its product while the other's runs on the tensor cores, instead of both
# issuing at the same ring slot, finishing together and scaling together; False lets them run as
# they fall.  On since its H100 run (scripts/gpu_s21.sh, 2026-12-05, alternating, two rounds): the
# fp8 blockwise GEMM at 128x128x128, 8 warps 928-929 against 880-883 TFLOP/s at 4096^3 (+5%) and
# 1055-1059 against 989-992 at 8192^3 (+7%).
PINGPONG_PROMOTION = True
# The switch: True has one thread of each consumer warpgroup release a slot (its empty mbarrier
# then counts warpgroups) where the consumers read the rings only through wgmma
# (``multicast.wgmma_reads_only``), as CUTLASS's pipelines do; False (the default until measured on the
# GPU): every consumer thread arrives.
ELECT_RELEASES = False
PINGPONG_BARRIERS = (2, 3, 4)    # named barrier ids: warpgroup g waits at 2 + g, 4 pairs the ends
#                                  (0 and 1 are the CTA's and the consumers')


def worth_it(rec, num_warps: int = 4) -> bool:
    """The default (``Options.warp_specialize="auto"``): loops whose body runs more than one
    wgmma group, such as attention's QK^T and PV with the softmax between them; and loops whose
    one group is waited for and its product worked on in the loop (a block-scaled GEMM's
    promotion, or the previous iteration's product in a rotated loop) by two or more consumer
    warpgroups, which then run out of step, one's tensor-core
    work overlapping the other's.  Measured on the H200 (ratio to the same kernel without
    specialisation): attention B4 H32 S4096 D128 at 128x128x8 +11% (full) / +6% (causal), and
    GEMM bf16 at its best configs -1% to +2% (1024^3-8192^3), -40% at 64x64x32 (3 slots, 4
    warps) (2026-12-04, ``scripts/gpu_tma.sh``); the fp8 blockwise GEMM at 128x128x128, 8 warps,
    4 slots +9% / +8% (883 / 968 against 813 / 898 TFLOP/s at 4096^3 / 8192^3), and at 64x128x128,
    4 warps -18% (2026-12-04, session 10, ``bench_quant.py``)."""
    body = rec.loop.regions[0]
    if sum(o.op is SimtOp.WGMMA_COMMIT for o in body.walk()) > 1:
        return True
    return num_warps >= 8 and promotes(body, carried=True)


def promotes(body: ir.Block, carried: bool = False) -> bool:
    """Whether the loop ``body`` waits for all its wgmma groups (``wgmma.wait_group 0``) and
    works on a product it waited for before the next iteration (a block-scaled GEMM scaling
    each K block's product into its accumulator).  ``carried``: or works on the previous
    iteration's product, which a ``wait_group n`` passes besides its own group's accumulator
    (a rotated loop: ``rotate_products``)."""
    waits = [o for o in body.walk() if o.op is SimtOp.WGMMA_WAIT and (o.attrs.n == 0 or carried)]
    read = {x for o in body.walk() if o.op is not SimtOp.YIELD for x in o.operands}
    return any(r in read for w in waits for r in (w.results if w.attrs.n == 0 else w.results[1:]))


def specialisable(fn: ir.Function):
    """(the TmaLoop, its guard IF or None), when ``fn`` has one TMA loop the pass can split
    off; else None."""
    loops = fn.meta.tma_loops
    if len(loops) != 1 or fn.meta.num_warps % 4 or fn.meta.programs_per_cta != 1 or fn.meta.persistent \
            or fn.meta.producer_warps:
        return None
    rec = loops[0]
    if rec.loop in fn.body.ops:
        found = rec, None
    else:
        guard = next((o for o in fn.body.ops if o.op is SimtOp.IF and rec.loop in o.regions[0].ops), None)
        found = (rec, guard) if guard is not None else None
    return found if found is not None and not _shared_before(fn, rec, found[1]) else None


def product_before_loop(fn: ir.Function) -> bool:
    """Whether ``fn``'s one TMA loop (at the top level, or in a top-level IF) follows a wgmma
    product (a rotated loop's first product, ``rotate_products``): ``plan_shared_memory`` then
    keeps the rings' bytes to themselves, so the product's staged operands never share them
    (``_shared_before``) and the loop can still be specialised."""
    loops = fn.meta.tma_loops
    if len(loops) != 1:
        return False
    loop = loops[0].loop
    guard = next((o for o in fn.body.ops if o.op is SimtOp.IF and loop in o.regions[0].ops), None)
    if guard is None and loop not in fn.body.ops:
        return False
    return any(x.op is SimtOp.WGMMA for o in _before(fn, loop, guard) for x in (o, *(w for r in o.regions for w in r.walk())))


def _before(fn: ir.Function, loop: ir.Operation, guard) -> list:
    """The ops that run before ``loop``: the top level's before it, or before its ``guard`` IF
    and in the guard before it."""
    block = guard.regions[0] if guard is not None else fn.body
    ops = fn.body.ops[:fn.body.ops.index(guard)] if guard is not None else []
    return ops + block.ops[:block.ops.index(loop)]


def _shared_before(fn: ir.Function, rec, guard) -> bool:
    """Whether a buffer the kernel reads or writes before the loop (a DOT's operands staged
    for mma.sync, say) shares bytes with the rings: the producer starts filling the rings while
    the computing warps still run that code.  (On the H200 such a kernel -- a product computed
    before the loop, then one per iteration -- gave wrong values once specialised.)"""
    mine = {rec.bar_buf} | {o.attrs.buffer for o in rec.fills + rec.body_fills if o.op is SimtOp.TMA_LOAD}
    used = {b for o in _before(fn, rec.loop, guard) for x in (o, *(w for r in o.regions for w in r.walk()))
            for b in (getattr(x.attrs, "buffer", None), *(getattr(x.attrs, "buffers", None) or ()))
            if b is not None and b not in mine}
    spans = fn.meta.shared_buffers
    return any(a < bo + bs and bo < a + n for m in mine if m in spans for a, n in [spans[m]]
               for b in used if b in spans for bo, bs in [spans[b]])


def persistable(fn: ir.Function) -> bool:
    """Whether ``specialise_warps`` (unless turned off) specialises ``fn`` and makes it persistent
    (``PERSIST_TILES`` on, a TMA loop without a guard, a 32-bit induction variable):
    ``plan_shared_memory`` then keeps its rings' bytes to themselves, as the producer refills
    them while the consumers run an epilogue."""
    found = specialisable(fn) if PERSIST_TILES else None
    return found is not None and found[1] is None and found[0].loop.regions[0].args[0].type.dtype == I32


def _private(fn: ir.Function, rec) -> bool:
    """No other buffer shares a byte with ``rec``'s rings or their mbarriers."""
    mine = {rec.bar_buf} | {o.attrs.buffer for o in rec.fills + rec.body_fills if o.op is SimtOp.TMA_LOAD}
    spans = fn.meta.shared_buffers
    return all(not (a < bo + bs and bo < a + n) for m in mine for a, n in [spans[m]]
               for b, (bo, bs) in spans.items() if b not in mine)


def _slice(roots, scopes: list[list[ir.Operation]], iv) -> set | None:
    """The ops of ``scopes`` the ``roots`` (values) depend on, or None when one comes from
    elsewhere (a loop-carried value, a region's result) or is not pure."""
    defs = {r: o for ops in scopes for o in ops for r in o.results}
    out, todo = set(), list(roots)
    while todo:
        v = todo.pop()
        if v is iv:
            continue
        o = defs.get(v)
        if o is None or (o.op not in _PURE and o.op not in _FILLS):
            return None
        if o not in out:
            out.add(o)
            todo += [x for x in o.operands]
    return out


def _named_barriers(block: ir.Block, bar_id: ir.Value, threads: int) -> None:
    for o in block.ops:
        if o.op is SimtOp.BARRIER and not o.operands:
            o.operands, o.attrs = [bar_id], simt.BarrierAttrs(threads)
        for r in o.regions:
            _named_barriers(r, bar_id, threads)


def specialise_warps(fn: ir.Function, always: bool = True, persistent: bool | None = None) -> ir.Function:
    """``fn`` with its TMA loop's copies on a producer warpgroup (see the module docstring);
    unless ``always``, only where ``worth_it``.  ``persistent`` (default: ``persistable``) also
    makes each side loop over the grid's programs, where the rings' bytes are their own."""
    found = specialisable(fn)
    if found is None or not (always or worth_it(found[0], fn.meta.num_warps) or persistable(fn)):
        return fn
    rec, guard = found
    producer_registers = LEAN_PRODUCER_REGISTERS if product_before_loop(fn) else PRODUCER_REGISTERS
    persist = (persistable(fn) if persistent is None else persistent and guard is None
               and rec.loop.regions[0].args[0].type.dtype == I32) and _private(fn, rec)
    paired = not persist and multicast_module.applies(fn, rec.loop, guard)
    loop = rec.loop
    body = loop.regions[0]
    iv = body.args[0]
    holder = guard.regions[0] if guard is not None else fn.body
    top = fn.body.ops[:fn.body.ops.index(guard if guard is not None else loop)]
    before = holder.ops[:holder.ops.index(loop)] if guard is not None else []
    body_ops = list(body.ops)
    fills = [o for o in rec.fills if o.op in _FILLS]
    body_fills = [o for o in rec.body_fills if o.op in _FILLS]
    roots = [x for o in fills + body_fills for x in o.operands] + list(loop.operands[:3])
    if guard is not None:
        roots.append(guard.operands[0])
    needed = _slice(roots, [top, before, body.ops], iv)
    if needed is None or rec.step <= 0:
        return fn
    needed |= set(fills + body_fills)
    leader_side = {rec.leader.owner}            # what says which thread issues: the producer's own
    for o in top:
        if o in needed and any(x.owner in leader_side for x in o.operands if x.owner is not None):
            leader_side.add(o)
    if guard is None:                   # the copies before the loop and their issuing predicates
        before = [o for o in top if o in needed and (o.op in _FILLS or o in leader_side)]   # are the producer's
    loc = loop.loc
    consumers = 32 * fn.meta.num_warps
    elect = ELECT_RELEASES and multicast_module.wgmma_reads_only(
        fn.walk(), {o.attrs.buffer for o in rec.fills + rec.body_fills if o.op is SimtOp.TMA_LOAD})
    stages = rec.stages

    def op(kind, operands, rtype=None, attrs=None, regions=None, into=None):
        o = ir.Operation(kind, operands, [rtype] if rtype else [], attrs, regions, loc)
        into.append(o)
        return o.result if rtype else o

    def ew(kind, a, b, into, dt=I32):
        return op(SimtOp.ELEMENTWISE, [a, b], RegType(dt), simt.EwAttrs(kind), into=into)

    def const(v, into, dt=I32):
        return op(SimtOp.CONSTANT, [], RegType(dt), simt.VectorConstAttrs((v,)), into=into)

    # --- before the split: the pure values both sides read, the mbarriers
    head = [o for o in top if o in needed and o.op in _PURE and o not in leader_side]
    moved: list = []                    # (persistent) what depends on the program: per tile, each side
    if persist:
        made = set()
        for o in head:
            if o.op in _IDS or any(x in made for x in o.operands):
                moved.append(o)
                made |= set(o.results)
        head = [o for o in head if o not in moved]
    hoisted = set(head)
    buffers = 1 + max(fn.meta.shared_buffers, default=-1)          # (after plan_shared_memory)
    at = -(-fn.meta.shared_bytes // 8) * 8
    fn.meta.shared_buffers = {**fn.meta.shared_buffers, buffers: (at, 8 * stages)}
    fn.meta.shared_bytes = at + 8 * stages
    empty = const(at, head)
    full = const(rec.bars.owner.attrs.values[0], head)               # (planned: a CONSTANT now)
    tid = op(SimtOp.THREAD_ID, [], RegType(I32), into=head)
    first = ew(TileOp.EQ, tid, const(0, head), head, D.bool_)

    def slot_bar(base, slot, into):
        return ew(TileOp.ADD, base, ew(TileOp.MUL, slot, const(8, into), into), into)
    for s in range(stages):
        for base, count, buf in ((full, 1, rec.bar_buf), (empty, consumers // 128 if elect else consumers, buffers)):
            op(SimtOp.MBARRIER_INIT, [slot_bar(base, const(s, head), head), first], None,
               simt.MbarrierAttrs(count, buf), into=head)
    op(SimtOp.FENCE_MBARRIER_INIT, [], into=head)
    op(SimtOp.BARRIER, [], into=head)
    # the warpgroup index read from lane 0 (a shuffle): ptxas then knows the branch is
    # warp-uniform, and lets the consumers' code use the registers setmaxnreg gives them
    group = op(SimtOp.SHUFFLE_IDX, [ew(TileOp.SHR, tid, const(7, head), head), const(0, head)], RegType(I32), into=head)
    is_consumer = ew(TileOp.LT, group, const(consumers // 128, head), head, D.bool_)
    if persist:
        tiles = _Tiles(fn, head, op, ew, const, loc)
        hoisted_head = set(head)
        if stream_k.STREAM_K and stream_k.accumulators(loop) and all(x.owner in hoisted_head for x in loop.operands[:2]):
            tiles.stream = stream_k.StreamK(fn, tiles, head, op, loop.operands[0], loop.operands[1], rec.step,
                                            consumers)

    # --- the consumers: the kernel without the copies, releasing each slot
    # (the barrier after the loop stays, as a named one: the ring's bytes may be reused after it)
    dropped = set(rec.setup) | set(rec.fills) | set(rec.body_fills) - {rec.body_fills[-1]} | set(rec.teardown[1:])
    dropped.add(rec.body_sync)
    for block in (holder, body):
        block.ops[:] = [o for o in block.ops if o not in dropped]
    tail = body.ops.pop()                                        # the YIELD
    release = []
    done = ew(TileOp.SUB, rec.trip, const(rec.in_flight, release), release)
    slot = ew(TileOp.MOD, done, const(stages, release), release)
    on = ew(TileOp.GE, done, const(0, release), release, D.bool_)
    if elect:                           # one thread a warpgroup (its wgmma.wait retired the reads)
        lead = ew(TileOp.EQ, ew(TileOp.AND, tid, const(127, release), release), const(0, release), release, D.bool_)
        on = ew(TileOp.AND, on, lead, release, D.bool_)
    op(SimtOp.MBARRIER_ARRIVE, [slot_bar(empty, slot, release), on], None, simt.MbarrierAttrs(1, buffers), into=release)
    body.ops += release + [tail]
    consumer = ir.Block([], [o for o in fn.body.ops if o not in hoisted])
    bar_id = const(1, head)
    _named_barriers(consumer, bar_id, consumers)
    groups = None if persist else pingpong_groups(body, consumers, PINGPONG, PINGPONG_PROMOTION)
    if groups:
        pingpong(holder if guard is not None else consumer, loop, groups, group, head, loc)
    if consumer.ops and consumer.ops[-1].op is SimtOp.YIELD:
        consumer.ops.pop()
    consumer.ops.append(ir.Operation(SimtOp.YIELD, [], loc=loc))

    # --- the producer: the copies, one warpgroup
    producer: list = []
    values = {}
    outer = producer
    if persist:
        p_loop = tiles.block()
        producer = p_loop.ops
        values.update(tiles.ids(p_loop))
        p_unit = tiles.stream.unit(p_loop) if tiles.stream else None
    values[rec.leader] = ew(TileOp.EQ, tid, const(consumers, producer), producer, D.bool_)

    def clone(o, into):
        if o is rec.leader.owner:                # the producer's own first thread issues
            return
        c = ir.Operation(o.op, [values.get(x, x) for x in o.operands], [r.type for r in o.results], o.attrs, None, o.loc)
        for r, cr in zip(o.results, c.results):
            values[r] = cr
        into.append(c)
    inner = producer
    if guard is not None:
        inner = []
    for o in moved:
        if o.op not in _IDS:
            clone(o, inner)
    for o in before:
        if o in needed and not (persist and o.op in _FILLS):   # (persistent: the loop fills every slot)
            clone(o, inner)
    lb, ub, step = (values.get(x, x) for x in loop.operands[:3])
    if persist and p_unit:              # (stream-K: the unit's k-range)
        lb, ub = p_unit["lb"], p_unit["ub"]
    iv_dt = iv.type.dtype
    p_iv = ir.Value(iv.type, iv.hint)
    values[iv] = p_iv
    loop_body: list = []
    stop = ew(TileOp.SUB, ub, const(rec.ahead * rec.step, inner, iv_dt), inner, iv_dt)
    start = ew(TileOp.SUB, lb, const(rec.ahead * rec.step, inner, iv_dt), inner, iv_dt) if persist else lb
    for o in body_ops:
        if o in needed:
            if o is body_fills[0]:              # the slot's previous contents are released
                p = ew(TileOp.ADD, values[rec.trip], const(rec.ahead, loop_body), loop_body)
                turn = ew(TileOp.FLOORDIV, p, const(stages, loop_body), loop_body)
                parity = ew(TileOp.AND, ew(TileOp.ADD, turn, const(1, loop_body), loop_body), const(1, loop_body),
                            loop_body)
                where = slot_bar(empty, ew(TileOp.MOD, p, const(stages, loop_body), loop_body), loop_body)
                op(SimtOp.MBARRIER_WAIT, [where, parity], None, simt.MbarrierAttrs(1, buffers), into=loop_body)
            clone(o, loop_body)
            if persist and o is rec.trip.owner:
                values[rec.trip] = ew(TileOp.ADD, values[rec.trip], p_unit["shift"] if p_unit else p_loop.args[1],
                                      loop_body)
    loop_body.append(ir.Operation(SimtOp.YIELD, [], loc=loc))
    inner.append(ir.Operation(SimtOp.FOR, [start, stop, step], [], loop.attrs, [ir.Block([p_iv], loop_body)], loc))
    if guard is not None:
        cond = values.get(guard.operands[0], guard.operands[0])
        inner.append(ir.Operation(SimtOp.YIELD, [], loc=loc))
        producer.append(ir.Operation(SimtOp.IF, [cond], [], None,
                                     [ir.Block([], inner), ir.Block([], [ir.Operation(SimtOp.YIELD, [], loc=loc)])], loc))
    if persist:
        producer = outer + tiles.wrap(p_loop, producer, [lb, ub], rec.step, False)
        # the consumers (changed in place only now: the producer's ops are cloned from theirs)
        # count slots and phases over the CTA's k-tiles of all its programs
        c_loop = tiles.block()
        c_unit = tiles.stream.unit(c_loop) if tiles.stream else None
        at = body.ops.index(rec.trip.owner) + 1
        body.ops.insert(at, ir.Operation(SimtOp.ELEMENTWISE, [rec.trip, c_unit["shift"] if c_unit else c_loop.args[1]],
                                         [RegType(I32)], simt.EwAttrs(TileOp.ADD), None, loc))
        _replace(body, {rec.trip: body.ops[at].result}, skip=body.ops[at])
        if c_unit:
            loop.operands[:2] = [c_unit["lb"], c_unit["ub"]]
            tiles.stream.epilogue(consumer, loop, c_loop, bar_id, loc)
        consumer.ops[-1:] = [ir.Operation(SimtOp.BARRIER, [bar_id], [], simt.BarrierAttrs(consumers), loc=loc)]
        consumer = ir.Block([], tiles.wrap(c_loop, consumer.ops, loop.operands[:2], rec.step, True)
                            + [ir.Operation(SimtOp.YIELD, [], loc=loc)])
    producer.append(ir.Operation(SimtOp.YIELD, [], loc=loc))

    # --- registers: the producer gives back what the consumers take (``ctas_per_sm``), for one
    # CTA an SM; the backend tries the wishes (more CTAs, each a share of the file) first
    split = ir.Operation(SimtOp.IF, [is_consumer], [], simt.SplitAttrs(consumers),
                         [consumer, ir.Block([], producer)], loc)
    fn.body.ops[:] = head + [split]
    fn.meta.ws_producer_registers = producer_registers
    ctas_per_sm(fn, 1, split)
    fn.meta.ws_ctas_wishes = tuple(k for k in range(CTAS_PER_SM, 1, -1)
                                   if k * (fn.meta.shared_bytes + CTA_SHARED_RESERVED) <= SHARED_PER_SM)
    fn.meta.producer_warps = PRODUCER_WARPS
    fn.meta.persistent_tiles = persist
    fn.meta.stream_k = tiles.stream.words if persist and tiles.stream else 0
    if paired:
        multicast_module.multicast(fn, buffers, consumers)
    fn.meta.self_synced_ops = set(fn.meta.self_synced_ops) | {o for o in fn.walk() if o.op in simt.TMA_OPS}
    return fn


def ctas_per_sm(fn: ir.Function, ctas: int, split: ir.Operation | None = None) -> None:
    """(Re)set a warp-specialised kernel's registers for ``ctas`` CTAs an SM: a CTA holds
    ``cap`` registers a thread from its launch (``meta.max_registers``: the register file's share
    of one of ``ctas`` CTAs, not the whole file: 640 threads get 96 of 102.4), and a
    ``setmaxnreg.inc`` waits until the pool has what it asks, so the consumers take only what the
    producer's decrease gives back (ask for more and they wait forever).  Where the consumers
    gain nothing over ``cap``, no setmaxnreg; ``cap`` is the kernel's register count only where
    it is below what ptxas may use anyway (more than one CTA, or setmaxnreg)."""
    if split is None:
        split = next(o for o in fn.walk() if o.op is SimtOp.IF and isinstance(o.attrs, simt.SplitAttrs))
    consumer, producer = split.regions
    for block in (consumer, producer):
        while block.ops and block.ops[0].op is SimtOp.SETMAXNREG:
            del block.ops[0]
    consumers = split.attrs.threads
    threads = consumers + 32 * PRODUCER_WARPS
    keep = fn.meta.ws_producer_registers
    cap = min(MAX_REGISTERS, REGISTER_FILE // ctas // threads // 8 * 8)
    more = min(MAX_REGISTERS, (cap * threads - 32 * PRODUCER_WARPS * keep) // consumers // 8 * 8)
    fn.meta.max_registers = cap if more > cap or ctas > 1 else 0
    if more > cap:
        loc = split.loc
        consumer.ops.insert(0, ir.Operation(SimtOp.SETMAXNREG, [], [], simt.RegCountAttrs(more, True), loc=loc))
        producer.ops.insert(0, ir.Operation(SimtOp.SETMAXNREG, [], [], simt.RegCountAttrs(keep, False), loc=loc))


def pingpong_groups(body: ir.Block, consumers: int, many: bool = True,
                    promotion: bool = False) -> list[tuple[int, int]] | None:
    """(first op, WGMMA_COMMIT) indices of each wgmma group at the top of the consumers' loop
    ``body``, when two consumer warpgroups run there, with ``many`` two or more groups, or with
    ``promotion`` one group whose product the body waits for and works on (``promotes``), and
    nothing else in the body synchronises them (no barrier; no wgmma inside a nested region);
    else None."""
    if consumers != 256:
        return None
    ops = body.ops
    nested = {x.op for o in ops for r in o.regions for x in r.walk()}
    if nested & {SimtOp.WGMMA, SimtOp.WGMMA_COMMIT, SimtOp.BARRIER, SimtOp.BARRIER_ARRIVE} \
            or any(o.op in (SimtOp.BARRIER, SimtOp.BARRIER_ARRIVE) for o in ops):
        return None
    groups, start = [], None
    for i, o in enumerate(ops):
        if start is None and o.op in (SimtOp.WGMMA_FENCE, SimtOp.WGMMA):
            start = i
        elif o.op is SimtOp.WGMMA_COMMIT and start is not None:
            groups.append((start, i))
            start = None
    wanted = many if len(groups) >= 2 else promotion and len(groups) == 1 and promotes(body)
    return groups if wanted else None


def pingpong(holder: ir.Block, loop: ir.Operation, groups: list, group: ir.Value, head: list, loc) -> None:
    """Two consumer warpgroups take turns at the tensor cores (FlashAttention-3's ping-pong):
    warpgroup g waits at named barrier ``2 + g`` (256 threads) before issuing each of its
    wgmma groups and, once it has issued one, arrives at the other's; so the groups alternate
    g0, g1, g0, ... and one warpgroup's softmax runs while the other's products do.  Before the
    loop warpgroup 1 arrives at warpgroup 0's barrier (warpgroup 0 goes first) while warpgroup 0
    arrives at barrier 4; after it warpgroup 0 waits at its own (for warpgroup 1's last arrival)
    and warpgroup 1 at barrier 4.  So each barrier's arrivals and waits pair up whatever the trip
    count, with no branch on the warpgroup (the ids are computed from it: the emulator runs the
    consumers in lockstep and needs every branch uniform).  ``tests/test_pingpong.py`` plays the
    two warpgroups' barrier sequences through every interleaving.
    In place: ``loop``'s body (its wgmma ``groups``: ``pingpong_groups``) and ``holder`` (the
    block holding the loop); ``group`` is the warpgroup index, ``head`` takes the ids' ops."""
    body = loop.regions[0]
    lo, hi, ends = PINGPONG_BARRIERS

    def op(kind, operands, rtype=None, attrs=None):
        o = ir.Operation(kind, operands, [rtype] if rtype else [], attrs, None, loc)
        head.append(o)
        return o.result if rtype else o

    def k(v):
        return op(SimtOp.CONSTANT, [], RegType(I32), simt.VectorConstAttrs((v,)))

    def ew(kind, a, b):
        return op(SimtOp.ELEMENTWISE, [a, b], RegType(I32), simt.EwAttrs(kind))
    mine = ew(TileOp.ADD, group, k(lo))                                  # lo + g
    other = ew(TileOp.SUB, k(lo + hi), mine)                             # hi - g
    step = ew(TileOp.MUL, group, k(lo - ends))
    before = ew(TileOp.ADD, step, k(ends))                               # g0: ends, g1: lo
    after = ew(TileOp.SUB, k(lo), step)                                  # g0: lo, g1: ends
    turns = simt.BarrierAttrs(256)

    def barrier(kind, bar):
        return ir.Operation(kind, [bar], [], turns, None, loc)
    ops = list(body.ops)
    for start, commit in reversed(groups):
        ops.insert(commit + 1, barrier(SimtOp.BARRIER_ARRIVE, other))
        ops.insert(start, barrier(SimtOp.BARRIER, mine))
    body.ops[:] = ops
    at = holder.ops.index(loop)
    holder.ops[at:at + 1] = [barrier(SimtOp.BARRIER_ARRIVE, before), loop, barrier(SimtOp.BARRIER, after)]


def _replace(block: ir.Block, subst: dict, skip=None) -> None:
    """Operands of the ops in ``block`` (nested too; not ``skip``) replaced per ``subst``."""
    for o in block.walk():
        if o is not skip and any(x in subst for x in o.operands):
            o.operands = [subst.get(x, x) for x in o.operands]


class _Tiles:
    """The persistent loops of a specialised kernel: CTA ``c`` of ``n`` runs programs
    ``c, c + n, ...`` of the grid (the launch passes its three extents: ``launch_geometry``),
    each side carrying ``base``, the k-tiles its loop ran for the CTA's earlier programs."""

    def __init__(self, fn, head, op, ew, const, loc):
        self.sources = [o for o in fn.walk() if o.op in _IDS]
        first = len(fn.meta.params)
        fn.meta.params = list(fn.meta.params) + [ParamDesc(ParamKind.SCALAR, len(fn.arg_names) + a, None, I32)
                                                 for a in range(3)]
        self.grid = [op(SimtOp.PARAM, [], RegType(I32), ir.AxisAttrs(first + a), into=head) for a in range(3)]
        self.cta = op(SimtOp.BLOCK_ID, [], RegType(I32), ir.AxisAttrs(0), into=head)
        self.ctas = op(SimtOp.GRID_DIM, [], RegType(I32), ir.AxisAttrs(0), into=head)
        self.total = total = ew(TileOp.MUL, ew(TileOp.MUL, self.grid[0], self.grid[1], head), self.grid[2], head)
        left = ew(TileOp.SUB, ew(TileOp.ADD, total, self.ctas, head), ew(TileOp.ADD, self.cta, const(1, head), head),
                  head)
        self.stream = None                  # stream_k.StreamK, where the k-loop is split
        self.count = ew(TileOp.FLOORDIV, left, self.ctas, head)      # this CTA's programs
        self.zero, self.one = const(0, head), const(1, head)
        self.ew, self.const, self.loc = ew, const, loc

    @staticmethod
    def block() -> ir.Block:
        return ir.Block([ir.Value(RegType(I32, 1), "i"), ir.Value(RegType(I32, 1), "base")], [])

    def ids(self, blk: ir.Block) -> dict:
        """{result of a BLOCK_ID / GRID_DIM op of the kernel: the program id or grid extent it
        stands for} at iteration ``i`` of ``blk`` (computed at its end)."""
        ew, g, into = self.ew, self.grid, blk.ops
        if self.stream:
            tile = self.stream.unit(blk)["tile"]
        else:
            tile = ew(TileOp.ADD, self.cta, ew(TileOp.MUL, blk.args[0], self.ctas, into), into)
        rest = ew(TileOp.FLOORDIV, tile, g[0], into)
        pids = [ew(TileOp.MOD, tile, g[0], into), ew(TileOp.MOD, rest, g[1], into), ew(TileOp.FLOORDIV, rest, g[1], into)]
        return {o.result: (pids if o.op is SimtOp.BLOCK_ID else g)[o.attrs.axis] for o in self.sources}

    def wrap(self, blk: ir.Block, ops: list, bounds, step: int, remap: bool) -> list:
        """[the FOR over this CTA's programs] running ``ops`` (with ``remap``, the program ids
        they read are replaced first; else they are ``blk``'s own ops already), ``base`` grown by
        the trip count of the k-loop from ``bounds`` (its lower and upper bound) by ``step``."""
        ew, const, into = self.ew, self.const, blk.ops
        if remap:
            subst = self.ids(blk)
            _replace(ir.Block([], ops), subst)
            bounds = [subst.get(x, x) for x in bounds]
            into += ops
        if self.stream:
            trips = self.stream.after(blk, into)["trips"]
        else:
            trips = stream_k.trip_count(ew, const, *bounds, step, into)
        into.append(ir.Operation(SimtOp.YIELD, [ew(TileOp.ADD, blk.args[1], trips, into)], loc=self.loc))
        return [ir.Operation(SimtOp.FOR, [self.zero, self.count, self.one, self.zero], [RegType(I32, 1)], None,
                             [blk], self.loc)]
