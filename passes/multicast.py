"""TMA multicast over a pair of CTAs: a warp-specialised kernel whose two neighbouring programs
(along grid axis 0) load the same box reads it from L2 once.

    multicast(fn, empty_buf, consumers) -> bool       (in place, on ``specialise_warps``' output)

The launch runs the programs in clusters of two CTAs along axis 0 (``SimtMeta.paired_ctas``:
the grid's axis 0 rounded up to even, its true extent passed as one more argument, which
``num_programs(0)`` then reads).  Each ring slot's boxes are cut in two halves by rows; at each
fill, the producer compares the box's coordinates with the ones its partner computes (the same
ops with the partner's program id): where they are equal, each CTA copies its half (rank 0 the
first rows, rank 1 the rest) into both CTAs' slots (``.multicast::cluster``), else it copies
the whole box into its own, as before.  So a GEMM whose paired programs share a column block
reads that B tile once for both, however the kernel computes its program ids (the grouped
order included), and a tile they do not share costs nothing more than the comparison.

Every slot of a pair is released by both CTAs' consumers: each consumer thread arrives on its
own empty mbarrier, and on its partner's (``mapa`` + a cluster-scope release) one thread of each
warpgroup where the consumers read the slots only through wgmma (a warpgroup's ``wgmma.wait``
retires all its reads), else every thread; a CTA without a partner (the padding CTA of an odd
grid does not run the kernel) makes those arrivals on its own.  Both CTAs' mbarriers are
initialised before either copies: the CTA barrier after the initialisation becomes a cluster
barrier, and a second one at the end keeps each CTA alive while its partner may still arrive on
its mbarriers.

The pass applies where the TMA loop's bounds and the guard around it do not depend on the
program id along axis 0 (both CTAs of a pair then run the same iterations), and at least one
box can be halved (16 rows or more, a multiple of 16, so each half keeps the swizzle's 8-row
period).  ``MULTICAST`` (off until measured on the GPU) turns it on.
"""
from __future__ import annotations

import dataclasses

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.abi import ParamDesc, ParamKind
from tilejit.ir import TileOp
from tilejit.passes.shared_memory import accessed_buffers
from tilejit.simt import RegType, SimtOp

I32 = D.int32
# The switch (benchmarks/switch_probe.py): True lets ``specialise_warps`` pair CTAs for TMA
# multicast wherever ``multicast`` applies; False (the default until measured on the GPU) never.
MULTICAST = False
# A probe of what pairing costs by itself: False pairs the CTAs (clusters, both CTAs' releases of
# every slot) but never multicasts, each CTA copying its own whole boxes.
MULTICAST_COPIES = True
_CLONABLE = (SimtOp.ELEMENTWISE, SimtOp.CONSTANT, SimtOp.SPLAT, SimtOp.GATHER, SimtOp.CONCAT)


class _NoPartner(Exception):
    """A coordinate the partner's program id reaches through an op that cannot be re-run."""


def _blocks(block: ir.Block):
    yield block
    for o in block.ops:
        for r in o.regions:
            yield from _blocks(r)


def _half(fn: ir.Function, o: ir.Operation):
    """(row dim, rows in a half, bytes in a half, the half's box) of TMA_LOAD ``o``, or None
    where its box cannot be halved by rows."""
    box = o.attrs.box
    dims = [i for i, d in enumerate(box[:-1]) if d != 1]
    if len(dims) != 1 or box[dims[0]] % 16:
        return None
    dim = dims[0]
    item = fn.meta.params[o.operands[0].owner.attrs.axis].dtype.itemsize
    half = box[dim] // 2
    return dim, half, half * box[-1] * item, box[:dim] + (half,) + box[dim + 1:]


def wgmma_reads_only(ops, rings: set) -> bool:
    """Whether the only ``ops`` that name a buffer of ``rings`` (TMA-filled ring slots), besides
    the copies, are wgmma: a warpgroup's ``wgmma.wait`` then retires all its reads of a slot at
    once, so one of its threads may release the slot for all."""
    return all(o.op in (SimtOp.WGMMA, SimtOp.TMA_LOAD) for o in ops if set(accessed_buffers(o)) & rings)


