"""Lowering of LOAD / STORE to masked global accesses with element offsets.

Element ``[i0, i1, ...]`` of a tile at offsets ``(o0, o1, ...)`` is at element offset
``sum((o_d + i_d) * stride_d)`` from the array's data pointer and is in bounds when
``0 <= o_d + i_d < dim_d`` for every d.  The stride of a specialised unit inner dim is the
constant 1; index math is 64-bit when the array is ``large`` (or an offset is 64-bit).
Registers that the layout keeps contiguous along a unit-stride, 16-byte aligned last dim
are marked ``GlobalAttrs(vec=...)`` so LLVM emission can use 16-byte vector accesses.
"""
from __future__ import annotations

import dataclasses

import math

from tilejit.abi import ParamKind
from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.errors import CompileError
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_shared
from tilejit.passes.assign_layouts import array_spec, is_tile, memory_layout
from tilejit.passes.tma import ATOM_BYTES


class KnownMultiples:
    """Which number each integer scalar of a function is known to be a multiple of (1 when
    nothing is known): enough to prove ``program_id * BLOCK`` offsets keep vectors aligned."""

    def __init__(self, fn: ir.Function):
        self.loop_ivs = {o.regions[0].args[0]: (o.operands[0], o.operands[2])
                         for o in fn.walk() if o.op is TileOp.FOR}
        self.memo: dict[ir.Value, int] = {}

    def of(self, v: ir.Value) -> int:
        if v not in self.memo:
            self.memo[v] = 1                  # breaks cycles; refined below
            self.memo[v] = self._of(v)
        return self.memo[v]

    def _of(self, v: ir.Value) -> int:
        o = v.owner
        if o is None:                         # FOR iv = lb + k*step
            lb_step = self.loop_ivs.get(v)
            return math.gcd(self.of(lb_step[0]), self.of(lb_step[1])) if lb_step else 1
        if o.op is TileOp.CONSTANT:
            value = o.attrs.value
            return (abs(value) or 1 << 30) if type(value) is int else 1
        rule = _MULTIPLE_RULES.get(o.op)
        return rule(o, [self.of(x) for x in o.operands]) if rule else 1


def _small_const(v: ir.Value):
    o = v.owner
    if o is not None and o.op is TileOp.CONSTANT and type(o.attrs.value) is int and 0 <= o.attrs.value < 31:
        return o.attrs.value
    return None


_MULTIPLE_RULES = {
    TileOp.MUL: lambda o, m: m[0] * m[1],                        # (p*x)*(q*y) = pq*(x*y)
    TileOp.ADD: lambda o, m: math.gcd(m[0], m[1]),               # p*x + q*y = gcd(p,q)*(...)
    TileOp.SUB: lambda o, m: math.gcd(m[0], m[1]),               # p*x - q*y = gcd(p,q)*(...)
    TileOp.CAST: lambda o, m: m[0],                              # same integer, other width
    TileOp.SHL: lambda o, m: m[0] << (_small_const(o.operands[1]) or 0),   # (p*x) << k = p*2^k*x
    TileOp.FLOORDIV: lambda o, m: _exact_quotient(m[0], _positive_const(o.operands[1])),  # (p*x) // q = (p/q)*x
    TileOp.SHR: lambda o, m: _exact_quotient(m[0], 1 << k if (k := _small_const(o.operands[1])) is not None
                                             else None),          # (p*x) >> k = (p/2^k)*x
}


def _positive_const(v: ir.Value):
    o = v.owner
    if o is not None and o.op is TileOp.CONSTANT and type(o.attrs.value) is int and o.attrs.value > 0:
        return o.attrs.value
    return None


def _exact_quotient(p: int, q) -> int:
    """What ``(p*x) // q`` is a multiple of: ``p / q`` when ``q`` divides ``p`` (then the
    division is exact, floor or not, and the shift of a signed ``p*x`` too), else nothing."""
    return p // q if q and p % q == 0 else 1


def arg_index(lw, array: ir.Value) -> int:
    return next(i for i, a in enumerate(lw.fn.args) if a is array)


