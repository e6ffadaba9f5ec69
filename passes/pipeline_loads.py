"""Software pipelining of the loads that feed ``tj.dot`` in ``tj.range(..., stages=S)`` loops:
each such load becomes 16-byte ``cp.async`` copies into an S-slot ring of swizzled shared
tiles, issued S-1 iterations ahead of the DOT that reads them.  When both DOT operands come
from rings, the DOT's k step 0 fragments are also read one iteration ahead (a loop-carried
value), so the loop body never waits at its top:

    prologue:  for s in 0..S-2: copy iteration s into slot s; commit        (masked past ub)
               wait_group(S-2); barrier; frags = k step 0 of slot 0
    iteration j:  MMAs of k step 0 (frags)
                  copy iteration j+S-1 into slot (j-1)%S; commit            (masked past ub)
                  ldmatrix k steps 1..K-1 of slot j%S, their MMAs, except that before the
                  last k step's MMAs: wait_group(S-2); barrier             # slot j+1 landed
                                      frags = k step 0 of slot (j+1)%S      # next iteration's
    after:     wait_group(0); barrier                 # nothing in flight, the ring is free

(with one k step the copies come first, before the wait that needs them when S = 2).  One
barrier per iteration covers both hazards: the wait makes each thread's copies visible to
the others, and every warp has read slot (j-1)%S (its last reads come before iteration j-1's
barrier) before iteration j overwrites it.  A DOT with one ring operand keeps the simpler
order: wait_group(S-2); barrier at the top, then the DOT, its copies after its first k step.
Copies past the loop's end or the array's edge use ``src_bytes`` to zero-fill (ragged K and
trip counts below S need no other code).  A load qualifies when its only use is a
tensor-core DOT in the same loop body, its array is ``aligned16`` with a unit-stride last dim
(every row stride is then a multiple of 16 bytes, so no runtime check is needed), its
``other`` is 0, and its offsets are computed from the induction variable and loop-invariant
values.  The copy placement keeps the copies' address arithmetic between MMAs, where it
issues in the tensor cores' shadow instead of delaying the first ldmatrix.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_dot, lower_memory
from tilejit.passes.assign_layouts import array_spec, is_tile, memory_layout
from tilejit.passes.lower_dot import swizzled_offsets, tile_bytes
from tilejit.passes.mma_tiling import dot_config
from tilejit.simt import RegType, SimtOp

I32 = D.int32


def _offset_slice(body: ir.Block, load: ir.Operation) -> list[ir.Operation] | None:
    """The body ops (in order) that compute ``load``'s offsets, or None when they read a
    loop-carried value or have effects (then the load cannot be issued ahead)."""
    in_body = {r: o for o in body.ops for r in o.results}
    carried = set(body.args[1:])
    needed, stack = set(), list(load.operands[1:])
    while stack:
        v = stack.pop()
        if v in carried:
            return None
        o = in_body.get(v)
        if o is None or o in needed:
            continue
        if o.regions or is_tile(v) or o.op in (TileOp.LOAD, TileOp.STORE):
            return None
        needed.add(o)
        stack.extend(o.operands)
    return [o for o in body.ops if o in needed]


def plan(lw, o: ir.Operation) -> list[tuple]:
    """[(load op, operand "a"/"b", DotConfig, offset slice)] of the loads of FOR ``o`` to pipeline."""
    if o.attrs is None or o.attrs.stages < 2:
        return []
    step = o.operands[2].owner
    if step is None or step.op is not TileOp.CONSTANT or not isinstance(step.attrs.value, int) \
            or step.attrs.value <= 0:
        return []
    body = o.regions[0]
    uses: dict = {}
    for op in body.walk():
        for x in op.operands:
            uses.setdefault(x, []).append(op)
    out = []
    for dot in body.ops:
        if dot.op is not TileOp.DOT:
            continue
        cfg = dot_config(dot, lw.num_warps)
        if cfg is None or lw.layouts.get(dot.result) != cfg.acc_layout:
            continue
        for operand, v in zip("ab", dot.operands[:2]):
            load = v.owner
            if load is None or load.op is not TileOp.LOAD or load not in body.ops or uses.get(v) != [dot]:
                continue
            spec = array_spec(lw.fn, load.operands[0])
            item = spec.dtype.itemsize
            if not (spec.unit_inner_stride and spec.aligned16) or (load.attrs and load.attrs.other != 0):
                continue
            if (lw.multiples.of(load.operands[-1]) * item) % 16:
                continue
            offsets = _offset_slice(body, load)
            if offsets is not None:
                out.append((load, operand, cfg, offsets))
    return out


class Ring:
    """The S-slot shared ring of one pipelined load."""

    def __init__(self, lw, load: ir.Operation, operand: str, cfg, offsets, stages: int):
        self.load, self.operand, self.cfg, self.offsets = load, operand, cfg, offsets
        self.slot_bytes = tile_bytes(cfg, operand)
        self.base, self.buf = lw.alloc_shared(stages * self.slot_bytes, align=128)   # see lower_dot

    def issue(self, lw, iv: ir.Value, iv_value, slot, valid) -> None:
        """cp.async of the tile the load reads when the induction variable is ``iv_value``
        into ``slot`` (i32); everything is zero-filled unless ``valid`` (bool scalar, None:
        always valid)."""
        saved = {v: lw.values.get(v) for v in [iv] + [r for o in self.offsets for r in o.results]}
        lw.values[iv] = iv_value
        lw.block(ir.Block([], list(self.offsets)))          # the offsets at that iteration
        spec = array_spec(lw.fn, self.load.operands[0])
        item = spec.dtype.itemsize
        copy = memory_layout(self.load.result.type.shape, spec, lw.num_warps)
        assert L.contiguous_run(copy) >= 16 // item, copy
        # one register per 16-byte chunk: the first element of each group of 16 // item
        chunks = L.Layout("chunks", copy.shape, copy.num_warps, copy.regs[::16 // item], copy.terms)
        ptr, offs, src = _chunk_sources(lw, self.load, chunks, item)
        if valid is not None:
            src = lw.ew(TileOp.WHERE, [lw.splat(valid, chunks.n), src, lw.const(I32, [0] * chunks.n)], I32)
        rel, _ = swizzled_offsets(lw, chunks, self.cfg.row_bytes(self.operand), item)
        addr = lw.ew(TileOp.ADD, [lw.splat(self.slot_base(lw, slot), chunks.n), rel], I32)
        lw.emit(SimtOp.CP_ASYNC, [ptr, offs, addr, src], None, simt.SharedAttrs(1, self.buf))
        for v, value in saved.items():        # the body may issue this mid-way: restore its values
            if value is None:
                lw.values.pop(v, None)
            else:
                lw.values[v] = value

    def slot_base(self, lw, slot) -> ir.Value:
        return lw.ew(TileOp.ADD, [self.base, lw.ew(TileOp.MUL, [slot, lw.const(I32, [self.slot_bytes])], I32)], I32)


def _chunk_sources(lw, load: ir.Operation, chunks: L.Layout, item: int):
    """(pointer, element offset, bytes to read) of each chunk register: the whole 16 bytes
    inside the array, fewer at its right edge (a chunk never starts left of column 0: offsets
    are multiples of the chunk), none outside it."""
    array, offsets = load.operands[0], load.operands[1:]
    arg = lower_memory._arg_index(lw, array)

    def stride_of(d, idx_dt):
        # ``aligned16`` exempts the stride of a dim of size 1 (only index 0 is in bounds
        # there): taken as 0, the zero-byte copies of the rows past it keep 16-byte aligned
        # addresses; every other stride is a multiple of 16 bytes
        def make():
            p = lw.prologue
            stride = lw.cast(lw.param("stride", arg, d), idx_dt, p)
            one = lw.const(idx_dt, [1], p)
            wide = lw.ew(TileOp.GT, [lw.cast(lw.param("dim", arg, d), idx_dt, p), one], D.bool_, p)
            return lw.ew(TileOp.WHERE, [wide, stride, lw.const(idx_dt, [0], p)], idx_dt, p)
        return lw.geo(("copy_stride", arg, d, idx_dt), make)
    ptr, offs, mask, _ = lower_memory._element_offsets(lw, array, offsets, chunks, stride_of)
    n, idx_dt = chunks.n, offs.type.dtype
    first_col = lw.ew(TileOp.ADD, [lw.cast(lw.get(offsets[-1]), idx_dt),
                                   lw.cast(lw.thread_coord(chunks, 1), idx_dt)], idx_dt)
    col0 = lw.ew(TileOp.ADD, [lw.splat(first_col, n), lw.const(idx_dt, [c[1] for c in chunks.regs])], idx_dt)
    dim = lw.cast(lw.param("dim", lower_memory._arg_index(lw, array), 1), idx_dt)
    left = lw.ew(TileOp.MINIMUM, [lw.ew(TileOp.SUB, [lw.splat(dim, n), col0], idx_dt),
                                  lw.const(idx_dt, [16 // item] * n)], idx_dt)
    nbytes = lw.ew(TileOp.MUL, [lw.cast(left, I32), lw.const(I32, [item] * n)], I32)
    return ptr, offs, lw.ew(TileOp.WHERE, [mask, nbytes, lw.const(I32, [0] * n)], I32)


def _sync(lw, wait: int) -> None:
    lw.emit(SimtOp.CP_ASYNC_WAIT, [], None, simt.WaitAttrs(wait))
    lw.emit(SimtOp.BARRIER, [])


class Prefetch:
    """Cross-iteration fragment prefetch of the DOT that reads two rings (``lower_dot``):
    ``incoming`` holds this iteration's k step 0 fragments; ``next_fragments()`` waits for
    the next slot and reads its k step 0, which becomes ``outgoing``."""

    def __init__(self, dot, cfg, incoming, next_fragments):
        self.dot, self.cfg, self.incoming, self.next_fragments = dot, cfg, incoming, next_fragments
        self.outgoing = None


def _prefetch_dot(region: ir.Block, rings):
    """The DOT of ``region`` both of whose operands are rings (None: no prefetch)."""
    by_value = {ring.load.result: ring for ring in rings}
    for op in region.ops:
        if op.op is TileOp.DOT and op.operands[0] in by_value and op.operands[1] in by_value:
            return op, by_value[op.operands[0]], by_value[op.operands[1]]
    return None


def _read_fragments(lw, a_ring, b_ring, slot, stages: int):
    """k step 0 fragments of ring slot ``slot`` (after a wait and barrier)."""
    _sync(lw, stages - 2)
    first = len(lw.b.block.ops)
    frags = lower_dot.k_step_fragments(lw, a_ring.cfg, (a_ring.slot_base(lw, slot), a_ring.buf),
                                       (b_ring.slot_base(lw, slot), b_ring.buf), 0)
    lw.self_synced.update(op for op in lw.b.block.ops[first:]
                          if op.op in (SimtOp.LDMATRIX, SimtOp.LOAD_SHARED))
    return frags


def lower_pipelined_for(lw, o: ir.Operation, loads: list[tuple]) -> None:
    """Lower FOR ``o`` with ``loads`` (from ``plan``) issued through cp.async rings."""
    stages = o.attrs.stages
    outer = (lw.dot_prefetch, lw.after_first_k_step)     # an enclosing pipelined loop's
    region = o.regions[0]
    iv = region.args[0]
    lb, ub, step = (lw.get(x) for x in o.operands[:3])
    iv_dt = iv.type.dtype
    step_value = o.operands[2].owner.attrs.value
    rings = [Ring(lw, load, operand, cfg, offsets, stages) for load, operand, cfg, offsets in loads]
    ub_iv = lw.cast(ub, iv_dt)
    for s in range(stages - 1):
        iv_s = lw.ew(TileOp.ADD, [lw.cast(lb, iv_dt), lw.const(iv_dt, [s * step_value])], iv_dt)
        valid = lw.ew(TileOp.LT, [iv_s, ub_iv], D.bool_)
        first = len(lw.b.block.ops)
        for ring in rings:
            ring.issue(lw, iv, iv_s, lw.const(I32, [s]), valid)
        lw.emit(SimtOp.CP_ASYNC_COMMIT, [])
        if s:        # other slots of the ring: the barrier before slot 0's copies covers them
            lw.self_synced.update(op for op in lw.b.block.ops[first:] if op.op is SimtOp.CP_ASYNC)
    found = _prefetch_dot(region, rings)
    extra, prefetch = [], None
    if found is not None:
        dot, a_ring, b_ring = found
        cfg = a_ring.cfg
        init = lower_dot.pack_fragments(lw, _read_fragments(lw, a_ring, b_ring, lw.const(I32, [0]), stages))
        extra = [(RegType(I32, lower_dot.fragment_regs(cfg)), lambda: prefetch.outgoing)]

    def before_body(block):
        nonlocal prefetch
        iv_value = block.args[0]
        if found is None:
            _sync(lw, stages - 2)
        # iv >= lb inside a positive-step loop: unsigned division and remainder by constants
        # are a multiply-high each, the signed floor forms need sign fix-ups
        u32 = D.uint32
        since = lw.cast(lw.cast(lw.ew(TileOp.SUB, [iv_value, lw.cast(lb, iv_dt)], iv_dt), I32), u32)
        trip = lw.ew(TileOp.FLOORDIV, [since, lw.const(u32, [step_value])], u32)
        read = lw.ew(TileOp.MOD, [trip, lw.const(u32, [stages])], u32)
        last = lw.ew(TileOp.EQ, [read, lw.const(u32, [stages - 1])], D.bool_)
        write = lw.ew(TileOp.WHERE, [lw.ew(TileOp.EQ, [read, lw.const(u32, [0])], D.bool_),
                                     lw.const(u32, [stages - 1]),
                                     lw.ew(TileOp.SUB, [read, lw.const(u32, [1])], u32)], u32)
        following = lw.ew(TileOp.WHERE, [last, lw.const(u32, [0]),
                                         lw.ew(TileOp.ADD, [read, lw.const(u32, [1])], u32)], u32)
        read, write, following = (lw.cast(x, I32) for x in (read, write, following))
        for ring in rings:
            lw.staged[ring.load.result] = (ring.slot_base(lw, read), ring.buf)

        def issue_copies():
            # copies for iterations past ub need no mask: they fill slots no iteration reads
            # (the last prefetch's fragments are dropped), and the array bounds keep them in
            # the arrays
            ahead = lw.ew(TileOp.ADD, [iv_value, lw.const(iv_dt, [(stages - 1) * step_value])], iv_dt)
            for ring in rings:
                ring.issue(lw, iv, ahead, write, None)
            lw.emit(SimtOp.CP_ASYNC_COMMIT, [])
        if found is not None:
            prefetch = Prefetch(dot, cfg, block.args[-1],
                                lambda: _read_fragments(lw, a_ring, b_ring, following, stages))
            lw.dot_prefetch = prefetch
        if found is not None and cfg.k_steps == 1:
            issue_copies()             # before the DOT's wait for the next slot, which needs them
        else:
            # the copies into slot (j-1)%S may go anywhere after the barrier that ended the
            # reads of that slot: the DOT reading the ring issues them after its first k step
            # (``lower_dot``), so their address arithmetic overlaps the tensor cores
            lw.after_first_k_step = issue_copies

    args = region.args[1:]
    inits = [lw.get(x, lw.layouts.get(a)) for x, a in zip(o.operands[3:], args)]
    body = lw.region(region, args, before=before_body, extra=extra)
    assert lw.after_first_k_step is None, "a pipelined loop's DOT did not issue its copies"
    assert prefetch is None or prefetch.outgoing is not None, "the prefetching DOT was not lowered"
    lw.dot_prefetch, lw.after_first_k_step = outer
    op = lw.b.create(SimtOp.FOR, [lb, ub, step] + inits + ([init] if found else []),
                     [lw.reg_type(r) for r in o.results] + [rtype for rtype, _ in extra], o.attrs, [body])
    for r, sr in zip(o.results, op.results):
        lw.values[r] = sr
    for ring in rings:
        del lw.staged[ring.load.result]
    # inside the loop the ring's accesses are ordered by the barriers above; the prologue's
    # copies are left to insert_barriers (the ring may reuse bytes read before the loop)
    ring_ids = {ring.buf for ring in rings}
    lw.self_synced.update(op for op in body.walk() if op.op in (SimtOp.CP_ASYNC, SimtOp.LDMATRIX,
                                                                 SimtOp.LOAD_SHARED)
                          and op.attrs.buffer in ring_ids)
    _sync(lw, 0)                              # drained; the ring's bytes may be reused


def pipelined_load(lw, o: ir.Operation) -> bool:
    """True when LOAD ``o`` is replaced by a ring (lowering then emits nothing for it)."""
    return o.result in lw.staged