def _depends(fn: ir.Function) -> set:
    """The values computed from the program id along axis 0."""
    out: set = set()
    for o in fn.walk():
        if (o.op is SimtOp.BLOCK_ID and o.attrs.axis == 0) or any(x in out for x in o.operands):
            out |= set(o.results)
    return out


def applies(fn: ir.Function, loop: ir.Operation, guard) -> bool:
    """Whether ``multicast`` would pair the CTAs of ``fn`` (``specialise_warps``' input), whose
    TMA loop is ``loop`` inside ``guard`` (an IF, or None)."""
    if not MULTICAST or fn.meta.cluster_ctas != 1 or fn.meta.persistent \
            or any(p.arg >= len(fn.arg_names) for p in fn.meta.params):
        return False
    dep = _depends(fn)
    if any(x in dep for x in loop.operands[:3]) or (guard is not None and guard.operands[0] in dep):
        return False
    return any(_half(fn, o) is not None for o in fn.walk() if o.op is SimtOp.TMA_LOAD)


def multicast(fn: ir.Function, empty_buf: int, consumers: int) -> bool:
    """Pair the CTAs of ``fn`` (``specialise_warps``' output: its head, then the split IF) for
    TMA multicast (see the module docstring); False, with ``fn`` unchanged, where no box can be
    halved or a coordinate's partner value cannot be computed."""
    split = fn.body.ops[-1]
    head = fn.body.ops[:-1]
    producer, consumer = split.regions[1], split.regions[0]
    plans = [(blk, o, h) for blk in _blocks(producer) for o in list(blk.ops)
             if o.op is SimtOp.TMA_LOAD and (h := _half(fn, o)) is not None]
    if not plans:
        return False
    loc = split.loc
    new_head: list = []

    def op(kind, operands, rtype=None, attrs=None, into=None):
        o = ir.Operation(kind, operands, [rtype] if rtype else [], attrs, None, loc)
        into.append(o)
        return o.result if rtype else o

    def ew(kind, operands, into, dt=I32):
        return op(SimtOp.ELEMENTWISE, list(operands), RegType(dt), simt.EwAttrs(kind), into=into)

    def const(v, into, dt=I32):
        return op(SimtOp.CONSTANT, [], RegType(dt), simt.VectorConstAttrs((v,)), into=into)

    dep = _depends(fn)
    # the program's true extent along axis 0 (the launch pads it to even) and the pair's ids
    gx_index = len(fn.meta.params)
    params = list(fn.meta.params) + [ParamDesc(ParamKind.SCALAR, len(fn.arg_names), None, I32)]
    gx = op(SimtOp.PARAM, [], RegType(I32), ir.AxisAttrs(gx_index), into=new_head)
    bx = op(SimtOp.BLOCK_ID, [], RegType(I32), ir.AxisAttrs(0), into=new_head)
    rank = ew(TileOp.AND, [bx, const(1, new_head)], new_head)
    pbx = ew(TileOp.XOR, [bx, const(1, new_head)], new_head)
    alive = ew(TileOp.LT, [bx, gx], new_head, D.bool_)
    paired = ew(TileOp.LT, [pbx, gx], new_head, D.bool_)
    target = ew(TileOp.WHERE, [paired, ew(TileOp.XOR, [rank, const(1, new_head)], new_head), rank], new_head)
    false = const(False, new_head, D.bool_)
    grids = {o.result for o in fn.walk() if o.op is SimtOp.GRID_DIM and o.attrs.axis == 0}

    def partner(v, into, memo):
        if v in grids:
            return gx
        if v not in dep:
            return v
        if v not in memo:
            o = v.owner
            if o is not None and o.op is SimtOp.BLOCK_ID:
                memo[v] = pbx
            elif o is not None and o.op in _CLONABLE and len(o.results) == 1:
                c = ir.Operation(o.op, [partner(x, into, memo) for x in o.operands], [o.result.type], o.attrs,
                                 None, o.loc)
                into.append(c)
                memo[v] = c.result
            else:
                raise _NoPartner()
        return memo[v]

    edits = []
    maps: dict = {}
    try:
        for blk, o, (dim, half_rows, half_bytes, box) in plans:
            pre: list = []
            coords = list(o.operands[4:])
            theirs = [partner(c, pre, {}) for c in coords]
            share = paired if MULTICAST_COPIES else false
            for c, p in zip(coords, theirs):
                if p is not c:
                    share = ew(TileOp.AND, [share, ew(TileOp.EQ, [c, p], pre, D.bool_)], pre, D.bool_)
            desc = fn.meta.params[o.operands[0].owner.attrs.axis]
            key = (desc.arg, box, desc.swizzle)
            if key not in maps:
                params.append(ParamDesc(ParamKind.TENSOR_MAP, desc.arg, None, desc.dtype, box, desc.swizzle))
                maps[key] = op(SimtOp.PARAM, [], o.operands[0].type, ir.AxisAttrs(len(params) - 1), into=new_head)
            tmap, dst, bar, issue = o.operands[:4]
            together = ew(TileOp.WHERE, [share, issue, false], pre, D.bool_)
            alone = ew(TileOp.WHERE, [share, false, issue], pre, D.bool_)
            at = list(coords)
            at[dim] = ew(TileOp.ADD, [coords[dim], ew(TileOp.MUL, [rank, const(half_rows, pre)], pre)], pre)
            mine = ew(TileOp.ADD, [dst, ew(TileOp.MUL, [rank, const(half_bytes, pre)], pre)], pre)
            pre.append(ir.Operation(SimtOp.TMA_LOAD, [maps[key], mine, bar, together, *at], [],
                                    dataclasses.replace(o.attrs, box=box, multicast=3), None, o.loc))
            edits.append((blk, o, pre, alone))
    except _NoPartner:
        return False
    for blk, o, pre, alone in edits:
        o.operands = list(o.operands[:3]) + [alone] + list(o.operands[4:])
        at = blk.ops.index(o)
        blk.ops[at:at] = pre
    # every slot released by both CTAs' consumers (or twice by a CTA without a partner): where
    # they read the slots only through wgmma, whose wait retires a warpgroup's reads at once, one
    # thread of each warpgroup arrives on the partner's mbarrier, else every thread does
    rings = {o.attrs.buffer for o in producer.walk() if o.op is SimtOp.TMA_LOAD}
    elect = wgmma_reads_only(consumer.walk(), rings)
    remote = consumers // 128 if elect else consumers
    for o in head:
        if o.op is SimtOp.MBARRIER_INIT and o.attrs.buffer == empty_buf:
            o.attrs = dataclasses.replace(o.attrs, n=o.attrs.n + remote)
    if elect:
        tid = op(SimtOp.THREAD_ID, [], RegType(I32), into=new_head)
        lead = ew(TileOp.EQ, [ew(TileOp.AND, [tid, const(127, new_head)], new_head), const(0, new_head)], new_head,
                  D.bool_)
    for blk in _blocks(consumer):
        for o in list(blk.ops):
            if o.op is SimtOp.MBARRIER_ARRIVE and o.attrs.buffer == empty_buf:
                on = o.operands[1]
                if elect:
                    on = ir.Operation(SimtOp.ELEMENTWISE, [on, lead], [RegType(D.bool_)], simt.EwAttrs(TileOp.AND),
                                      None, o.loc)
                    blk.ops.insert(blk.ops.index(o) + 1, on)
                    on = on.result
                blk.ops.insert(blk.ops.index(o) + 1 + elect, ir.Operation(
                    SimtOp.MBARRIER_ARRIVE, [o.operands[0], on, target], [], o.attrs, None, o.loc))
    # both CTAs' mbarriers live before either copies; neither leaves while the other may arrive
    fence = next(i for i, o in enumerate(head) if o.op is SimtOp.FENCE_MBARRIER_INIT)
    assert head[fence + 1].op is SimtOp.BARRIER and not head[fence + 1].operands
    head[fence + 1] = ir.Operation(SimtOp.CLUSTER_BARRIER, [], [], None, None, loc)
    for o in fn.walk():
        if any(x in grids for x in o.operands):
            o.operands = [gx if x in grids else x for x in o.operands]
    def done():
        return ir.Operation(SimtOp.YIELD, [], [], None, None, loc)
    run = ir.Operation(SimtOp.IF, [alive], [], None, [ir.Block([], [split, done()]), ir.Block([], [done()])], loc)
    fn.body.ops[:] = new_head + head + [run, ir.Operation(SimtOp.CLUSTER_BARRIER, [], [], None, None, loc)]
    fn.meta.params = params
    fn.meta.cluster_ctas = 2
    fn.meta.paired_ctas = True
    return True
