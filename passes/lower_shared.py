"""Data movement through shared memory: layout conversions (transpose, reshape, broadcasts
that cross threads) and the fallback DOT.

An exchange writes every source register to ``base + item * sum(coord_d * src_strides[d])``
and reads every destination register from ``base + item * sum(coord_d * dst_strides[d])``;
transposes, reshapes and broadcasts differ only in those strides.  Barriers are not placed
here: ``insert_barriers`` puts them where a buffer is read after a write or reused.
"""
from __future__ import annotations

import numpy as np

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L


def rowmajor(shape) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def addresses(lw, base, layout: L.Layout, strides, item: int, more_terms=(), extra: int = 0):
    """(byte address of each register, widest aligned vector) for ``layout`` registers at
    ``base + extra + item * sum(coord_d * strides[d]) + more_terms``."""
    terms = [L.BitTerm(t.src, t.shift, t.bits, t.scale * s * item)
             for ts, s in zip(layout.terms, strides) for t in ts] + list(more_terms)
    thread = lw.ew(TileOp.ADD, [base, lw.bitfield_sum(terms)], D.int32)
    regs = [extra + item * sum(c * s for c, s in zip(coord, strides)) for coord in layout.regs]
    addr = lw.ew(TileOp.ADD, [lw.splat(thread, layout.n), lw.const(D.int32, regs)], D.int32)
    table = layout.table() @ np.array(strides, np.int64) * item + extra if layout.rank else \
        np.full((layout.num_warps * L.WARP_SIZE, layout.n), extra, np.int64)
    if more_terms:
        tid = np.arange(layout.num_warps * L.WARP_SIZE)
        table = table + sum(t.eval(tid % L.WARP_SIZE, tid // L.WARP_SIZE) for t in more_terms)[:, None]
    return addr, L.vector_width(table, item)


def exchange(lw, sv, src: L.Layout, src_strides, dst: L.Layout, dst_strides, dtype) -> ir.Value:
    """``sv`` (in ``src``) re-read in ``dst`` through a shared buffer."""
    item = dtype.itemsize
    size = item * (1 + sum((s - 1) * st for s, st in zip(src.shape, src_strides)))
    base, buf = lw.alloc_shared(size)
    addr, vec = addresses(lw, base, src, src_strides, item)
    lw.emit(simt.SimtOp.STORE_SHARED, [addr, sv], None, simt.SharedAttrs(vec, buf))
    addr, vec = addresses(lw, base, dst, dst_strides, item)
    return lw.emit(simt.SimtOp.LOAD_SHARED, [addr], simt.RegType(dtype, dst.n),
                   simt.SharedAttrs(vec, buf)).result


def _stash_addresses(lw, o: ir.Operation, tile_type, layout: L.Layout):
    """The stash buffer of ``o`` (allocated once, in the prologue: the loops that write and read it
    share it) and each register's byte address in it: the whole row tile row-major, this chunk
    at column ``col``."""
    a, item = o.attrs, tile_type.dtype.itemsize
    rows = int(np.prod(tile_type.shape[:-1], dtype=np.int64))
    base, buf = lw.shared_once(("stash", a.buffer), rows * a.width * item)
    col = lw.get(o.operands[-1])
    start = lw.ew(TileOp.ADD, [base, lw.ew(TileOp.MUL, [col, lw.const(D.int32, [item])], D.int32)], D.int32)
    strides = rowmajor(tile_type.shape[:-1] + (a.width,))
    addr, vec = addresses(lw, start, layout, strides, item)
    return addr, vec, buf


def stash(lw, o: ir.Operation) -> None:
    """STASH: each register of the chunk into the stash buffer (the reads of a later loop come
    from here instead of global memory)."""
    tile = o.operands[0]
    layout = lw.layout_of(tile)
    addr, vec, buf = _stash_addresses(lw, o, tile.type, layout)
    lw.emit(simt.SimtOp.STORE_SHARED, [addr, lw.get(tile, layout)], None, simt.SharedAttrs(vec, buf))


def unstash(lw, o: ir.Operation) -> ir.Value:
    layout = lw.layout_of(o.result)
    addr, vec, buf = _stash_addresses(lw, o, o.result.type, layout)
    return lw.emit(simt.SimtOp.LOAD_SHARED, [addr], simt.RegType(o.result.type.dtype, layout.n),
                   simt.SharedAttrs(vec, buf)).result


def _along_axis(lw, o: ir.Operation):
    """What SCAN's lowerings share: (attrs, layout, dtype, n, step in bytes along the axis, the
    shared buffer, each register's address in it and vector width, each register's coordinate
    along the axis).  The buffer holds the tile row-major."""
    x, a = o.operands[0], o.attrs
    layout, dt = lw.layouts[o.result], o.result.type.dtype
    shape, item = x.type.shape, dt.itemsize
    strides = rowmajor(shape)
    base, buf = lw.alloc_shared(item * int(np.prod(shape)))
    addr, vec = addresses(lw, base, layout, strides, item)
    coord = lw.ew(TileOp.ADD, [lw.splat(lw.thread_coord(layout, a.axis), layout.n),
                               lw.const(D.int32, [c[a.axis] for c in layout.regs])], D.int32)
    return a, layout, dt, shape[a.axis], strides[a.axis] * item, buf, addr, vec, coord


def bitonic_sort(lw, o: ir.Operation) -> ir.Value:
    """SCAN "sort" as a bitonic network through one shared buffer: for block sizes k = 2, 4, ...
    n and distances j = k/2 ... 1, each element reads its partner ``i ^ j`` along the axis and keeps
    the smaller or the larger, by whether it is the lower of the pair and which way its block of k
    runs (n is a power of two: tile dims are).  log2(n) (log2(n) + 1) / 2 rounds."""
    a, layout, dt, n, pitch, buf, addr, vec, coord = _along_axis(lw, o)
    regs = layout.n
    x = o.operands[0]

    def const(v):
        return lw.const(D.int32, [v] * regs)
    v = lw.get(x, layout)
    k = 2
    while k <= n:
        j = k // 2
        # the block of k runs ascending when bit k of the coordinate is clear (reversed: descending)
        up = lw.ew(TileOp.EQ, [lw.ew(TileOp.AND, [coord, const(k)], D.int32), const(0)], D.bool_)
        if a.reverse:
            up = lw.ew(TileOp.EQ, [up, lw.const(D.bool_, [False] * regs)], D.bool_)
        while j >= 1:
            lw.emit(simt.SimtOp.STORE_SHARED, [addr, v], None, simt.SharedAttrs(vec, buf))
            lower = lw.ew(TileOp.EQ, [lw.ew(TileOp.AND, [coord, const(j)], D.int32), const(0)], D.bool_)
            step = lw.ew(TileOp.WHERE, [lower, const(j * pitch), const(-j * pitch)], D.int32)
            other = lw.emit(simt.SimtOp.LOAD_SHARED, [lw.ew(TileOp.ADD, [addr, step], D.int32)],
                            simt.RegType(dt, regs), simt.SharedAttrs(1, buf)).result
            small = lw.ew(TileOp.MINIMUM, [v, other], dt)
            large = lw.ew(TileOp.MAXIMUM, [v, other], dt)
            keep_small = lw.ew(TileOp.EQ, [lower, up], D.bool_)      # the lower of an ascending pair
            v = lw.ew(TileOp.WHERE, [keep_small, small, large], dt)
            j //= 2
        k *= 2
    return v


def scan(lw, o: ir.Operation) -> ir.Value:
    """SCAN by doubling (Hillis-Steele) through one shared buffer: at step s every element adds
    (or multiplies in) the one s before it along the axis (after it, reversed), s = 1, 2, 4, ...;
    log2(n) rounds of one store and one load per register.  Barriers come from insert_barriers."""
    a, layout, dt, n, pitch, buf, addr, vec, coord = _along_axis(lw, o)
    regs = layout.n
    x = o.operands[0]
    combine = TileOp.ADD if a.kind == "sum" else TileOp.MUL
    v = lw.get(x, layout)
    step = 1
    while step < n:
        lw.emit(simt.SimtOp.STORE_SHARED, [addr, v], None, simt.SharedAttrs(vec, buf))
        if a.reverse:
            beyond = lw.ew(TileOp.ADD, [coord, lw.const(D.int32, [step] * regs)], D.int32)
            has = lw.ew(TileOp.LT, [beyond, lw.const(D.int32, [n] * regs)], D.bool_)
        else:
            has = lw.ew(TileOp.GE, [coord, lw.const(D.int32, [step] * regs)], D.bool_)
        shift = step * pitch * (1 if a.reverse else -1)
        moved = lw.ew(TileOp.ADD, [addr, lw.const(D.int32, [shift] * regs)], D.int32)
        other = lw.emit(simt.SimtOp.LOAD_SHARED, [lw.ew(TileOp.WHERE, [has, moved, addr], D.int32)],
                        simt.RegType(dt, regs), simt.SharedAttrs(1, buf)).result
        v = lw.ew(TileOp.WHERE, [has, lw.ew(combine, [v, other], dt), v], dt)
        step *= 2
    return v


def _stage_operand(lw, v: ir.Value):
    """Store DOT operand ``v`` row-major into a new shared buffer: (base, buffer, item, dtype)."""
    lay, item = lw.layout_of(v), v.type.dtype.itemsize
    rows, cols = v.type.shape
    base, buf = lw.alloc_shared(item * rows * cols)
    addr, vec = addresses(lw, base, lay, (cols, 1), item)
    lw.emit(simt.SimtOp.STORE_SHARED, [addr, lw.get(v, lay)], None, simt.SharedAttrs(vec, buf))
    return base, buf, item, v.type.dtype


def dot_fallback(lw, o: ir.Operation) -> ir.Value:
    """FALLBACK DOT (no tensor cores, for the DOTs ``dot_config`` leaves out): A and B go to shared memory
    row-major, then each thread runs a loop over K doing one FMA per accumulator register,
    reading ``A[i, k]`` and ``B[k, j]`` for its registers' rows and columns.  Products are
    exact in float32 for fp16/bf16 inputs; int8 products accumulate in int32."""
    a_v, b_v, acc_v = o.operands
    k, n = a_v.type.shape[1], b_v.type.shape[1]
    dst = lw.layouts[o.result]
    acc_dt = o.result.type.dtype
    bufs = [_stage_operand(lw, a_v), _stage_operand(lw, b_v)]
    acc = lw.get(acc_v, dst)
    # per register: byte address of A[i, 0] and of B[0, j]; the loop adds k * stride
    (a_base, a_buf, a_item, a_dt), (b_base, b_buf, b_item, b_dt) = bufs
    a_row, _ = addresses(lw, a_base, dst, (k, 0), a_item)
    b_col, _ = addresses(lw, b_base, dst, (0, 1), b_item)
    i32 = simt.RegType(D.int32)
    body = ir.Block([ir.Value(i32), ir.Value(acc.type)])
    with lw.building(body):
        kk, cur = body.args
        step_a = lw.splat(lw.ew(TileOp.MUL, [kk, lw.const(D.int32, [a_item])], D.int32), dst.n)
        step_b = lw.splat(lw.ew(TileOp.MUL, [kk, lw.const(D.int32, [n * b_item])], D.int32), dst.n)
        av = lw.emit(simt.SimtOp.LOAD_SHARED, [lw.ew(TileOp.ADD, [a_row, step_a], D.int32)],
                     simt.RegType(a_dt, dst.n), simt.SharedAttrs(1, a_buf)).result
        bv = lw.emit(simt.SimtOp.LOAD_SHARED, [lw.ew(TileOp.ADD, [b_col, step_b], D.int32)],
                     simt.RegType(b_dt, dst.n), simt.SharedAttrs(1, b_buf)).result
        av, bv = lw.cast(av, acc_dt), lw.cast(bv, acc_dt)
        if acc_dt.is_float:
            nxt = lw.ew(TileOp.FMA, [av, bv, cur], acc_dt)
        else:
            nxt = lw.ew(TileOp.ADD, [cur, lw.ew(TileOp.MUL, [av, bv], acc_dt)], acc_dt)
        lw.emit(simt.SimtOp.YIELD, [nxt])
    bounds = [lw.const(D.int32, [0]), lw.const(D.int32, [k]), lw.const(D.int32, [1])]
    loop = lw.b.create(simt.SimtOp.FOR, bounds + [acc], [acc.type], None, [body], loc=lw.loc)
    return loop.result