def element_offsets(lw, array, offsets, layout: L.Layout, aligned_outside: bool = False):
    """(ptr, offsets, mask, vec) of a ``layout`` tile at ``offsets`` of ``array``.
    ``aligned_outside``: a dim of one element (or none) counts with stride 0, so the masked
    elements' offsets too are multiples of every other dim's stride: with ``aligned16``, which
    leaves unit dims' strides free, a 16-byte copy (cp.async) that reads nothing still has an
    aligned address, and a ring needs no run-time check of the strides."""
    spec, arg = array_spec(lw.fn, array), arg_index(lw, array)
    rank, n = array.type.rank, layout.n
    wide = spec.large or any(o.type.dtype.bits == 64 for o in offsets)
    idx_dt = D.int64 if wide else D.int32
    total = mask = None
    for d in range(rank):
        dim = lw.cast(lw.param(ParamKind.DIM, arg, d), idx_dt)
        regs = [c[d] for c in layout.regs]
        if is_tile(offsets[d]):               # a gathered dim: each element's own index
            idx = lw.cast(lw.get(offsets[d], layout), idx_dt)
            ok = _in_range(lw, idx, lw.splat(dim, n), idx_dt)
        else:                                 # the block start plus this thread's coordinate
            base = lw.ew(TileOp.ADD, [lw.cast(lw.get(offsets[d]), idx_dt),
                                      lw.cast(lw.thread_coord(layout, d), idx_dt)], idx_dt)
            if len(set(regs)) == 1:           # same index in every register: test it once
                idx = lw.ew(TileOp.ADD, [base, lw.const(idx_dt, regs[:1])], idx_dt)
                ok = _in_range(lw, idx, dim, idx_dt)
                idx, ok = lw.splat(idx, n), lw.splat(ok, n)
            else:
                idx = lw.ew(TileOp.ADD, [lw.splat(base, n), lw.const(idx_dt, regs)], idx_dt)
                ok = _in_range(lw, idx, lw.splat(dim, n), idx_dt)
        mask = ok if mask is None else lw.ew(TileOp.AND, [mask, ok], D.bool_)
        if not (d == rank - 1 and spec.unit_inner_stride):
            stride = lw.cast(lw.param(ParamKind.STRIDE, arg, d), idx_dt)
            if aligned_outside:
                wide_dim = lw.ew(TileOp.GT, [dim, lw.const(idx_dt, [1])], D.bool_)
                stride = lw.ew(TileOp.WHERE, [wide_dim, stride, lw.const(idx_dt, [0])], idx_dt)
            idx = lw.ew(TileOp.MUL, [idx, lw.splat(stride, n)], idx_dt)
        total = idx if total is None else lw.ew(TileOp.ADD, [total, idx], idx_dt)
    vec = 1
    if spec.unit_inner_stride and spec.aligned16 and rank and not is_tile(offsets[-1]):
        vec = min(L.contiguous_run(layout), 16 // spec.dtype.itemsize)
        vec = math.gcd(vec, lw.multiples.of(offsets[-1]))
    return lw.param(ParamKind.PTR, arg), total, mask, vec


def _in_range(lw, idx, dim, idx_dt):
    zero = lw.splat(lw.const(idx_dt, [0]), idx.type.n)
    return lw.ew(TileOp.AND, [lw.ew(TileOp.GE, [idx, zero], D.bool_),
                              lw.ew(TileOp.LT, [idx, dim], D.bool_)], D.bool_)


def load(lw, o: ir.Operation) -> ir.Value:
    """A LOAD as one LOAD_GLOBAL.  A layout whose registers hold runs of neighbouring elements in
    another order (a scale row in an accumulator's columns, ``nibble_c_layout``: columns j of
    four n8 tiles) is loaded in sorted register order, in vectors, and renamed back."""
    array, offsets = o.operands[0], o.operands[1:]
    layout = lw.layouts[o.result]
    order = sorted(range(layout.n), key=layout.regs.__getitem__)
    if order != list(range(layout.n)):
        ordered = dataclasses.replace(layout, regs=tuple(layout.regs[r] for r in order))
        if L.contiguous_run(ordered) > L.contiguous_run(layout):
            back = [0] * layout.n
            for p, r in enumerate(order):
                back[r] = p
            return lw.gather(_load(lw, o, array, offsets, ordered), back)
    return _load(lw, o, array, offsets, layout)


def _load(lw, o: ir.Operation, array, offsets, layout: L.Layout) -> ir.Value:
    ptr, offs, mask, vec = element_offsets(lw, array, offsets, layout)
    dt = o.result.type.dtype
    return lw.emit(simt.SimtOp.LOAD_GLOBAL, [ptr, offs, mask], simt.RegType(dt, layout.n),
                   simt.GlobalAttrs(vec=vec, other=o.attrs.other if o.attrs else 0, prefix=vec > 1)).result


def _fast_dim(layout: L.Layout):
    """The dim along which neighbouring lanes step (None when no lane term exists)."""
    best = None
    for d, terms in enumerate(layout.terms):
        for t in terms:
            if t.src == "lane" and t.bits and (best is None or t.shift < best[0]):
                best = (t.shift, d)
    return None if best is None else best[1]


def store_layout(lw, tile: ir.Value, spec) -> L.Layout:
    """The layout to store ``tile`` in: its own, unless its lanes run across the contiguous
    dim (a transpose) while the array is contiguous there; then the coalesced memory layout."""
    want = memory_layout(tile.type.shape, spec, lw.num_warps)
    if tile in lw.deferred or tile not in lw.layouts:
        return want
    own = lw.layouts[tile]
    rank = len(own.shape)
    if own.kind is L.LayoutKind.MMA_C and spec.unit_inner_stride and L.contiguous_run(own) * spec.dtype.itemsize < 8:
        # accumulators hold 2 neighbours per lane, 4 lanes per row: 32-byte sectors are whole
        # for 4-byte elements; narrower ones go through shared memory for 16-byte stores
        return want
    if spec.unit_inner_stride and rank >= 2 and own.shape[-1] > 1 and _fast_dim(own) not in (None, rank - 1):
        return want
    return own


def _or_across_warps(lw, bits: ir.Value, layout: L.Layout, shape) -> ir.Value:
    """``bits`` ORed over the warps that replicate each element: every such warp writes its own
    slot of the element in a shared buffer, then every thread ORs all the element's slots."""
    warp_bits = [b for b in range(5) if layout.replica_bits("warp") >> b & 1]
    slots, item, n = 1 << len(warp_bits), bits.type.dtype.itemsize, layout.n
    mine = lw.bitfield_sum([L.BitTerm("warp", b, 1, item << i) for i, b in enumerate(warp_bits)])
    base, buf = lw.alloc_shared(item * slots * math.prod(shape))
    first, _ = lower_shared.addresses(lw, base, layout, lower_shared.rowmajor(shape), item * slots)
    own = lw.ew(TileOp.ADD, [first, lw.splat(mine, n)], D.int32)
    lw.emit(simt.SimtOp.STORE_SHARED, [own, bits], None, simt.SharedAttrs(1, buf))
    out = None
    for s in range(slots):
        at = lw.ew(TileOp.ADD, [first, lw.const(D.int32, [s * item] * n)], D.int32)
        got = lw.emit(simt.SimtOp.LOAD_SHARED, [at], bits.type, simt.SharedAttrs(1, buf)).result
        out = got if out is None else lw.ew(TileOp.OR, [out, got], bits.type.dtype)
    return out


def atomic(lw, o: ir.Operation) -> ir.Value:
    """An ATOMIC as one ATOMIC_GLOBAL: each element once (replicas hold the same element: only the
    first of them updates it), its old value in the result's layout: the other replicas read 0
    and take the first's bits by a shuffle-or across lanes and through shared memory across warps.
    A ``sem`` orders the whole program's accesses, not only those of the threads that update: a
    release (or acq_rel) follows a barrier (every thread's earlier stores happen before it), an
    acquire (or acq_rel) is followed by one (every thread's later loads happen after it) -- so a
    program may publish a block with plain stores and one release counter (split-K's last-arriver
    fixup, ``examples/w4a16_gemm.py``)."""
    if o.attrs.sem in ("release", "acq_rel"):
        lw.emit(simt.SimtOp.BARRIER, [])
    old = _atomic(lw, o)
    if o.attrs.sem in ("acquire", "acq_rel"):
        lw.emit(simt.SimtOp.BARRIER, [])
    return old


def _atomic(lw, o: ir.Operation) -> ir.Value:
    array, tile, keep = o.operands[0], ir.stored_tile(o), ir.store_mask(o)
    offsets = o.operands[1:1 + array.type.rank]          # (atomic_cas's compared tile follows)
    layout = lw.layouts[o.result]
    value = lw.get(tile, layout)
    ptr, offs, mask, _ = element_offsets(lw, array, offsets, layout)
    if keep is not None:
        mask = lw.ew(TileOp.AND, [mask, lw.get(keep, layout)], D.bool_)
    primary = lw.primary_thread(layout)
    used = primary is not None and any(o.result in u.operands for u in lw.fn.walk())
    if primary is not None:
        mask = lw.ew(TileOp.AND, [mask, lw.splat(primary, layout.n)], D.bool_)
    lw.written(arg_index(lw, array))
    dt = o.result.type.dtype
    cmp = ir.atomic_compare(o)
    operands = [ptr, offs, value, mask] + ([lw.get(cmp, layout)] if cmp is not None else [])
    old = lw.emit(simt.SimtOp.ATOMIC_GLOBAL, operands, simt.RegType(dt, layout.n), o.attrs).result
    if used:    # the lanes that hold the same element read 0: OR in the first one's bits
        bits_dt = D.lookup(f"uint{dt.bits}")
        bits = lw.ew(TileOp.BITCAST, [old], bits_dt) if dt.is_float else old
        lanes = layout.replica_bits("lane")
        for bit in range(5):
            if lanes >> bit & 1:
                other = lw.emit(simt.SimtOp.SHUFFLE_XOR, [bits], bits.type, simt.MaskAttrs(1 << bit)).result
                bits = lw.ew(TileOp.OR, [bits, other], bits.type.dtype)
        if layout.replica_bits("warp"):
            bits = _or_across_warps(lw, bits, layout, o.result.type.shape)
        old = lw.ew(TileOp.BITCAST, [bits], dt) if dt.is_float else bits
    return old


def store(lw, o: ir.Operation) -> None:
    array, tile, keep = o.operands[0], ir.stored_tile(o), ir.store_mask(o)
    offsets = o.operands[1:1 + array.type.rank]
    plan = lw.fn.meta.get("store_plans", {}).get(o)
    if plan is not None:
        return tma_store(lw, o, plan)
    spec = array_spec(lw.fn, array)
    if not is_tile(tile):
        raise CompileError("storing a scalar is not supported by the SIMT lowering yet", o.loc)
    layout = store_layout(lw, tile, spec)
    value = lw.get(tile, layout)
    ptr, offs, mask, vec = element_offsets(lw, array, offsets, layout)
    if keep is not None:                      # the user's mask, in the stored tile's layout
        mask = lw.ew(TileOp.AND, [mask, lw.get(keep, layout)], D.bool_)
    primary = lw.primary_thread(layout)
    if primary is not None:                   # replicas hold the same values: one writes
        mask = lw.ew(TileOp.AND, [mask, lw.splat(primary, layout.n)], D.bool_)
    lw.written(arg_index(lw, array))
    lw.emit(simt.SimtOp.STORE_GLOBAL, [ptr, offs, value, mask], None,
            simt.GlobalAttrs(vec=vec, prefix=vec > 1 and keep is None))


def tma_store(lw, o: ir.Operation, plan) -> None:
    """A STORE that TMA copies out (``passes.plan_stores``): every register into the staging tile
    (box ``a`` of each 64-column atom at ``a * rows * 128`` bytes, row ``r`` at ``r * 128``, its
    16-byte chunks XORed with ``r % 8``: TMA's SW128), then one thread copies each box to the
    array at the STORE's offsets plus the box's first column and waits until the copies have
    read the staging tile.  ``insert_barriers`` puts the proxy fence and the barrier between the
    threads' writes and the copies."""
    array = o.operands[0]
    tile = plan.tile if plan.tile is not None else ir.stored_tile(o)
    layout, item, rows = lw.layouts[tile], plan.item, plan.rows
    width = plan.copies[0].box[-1]
    base, buf = lw.alloc_shared(plan.nbytes, 1024)
    n = layout.n

    def const(v):
        return lw.const(D.int32, [v] * n)

    def ew(kind, a, b):
        return lw.ew(kind, [a, b], D.int32)
    (r, c), _ = lw.element_coords(layout)
    # byte address: atom * rows*128 + r*128 + ((col bytes in atom) ^ ((r & 7) << 4))
    atom = ew(TileOp.SHR, c, const(width.bit_length() - 1))
    inner = ew(TileOp.MUL, ew(TileOp.AND, c, const(width - 1)), const(item))
    swz = ew(TileOp.XOR, inner, ew(TileOp.SHL, ew(TileOp.AND, r, const(7)), const(4)))
    row = ew(TileOp.ADD, ew(TileOp.MUL, atom, const(rows * ATOM_BYTES)), ew(TileOp.MUL, r, const(ATOM_BYTES)))
    addr = ew(TileOp.ADD, lw.splat(base, n), ew(TileOp.ADD, row, swz))
    table = layout.table()
    tr, tc = table[..., 0], table[..., 1]
    host = (tc // width) * rows * ATOM_BYTES + tr * ATOM_BYTES + (((tc % width) * item) ^ ((tr & 7) << 4))
    vec = L.vector_width(host, item)
    lw.emit(simt.SimtOp.STORE_SHARED, [addr, lw.get(tile, layout)], None, simt.SharedAttrs(vec, buf))
    lw.written(arg_index(lw, array))
    issue = lw.ew(TileOp.EQ, [lw.thread_id("tid", placing=False), lw.const(D.int32, [0])], D.bool_)
    at = [lw.cast(lw.get(x), D.int32) for x in o.operands[1:1 + array.type.rank]]
    arg = arg_index(lw, array)
    for copy in plan.copies:
        tmap = lw.tensor_map(arg, array.type.dtype, copy.box, copy.swizzle)
        src = lw.ew(TileOp.ADD, [base, lw.const(D.int32, [copy.dst])], D.int32)
        col = lw.ew(TileOp.ADD, [at[-1], lw.const(D.int32, [copy.inner])], D.int32)
        lw.emit(simt.SimtOp.TMA_STORE, [tmap, src, issue, *at[:-1], col], None,
                simt.TmaAttrs(copy.box, copy.swizzle, buf))
    lw.emit(simt.SimtOp.TMA_STORE_WAIT, [issue], None, simt.SharedAttrs(1, buf))
