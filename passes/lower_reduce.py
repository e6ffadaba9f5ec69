"""Lowering of REDUCE: registers within each thread, then butterfly shuffles across the lanes
that split the axis, then (when warps split it too) one round through shared memory.

The result is in the slice of the operand's layout: every thread that held part of a row ends
up holding the row's result, so ``t - max(t, axis, keepdims=True)`` needs no data movement.
argmax/argmin carry (value, index) pairs; ties go to the smaller index (NumPy's first index).
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import ReduceKind, TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_shared
from tilejit.passes.assign_layouts import is_tile
from tilejit.passes.chunk_loops import identity

_COMBINE = {ReduceKind.SUM: TileOp.ADD, ReduceKind.MAX: TileOp.MAXIMUM, ReduceKind.MIN: TileOp.MINIMUM}
_ARG_BETTER = {ReduceKind.ARGMAX: TileOp.GT, ReduceKind.ARGMIN: TileOp.LT}


class Reduction:
    """One REDUCE being lowered: the combine step over (value, index-or-None) pairs."""

    def __init__(self, lw, kind: ReduceKind, dtype):
        self.lw, self.kind, self.dtype = lw, kind, dtype
        self.is_arg = kind in _ARG_BETTER

    def combine(self, a, b):
        lw = self.lw
        if not self.is_arg:
            return lw.ew(_COMBINE[self.kind], [a[0], b[0]], self.dtype), None
        better = lw.ew(_ARG_BETTER[self.kind], [b[0], a[0]], D.bool_)
        tie = lw.ew(TileOp.AND, [lw.ew(TileOp.EQ, [b[0], a[0]], D.bool_),
                                 lw.ew(TileOp.LT, [b[1], a[1]], D.bool_)], D.bool_)
        take = lw.ew(TileOp.OR, [better, tie], D.bool_)
        return (lw.ew(TileOp.WHERE, [take, b[0], a[0]], self.dtype),
                lw.ew(TileOp.WHERE, [take, b[1], a[1]], D.int32))

    def map(self, pair, f):
        return f(pair[0]), (f(pair[1]) if pair[1] is not None else None)

    def in_thread(self, pair, groups):
        """Combine each group of registers into one register (a balanced tree)."""
        columns = [self.map(pair, lambda x, c=c: self.lw.gather(x, [g[c] for g in groups]))
                   for c in range(len(groups[0]))]
        while len(columns) > 1:
            paired = [self.combine(columns[i], columns[i + 1]) for i in range(0, len(columns) - 1, 2)]
            columns = paired + columns[len(paired) * 2:]
        return columns[0]

    def across_lanes(self, pair, terms):
        for t in terms:
            if t.src != "lane":
                continue
            for bit in range(t.bits):
                mask = simt.MaskAttrs(1 << (t.shift + bit))
                other = self.map(pair, lambda x: self.lw.emit(simt.SimtOp.SHUFFLE_XOR, [x], x.type, mask).result)
                pair = self.combine(pair, other)
        return pair

    def across_warps(self, pair, src: L.Layout, axis: int):
        """Each warp writes its partial row results to shared memory; after the barrier every
        thread reads the partials of all warps along ``axis`` and combines them."""
        warp_terms = [t for t in src.terms[axis] if t.src == "warp" and t.bits]
        if not warp_terms:
            return pair
        lw, part = self.lw, L.sliced(src, axis, keepdims=True)
        numel = 1
        for s in part.shape:
            numel *= s
        widx_terms, acc_bits = [], 0
        for t in warp_terms:                  # this warp's index among those splitting the axis
            widx_terms.append((t, acc_bits))
            acc_bits += t.bits
        count = 1 << acc_bits
        strides = lower_shared.rowmajor(part.shape)
        values = [pair[0]] + ([pair[1]] if pair[1] is not None else [])
        loaded = [[] for _ in values]
        for k, v in enumerate(values):
            item = v.type.dtype.itemsize
            base, buf = lw.alloc_shared(count * numel * item)
            own = [L.BitTerm(t.src, t.shift, t.bits, numel * item << acc) for t, acc in widx_terms]
            addr, _ = lower_shared.addresses(lw, base, part, strides, item, own)
            lw.emit(simt.SimtOp.STORE_SHARED, [addr, v], None, simt.SharedAttrs(1, buf))
            for w in range(count):
                at, _ = lower_shared.addresses(lw, base, part, strides, item, (), w * numel * item)
                loaded[k].append(lw.emit(simt.SimtOp.LOAD_SHARED, [at], v.type, simt.SharedAttrs(1, buf)).result)
        pair = (loaded[0][0], loaded[1][0] if pair[1] is not None else None)
        for w in range(1, count):
            pair = self.combine(pair, (loaded[0][w], loaded[1][w] if pair[1] is not None else None))
        return pair


def reduce(lw, o: ir.Operation) -> ir.Value:
    x, a = o.operands[0], o.attrs
    src = lw.layout_of(x)
    out_dt = o.result.type.dtype
    in_dt = x.type.dtype
    work_dt = D.float32 if in_dt.is_float and in_dt.bits < 32 else in_dt
    if a.kind is ReduceKind.SUM and not in_dt.is_float:
        work_dt = out_dt                      # integer sums accumulate in the result dtype
    red = Reduction(lw, a.kind, work_dt)
    value = lw.cast(lw.get(x, src), work_dt)
    index = None
    if red.is_arg:
        index = lw.ew(TileOp.ADD, [lw.splat(lw.thread_coord(src, a.axis), src.n),
                                   lw.const(D.int32, [c[a.axis] for c in src.regs])], D.int32)
    pair = red.in_thread((value, index), L.slice_groups(src, a.axis))
    pair = red.across_lanes(pair, src.terms[a.axis])
    pair = red.across_warps(pair, src, a.axis)
    return lw.cast(pair[1] if red.is_arg else pair[0], out_dt)


def _exchange(lw, xs: list, others: list) -> list:
    """Every CTA writes its values of the tiles ``xs`` (one layout) to small shared buffers (each
    at most ``shared_memory.DEDICATED_BYTES``: never reused, so no CTA overwrites what another
    still reads); after one cluster barrier lane r < C of every warp reads them from the
    cluster's CTA r (the other lanes hold ``others``: one identity per tile), so a warp reads C
    remote values per register, not 32 times C.  Returns the registers read, per tile."""
    stores = []
    for x in xs:
        item = x.type.dtype.itemsize
        if is_tile(x):
            layout = lw.layout_of(x)
            value = lw.get(x, layout)
            base, buf = lw.alloc_shared(x.type.numel * item)
            addr, vec = lower_shared.addresses(lw, base, layout, lower_shared.rowmajor(x.type.shape), item)
        else:
            value = lw.get(x)
            base, buf = lw.alloc_shared(item)
            addr, vec = base, 1
        stores.append((addr, value, buf, vec))
    for addr, value, buf, vec in stores:
        lw.emit(simt.SimtOp.STORE_SHARED, [addr, value], None, simt.SharedAttrs(vec, buf))
    lw.emit(simt.SimtOp.CLUSTER_BARRIER, [])
    ctas = lw.fn.meta["cluster_ctas"]
    lane = lw.thread_id("lane")
    on = lw.ew(TileOp.LT, [lane, lw.const(D.int32, [ctas])], D.bool_)
    return [lw.emit(simt.SimtOp.LOAD_SHARED_CLUSTER, [addr, lane, on], value.type,
                    simt.ClusterSharedAttrs(1, buf, other)).result
            for (addr, value, buf, _), other in zip(stores, others)]


def _across_cluster(lw, v, combine):
    """``v`` (lane r: CTA r's values) combined over lanes 0 .. C-1 by butterfly shuffles, then
    every lane given lane 0's result: the same order, so the same bits, in every warp and CTA."""
    mask = 1
    while mask < lw.fn.meta["cluster_ctas"]:
        v = combine(v, lw.emit(simt.SimtOp.SHUFFLE_XOR, [v], v.type, simt.MaskAttrs(mask)).result)
        mask *= 2
    return lw.emit(simt.SimtOp.SHUFFLE_IDX, [v, lw.const(D.int32, [0])], v.type).result


def cluster_reduce(lw, o: ir.Operation) -> ir.Value:
    """CLUSTER_REDUCE: the CTAs' partial results combined over the cluster."""
    x = o.operands[0]
    red = Reduction(lw, o.attrs.kind, x.type.dtype)
    (part,) = _exchange(lw, [x], [identity(o.attrs.kind, x.type.dtype)])
    return _across_cluster(lw, part, lambda a, b: red.combine((a, None), (b, None))[0])


def cluster_softmax(lw, o: ir.Operation) -> tuple[ir.Value, ir.Value]:
    """CLUSTER_SOFTMAX: M = max of the CTAs' m, S = sum of s * exp(m - M) with M read as 0
    where it is -inf (then every m is -inf and each term s * exp(-inf) = 0; so are the terms of
    the lanes that read nothing, m = -inf and s = 0)."""
    f32 = D.float32
    m, s = _exchange(lw, list(o.operands), [float("-inf"), 0.0])
    big = _across_cluster(lw, m, lambda a, b: lw.ew(TileOp.MAXIMUM, [a, b], f32))
    n = big.type.n
    empty = lw.ew(TileOp.EQ, [big, lw.const(f32, [float("-inf")] * n)], D.bool_)
    safe = lw.ew(TileOp.WHERE, [empty, lw.const(f32, [0.0] * n), big], f32)
    def term(m, s):
        return lw.ew(TileOp.MUL, [s, lw.ew(TileOp.EXP, [lw.ew(TileOp.SUB, [m, safe], f32)], f32)], f32)
    return big, _across_cluster(lw, term(m, s), lambda a, b: lw.ew(TileOp.ADD, [a, b], f32))
