"""Lowering tile IR to SIMT IR: the driver, value environment, thread geometry and params,
elementwise and shape ops, materialisation of deferred values, and structured control flow.

Every tile value becomes ``RegType(dtype, layout.n)`` per thread; scalars are uniform
``RegType(dtype, 1)``.  Element coordinates are a runtime *thread part* (bit fields of the
lane and warp ids, computed once in the function's prologue) plus compile-time *register
parts* (vector constants).  Memory ops, reductions and shared-memory exchanges live in
``lower_memory``, ``lower_reduce`` and ``lower_shared``; tensor-core DOTs in ``lower_dot`` and
the cp.async pipelining of ``tj.range(stages=N)`` loops feeding them in ``pipeline_loads``.
"""
from __future__ import annotations

from contextlib import contextmanager

from tilejit.abi import ParamKind
from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.errors import CompileError
from tilejit.ir import ELEMENTWISE_OPS, ArrayType, TileOp
from tilejit.passes import layouts as L
from tilejit.passes import lower_dot, lower_memory, lower_reduce, lower_shared, pipeline_loads, row_rings, wgmma
from tilejit.passes.assign_layouts import array_spec, default_layout, is_tile
from tilejit.simt import RegType, SimtOp

I32 = D.int32
# Tensor-core kernels walk their 2-D grid in groups of this many blocks along axis 0
# (``grouped_program_ids``); 1: launch order.
GROUP_PROGRAMS = 8
rowmajor = lower_shared.rowmajor


class Lowering:
    def __init__(self, fn: ir.Function, num_warps: int):
        self.fn, self.num_warps = fn, num_warps
        # the tile op being lowered: every SIMT op emitted for it carries its location (ops of
        # the kernel as a whole, such as parameter loads, carry the ``def`` line)
        self.loc = fn.meta.get("loc", ir.UNKNOWN_LOC)
        self.layouts: dict = fn.meta["layouts"]
        self.deferred: set = fn.meta["deferred"]
        self.prologue = ir.Builder(ir.Block())
        self.b = ir.Builder(ir.Block())
        self.values: dict[ir.Value, ir.Value] = {}
        self.scopes: list[dict] = [{}]
        self.geometry: dict = {}              # prologue values, keyed by what they compute
        self.lane_bits = 0                   # lane-id bits that place data (SimtMeta.lane_bits)
        self.next_buffer = 0
        self.params: list[simt.ParamDesc] = []
        self.param_index: dict[tuple, int] = {}
        self.writes: set[int] = set()
        self.multiples = lower_memory.KnownMultiples(fn)
        self.staged: dict = {}                # DOT operand in shared memory -> plans.Staged
        self.ring_reads: dict = {}            # LOAD op -> (row_rings.RowRing, slot): read from the ring
        self.loop_plans = fn.meta["loop_plans"]   # FOR op -> plans.LoopPlan (passes.plan_loops)
        self.pipelining: list = []            # the LoopPlans whose pipelined bodies are being lowered
        self.trips: list = []                 # their iteration numbers (``set_trip``)
        self.self_synced: set = set()         # shared accesses the pipeliner orders itself
        self.tma_loops: list = []             # pipeline_loads.TmaLoop of each TMA-filled loop
        self.tile_blocks: list = []           # the tile blocks being lowered, innermost last
        self._users = None                    # value -> its readers (``users``)
        self.rotated: set = set()             # tile FORs whose wgmma product is carried in flight
        self.wgmma_pending: dict = {}         # id(tile block) -> DOT results in flight until its next wait
        self.dot_plans = fn.meta["dot_plans"]     # DOT op -> plans.DotPlan (passes.plan_dots)
        self.grouped_ids = GROUP_PROGRAMS > 1 and any(p.config is not None for p in self.dot_plans.values())
        self.describe_params()

    # --- scoped state: helpers change the context only through these --------------------------
    @contextmanager
    def building(self, block: ir.Block):
        """Emit into ``block`` (a region body being built) inside the ``with``."""
        outer, self.b = self.b, ir.Builder(block)
        try:
            yield self.b
        finally:
            self.b = outer

    @contextmanager
    def at_iteration(self, iv: ir.Value, value: ir.Value):
        """Lower ops that read the induction variable ``iv`` as if it were ``value`` (a SIMT
        value): the pipeliner computes a later iteration's load offsets this way."""
        saved = self.values.get(iv)
        self.values[iv] = value
        try:
            yield
        finally:
            if saved is None:
                del self.values[iv]
            else:
                self.values[iv] = saved

    @contextmanager
    def pipelined_body(self, plan):
        """Lower the body of a loop pipelined by ``plan`` inside the ``with`` (``in_flight_after``
        reads it)."""
        self.pipelining.append(plan)
        self.trips.append(None)
        try:
            yield
        finally:
            self.pipelining.pop()
            self.trips.pop()

    def set_trip(self, trip: ir.Value) -> None:
        """The pipelined loop's iteration number (i32, from 0) in the body being lowered: a
        computed B's double buffer (``wgmma.COMPUTED_B_BUFFERS``) picks its half by it."""
        self.trips[-1] = trip

    def stage(self, value: ir.Value, staged) -> None:
        """DOT operand ``value`` is in shared memory as ``staged`` (a ``plans.Staged``) from here
        on, until ``unstage``."""
        self.staged[value] = staged

    def unstage(self, value: ir.Value) -> None:
        del self.staged[value]

    def row_ring(self, plan, stages: int):
        """A ``row_rings.RowRing`` of ``stages`` slots for ``plan`` (a RowRingPlan), its shared
        memory allocated (``pipeline_loads`` makes them through here: it cannot import
        ``row_rings``, which imports it)."""
        return row_rings.RowRing(self, plan, stages)

    def ring_read(self, load: ir.Operation, ring, slot) -> None:
        """LOAD ``load`` reads ``ring`` (a ``row_rings.RowRing``) at ``slot`` from here on, until
        ``ring_done``."""
        self.ring_reads[load] = (ring, slot)

    def ring_done(self, load: ir.Operation) -> None:
        self.ring_reads.pop(load, None)

    def written(self, arg: int) -> None:
        """The kernel stores to runtime argument ``arg`` (``SimtMeta.writes``)."""
        self.writes.add(arg)

    def rebind(self, v: ir.Value, simt_value: ir.Value) -> None:
        """Tile value ``v`` is read from ``simt_value`` from here on (an accumulator that
        came back from a wgmma wait)."""
        self.values[v] = simt_value

    def take_pending(self) -> list:
        """The DOT results of the tile block being lowered whose wgmma group is still in flight
        (``leave_pending``); the next wait retires them, so they are handed out once."""
        return self.wgmma_pending.pop(id(self.tile_blocks[-1]), []) if self.tile_blocks else []

    def leave_pending(self, values: list) -> None:
        """DOT results whose wgmma group stays in flight until the block's next wait."""
        self.wgmma_pending[id(self.tile_blocks[-1])] = list(values)

    def mark_rotated(self, loop: ir.Operation) -> None:
        """Tile FOR ``loop`` carries a wgmma product in flight (``wgmma.carried_products``): its
        SIMT loop is unrolled by two (``ForAttrs.unroll``)."""
        self.rotated.add(loop)

    def record_tma_loop(self, rec) -> None:
        """A TMA-filled loop's ``pipeline_loads.TmaLoop`` (``SimtMeta.tma_loops``)."""
        self.tma_loops.append(rec)

    def ordered_by_pipeliner(self, ops) -> None:
        """Shared accesses ``ops`` are ordered by the pipeliner's own waits and barriers:
        ``insert_barriers`` leaves them alone."""
        self.self_synced.update(ops)

    # --- building ----------------------------------------------------------------------------
    def emit(self, op, operands, rtype=None, attrs=None, regions=None, builder=None) -> ir.Operation:
        b = builder or self.b
        return b.create(op, operands, [rtype] if rtype is not None else [], attrs, regions, loc=self.loc)

    def const(self, dtype, values, builder=None) -> ir.Value:
        values = tuple(values)
        return self.emit(SimtOp.CONSTANT, [], RegType(dtype, len(values)),
                         simt.VectorConstAttrs(values), builder=builder).result

    def ew(self, op: TileOp, operands, dtype, builder=None) -> ir.Value:
        n = operands[0].type.n
        return self.emit(SimtOp.ELEMENTWISE, operands, RegType(dtype, n), simt.EwAttrs(op),
                         builder=builder).result

    def cast(self, x: ir.Value, dtype, builder=None) -> ir.Value:
        return x if x.type.dtype == dtype else self.ew(TileOp.CAST, [x], dtype, builder)

    def splat(self, x: ir.Value, n: int, builder=None) -> ir.Value:
        if x.type.n == n:
            return x
        return self.emit(SimtOp.SPLAT, [x], RegType(x.type.dtype, n), builder=builder).result

    def gather(self, x: ir.Value, idx) -> ir.Value:
        idx = tuple(idx)
        if idx == tuple(range(x.type.n)):
            return x
        return self.emit(SimtOp.GATHER, [x], RegType(x.type.dtype, len(idx)),
                         simt.IndicesAttrs(idx)).result

    def concat(self, xs) -> ir.Value:
        if len(xs) == 1:
            return xs[0]
        n = sum(x.type.n for x in xs)
        return self.emit(SimtOp.CONCAT, xs, RegType(xs[0].type.dtype, n)).result

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key, value):
        self.scopes[-1][key] = value
        return value

    # --- thread geometry and params (all in the prologue) ------------------------------------
    def geo(self, key, make):
        if key not in self.geometry:
            self.geometry[key] = make()
        return self.geometry[key]

    def thread_id(self, src: str, placing: bool = True) -> ir.Value:
        """The thread's ``tid``, ``lane`` or ``warp`` (i32).  Unless ``placing`` is False (a replica
        test), a caller that reads the lane places data by it: every lane bit counts as used
        (``SimtMeta.lane_bits``; ``_bitfield_sum`` records the bits it reads itself)."""
        if placing and src != "warp":
            self.lane_bits = 31
        p = self.prologue
        tid = self.geo("tid", lambda: self.emit(SimtOp.THREAD_ID, [], RegType(I32), builder=p).result)
        if src == "tid":
            return tid
        if src == "lane":
            return self.geo("lane", lambda: self.ew(TileOp.AND, [tid, self.const(I32, [31], p)], I32, p))
        return self.geo("warp", lambda: self.ew(TileOp.SHR, [tid, self.const(I32, [5], p)], I32, p))

    def bitfield_sum(self, terms) -> ir.Value:
        """sum(((lane or warp) >> shift) & mask) * scale) over ``terms``, as one i32 scalar."""
        terms = tuple(t for t in terms if t.bits and t.scale)
        return self.geo(("bits", terms), lambda: self._bitfield_sum(terms))

    def _bitfield_sum(self, terms) -> ir.Value:
        p = self.prologue
        total = None
        for t in terms:
            v = self.thread_id(t.src, placing=False)
            if t.src == "lane":
                self.lane_bits |= ((1 << t.bits) - 1) << t.shift
            if t.shift:
                v = self.ew(TileOp.SHR, [v, self.const(I32, [t.shift], p)], I32, p)
            v = self.ew(TileOp.AND, [v, self.const(I32, [(1 << t.bits) - 1], p)], I32, p)
            if t.scale != 1:
                v = self.ew(TileOp.MUL, [v, self.const(I32, [t.scale], p)], I32, p)
            total = v if total is None else self.ew(TileOp.ADD, [total, v], I32, p)
        return total if total is not None else self.const(I32, [0], p)

    def thread_coord(self, layout: L.Layout, dim: int) -> ir.Value:
        return self.bitfield_sum(layout.terms[dim])

    def thread_linear(self, layout: L.Layout, coefs) -> ir.Value:
        """Thread part of ``sum(coord_d * coefs[d])`` (i32 scalar)."""
        return self.bitfield_sum(L.BitTerm(t.src, t.shift, t.bits, t.scale * c)
                                 for ts, c in zip(layout.terms, coefs) for t in ts)

    def primary_thread(self, layout: L.Layout) -> ir.Value | None:
        """bool: this thread is the first of its replicas (None when the layout has none)."""
        rl, rw = layout.replica_bits("lane"), layout.replica_bits("warp")
        if not rl and not rw:
            return None
        p = self.prologue

        def make():
            zero = self.const(I32, [0], p)
            ok = None
            for src, bits in (("lane", rl), ("warp", rw)):
                if bits:
                    masked = self.ew(TileOp.AND, [self.thread_id(src, placing=False), self.const(I32, [bits], p)], I32, p)
                    test = self.ew(TileOp.EQ, [masked, zero], D.bool_, p)
                    ok = test if ok is None else self.ew(TileOp.AND, [ok, test], D.bool_, p)
            return ok
        return self.geo(("primary", rl, rw), make)

    def describe_params(self) -> None:
        for i, a in enumerate(self.fn.args):
            if isinstance(a.type, ArrayType):
                spec = array_spec(self.fn, a)
                self.add_param(ParamKind.PTR, i, None, a.type.dtype)
                for d in range(a.type.rank):
                    self.add_param(ParamKind.DIM, i, d, D.int64 if spec.large else I32)
                for d in range(a.type.rank):
                    if not (d == a.type.rank - 1 and spec.unit_inner_stride):
                        self.add_param(ParamKind.STRIDE, i, d, D.int64 if spec.large else I32)
            else:
                self.add_param(ParamKind.SCALAR, i, None, a.type.dtype)

    def add_param(self, kind, arg, axis, dtype) -> None:
        self.param_index[(kind, arg, axis)] = len(self.params)
        self.params.append(simt.ParamDesc(kind, arg, axis, dtype))

    def param(self, kind: str, arg: int, axis: int | None = None) -> ir.Value:
        index = self.param_index[(kind, arg, axis)]
        desc = self.params[index]
        rtype = simt.PtrType(desc.dtype) if kind is ParamKind.PTR else RegType(desc.dtype)
        return self.geo(("param", index), lambda: self.emit(
            SimtOp.PARAM, [], rtype, ir.AxisAttrs(index), builder=self.prologue).result)

    def tensor_map(self, arg: int, dtype, box: tuple, swizzle: int) -> ir.Value:
        """The TMA descriptor of array argument ``arg`` for ``box`` and ``swizzle`` (a
        TENSOR_MAP parameter, added on first use)."""
        key = (ParamKind.TENSOR_MAP, arg, (box, swizzle))
        if key not in self.param_index:
            self.param_index[key] = len(self.params)
            self.params.append(simt.ParamDesc(ParamKind.TENSOR_MAP, arg, None, dtype, box, swizzle))
        index = self.param_index[key]
        return self.geo(("param", index), lambda: self.emit(
            SimtOp.PARAM, [], simt.MapType(dtype), ir.AxisAttrs(index), builder=self.prologue).result)

    def alloc_shared(self, size: int, align: int = 16, builder=None) -> tuple[ir.Value, int]:
        buf = self.next_buffer
        self.next_buffer += 1
        base = self.emit(SimtOp.SHARED_ALLOC, [], RegType(I32), simt.AllocAttrs(buf, max(size, 1), align),
                         builder=builder).result
        return base, buf

    def shared_once(self, key, size: int) -> tuple[ir.Value, int]:
        """The buffer ``key`` names, allocated in the prologue by the first caller (loops that
        write and read it share it)."""
        return self.geo(("shared", key), lambda: self.alloc_shared(size, builder=self.prologue))

    # --- values ------------------------------------------------------------------------------
    def layout_of(self, v: ir.Value) -> L.Layout:
        return self.layouts.get(v) or default_layout(v.type, self.num_warps)

    def get(self, v: ir.Value, layout: L.Layout | None = None) -> ir.Value:
        """``v`` in SIMT form, in ``layout`` (its own layout when None) for tiles."""
        if not is_tile(v):
            return self.values[v]
        if v in self.deferred:
            return self.materialize(v, layout or default_layout(v.type, self.num_warps))
        sv, own = self.values[v], self.layouts[v]
        if layout is None or layout == own:
            return sv
        key = ("convert", v, layout)
        return self.lookup(key) or self.remember(key, self.convert(sv, own, layout, v.type.dtype))

    def convert(self, sv, src: L.Layout, dst: L.Layout, dtype) -> ir.Value:
        idx = L.same_elements(src, dst)
        if idx is not None:
            return self.gather(sv, idx)
        strides = rowmajor(src.shape)
        if src.kind is L.LayoutKind.MMA_C and src.rank == 2:
            # rows padded by 16 bytes: the 8 rows an accumulator store touches at once fall in
            # different banks, and 16-byte row chunks stay aligned for vector reads
            strides = (src.shape[1] + 16 // dtype.itemsize, 1)
        return lower_shared.exchange(self, sv, src, strides, dst, strides, dtype)

    def materialize(self, v: ir.Value, layout: L.Layout) -> ir.Value:
        key = ("materialize", v, layout)
        found = self.lookup(key)
        if found is None:
            found = self.remember(key, self._materialize(v.owner, layout))
        return found

    def _materialize(self, o: ir.Operation, layout: L.Layout) -> ir.Value:
        t = o.result.type
        if o.op is TileOp.CONSTANT:
            return self.const(t.dtype, [o.attrs.value] * layout.n)
        if o.op is TileOp.SPLAT or (o.op is TileOp.RESHAPE and not is_tile(o.operands[0])):
            return self.splat(self.get(o.operands[0]), layout.n)
        if o.op is TileOp.ARANGE:
            regs = [o.attrs.value + c[0] for c in layout.regs]
            return self.ew(TileOp.ADD, [self.splat(self.thread_coord(layout, 0), layout.n),
                                        self.const(I32, regs)], I32)
        if o.op is TileOp.BROADCAST:
            return self.broadcast(o, layout)
        if o.op is TileOp.RESHAPE:
            return self.get(o.operands[0], L.unit_dims_changed(layout, o.operands[0].type.shape))
        if o.op is TileOp.TRANS:
            inverse = tuple(sorted(range(len(o.attrs.perm)), key=lambda i: o.attrs.perm[i]))
            return self.get(o.operands[0], L.permuted(layout, inverse))
        assert o.op in ELEMENTWISE_OPS, o.op
        return self.ew(o.op, [self.get(x, layout) for x in o.operands], t.dtype)

    def broadcast(self, o: ir.Operation, dst: L.Layout) -> ir.Value:
        src_v = o.operands[0]
        dims = [d for d, (a, b) in enumerate(zip(src_v.type.shape, dst.shape)) if a != b]
        src = L.collapsed(dst, dims) if src_v in self.deferred else self.layout_of(src_v)
        sv = self.get(src_v, src)

        def zero_dims(c):
            c = c.copy()
            c[..., dims] = 0
            return c
        idx = L.register_map(src, dst, zero_dims)
        if idx is not None:
            return self.gather(sv, idx)
        strides = rowmajor(src.shape)
        dst_strides = tuple(0 if d in dims else s for d, s in enumerate(strides))
        return lower_shared.exchange(self, sv, src, strides, dst, dst_strides, src_v.type.dtype)

    # --- ops -----------------------------------------------------------------------------------
    def block(self, block: ir.Block) -> None:
        for o in block.ops:
            if o.op is TileOp.YIELD:
                continue
            if o.results and any(r in self.deferred for r in o.results) or \
                    any(o in plan.replaced for plan in self.pipelining):
                continue                      # materialised at each use / read from a ring
            outer, self.loc = self.loc, o.loc if o.loc.line else self.loc
            self.lower_op(o)
            self.loc = outer

    def lower_op(self, o: ir.Operation) -> None:
        handler = getattr(self, f"op_{o.op.name}", None)
        if handler is not None:
            handler(o)
        elif o.op in ELEMENTWISE_OPS:
            lay = self.layouts.get(o.result) if is_tile(o.result) else None
            self.values[o.result] = self.ew(o.op, [self.get(x, lay) for x in o.operands],
                                            o.result.type.dtype)
        else:
            raise CompileError(f"'{o.op.name.lower()}' is not supported by the SIMT lowering", o.loc)

    def op_CONSTANT(self, o):
        self.values[o.result] = self.const(o.result.type.dtype, [o.attrs.value])

    def block_id(self, axis: int) -> ir.Value:
        return self.geo(("block_id", axis), lambda: self.emit(
            SimtOp.BLOCK_ID, [], RegType(I32), ir.AxisAttrs(axis), builder=self.prologue).result)

    def grid_dim(self, axis: int) -> ir.Value:
        return self.geo(("grid_dim", axis), lambda: self.emit(
            SimtOp.GRID_DIM, [], RegType(I32), ir.AxisAttrs(axis), builder=self.prologue).result)

    def clusters(self, v: ir.Value) -> ir.Value:
        """A grid-axis-0 count in CTAs as one in clusters (``cluster_rows``: C CTAs per program)."""
        ctas = self.fn.meta.get("cluster_ctas", 1)
        if ctas == 1:
            return v
        return self.ew(TileOp.SHR, [v, self.const(I32, [ctas.bit_length() - 1], self.prologue)], I32, self.prologue)

    def op_CLUSTER_RANK(self, o):
        ctas = o.attrs.ctas
        self.values[o.result] = self.geo("cluster_rank", lambda: self.ew(
            TileOp.AND, [self.block_id(0), self.const(I32, [ctas - 1], self.prologue)], I32, self.prologue))

    def op_CLUSTER_REDUCE(self, o):
        self.values[o.result] = lower_reduce.cluster_reduce(self, o)

    def op_CLUSTER_SOFTMAX(self, o):
        self.values[o.results[0]], self.values[o.results[1]] = lower_reduce.cluster_softmax(self, o)

    def op_PROGRAM_ID(self, o):
        if o.attrs.axis == 0 and self.fn.meta.get("cluster_ctas", 1) > 1:
            self.values[o.result] = self.geo("cluster_id", lambda: self.clusters(self.block_id(0)))
        elif self.grouped_ids and o.attrs.axis < 2:
            self.values[o.result] = self.geo("grouped_ids", self.grouped_program_ids)[o.attrs.axis]
        else:
            self.values[o.result] = self.block_id(o.attrs.axis)

    def grouped_program_ids(self) -> tuple[ir.Value, ir.Value]:
        """(program_id(0), program_id(1)) in grouped order: CTAs launched one after another
        walk ``GROUP_PROGRAMS`` blocks along axis 0 before stepping along axis 1, so a GEMM's concurrent
        CTAs share A row blocks and B column blocks in L2.  A permutation of the grid (programs
        are independent), the identity for a 1-D grid.  32-bit math: a 64-bit division is a
        subroutine call in PTX, and any call makes ptxas serialise wgmma; grids of 2^31 or more
        programs keep the plain order."""
        p, group = self.prologue, GROUP_PROGRAMS

        def op(kind, a, b, dt=I32):
            return self.ew(kind, [a, b], dt, p)
        bx, by, gx, gy = self.block_id(0), self.block_id(1), self.grid_dim(0), self.grid_dim(1)
        size = self.const(I32, [group], p)
        pid = op(TileOp.ADD, op(TileOp.MUL, by, gx), bx)
        per_group = op(TileOp.MUL, size, gy)
        first = op(TileOp.MUL, op(TileOp.FLOORDIV, pid, per_group), size)
        rows = op(TileOp.MINIMUM, op(TileOp.SUB, gx, first), size)
        within = op(TileOp.MOD, pid, per_group)
        pid0 = op(TileOp.ADD, first, op(TileOp.MOD, within, rows))
        pid1 = op(TileOp.FLOORDIV, within, rows)
        wide = op(TileOp.MUL, self.cast(gx, D.int64, p), self.cast(gy, D.int64, p), D.int64)
        plain = op(TileOp.GE, wide, self.const(D.int64, [2**31 // group], p), D.bool_)
        return (self.ew(TileOp.WHERE, [plain, bx, pid0], I32, p),
                self.ew(TileOp.WHERE, [plain, by, pid1], I32, p))

    def op_NUM_PROGRAMS(self, o):
        grid = self.geo(("grid_dim", o.attrs.axis), lambda: self.emit(
            SimtOp.GRID_DIM, [], RegType(I32), o.attrs, builder=self.prologue).result)
        self.values[o.result] = self.geo("clusters", lambda: self.clusters(grid)) if o.attrs.axis == 0 else grid

    def op_DIM(self, o):
        arg = next(i for i, a in enumerate(self.fn.args) if a is o.operands[0])
        self.values[o.result] = self.cast(self.param(ParamKind.DIM, arg, o.attrs.axis), o.result.type.dtype)

    def op_LOAD(self, o):
        if o in self.ring_reads:              # read from a thread-private ring (row_rings)
            ring, slot = self.ring_reads[o]
            self.values[o.result] = ring.read(self, slot)
            return
        self.values[o.result] = lower_memory.load(self, o)

    def op_STORE(self, o):
        lower_memory.store(self, o)

    def op_ATOMIC(self, o):
        self.values[o.result] = lower_memory.atomic(self, o)

    def op_STASH(self, o):
        lower_shared.stash(self, o)

    def op_UNSTASH(self, o):
        self.values[o.result] = lower_shared.unstash(self, o)

    def op_REDUCE(self, o):
        self.values[o.result] = lower_reduce.reduce(self, o)

    def element_coords(self, layout) -> tuple[list, object]:
        """Each register's element coordinates (one i32 vector per dim) and the mask of the
        threads that own them (replicas are off)."""
        coords = [self.ew(TileOp.ADD, [self.splat(self.thread_coord(layout, d), layout.n),
                                       self.const(I32, [c[d] for c in layout.regs])], I32)
                  for d in range(layout.rank)]
        primary = self.primary_thread(layout)
        mask = self.splat(primary, layout.n) if primary is not None else self.const(D.bool_, [True] * layout.n)
        return coords, mask

    def op_PRINT(self, o):
        """One PRINT of every register of the values (in the first one's layout) with its element
        coordinates; replicas stay silent."""
        values = o.operands[3:]
        layout = self.layout_of(values[0])
        coords, mask = self.element_coords(layout)
        attrs = ir.PrintAttrs(o.attrs.prefix, o.attrs.scalar, layout.rank)
        self.emit(SimtOp.PRINT, [self.get(p) for p in o.operands[:3]] + coords + [self.get(v, layout) for v in values]
                  + [mask], None, attrs)

    def op_ASSERT(self, o):
        """An ASSERT whose mask is the registers (of owning threads) where the condition fails."""
        cond = o.operands[3]
        layout = self.layout_of(cond)
        coords, mask = self.element_coords(layout)
        failed = self.ew(TileOp.AND, [mask, self.ew(TileOp.INVERT, [self.get(cond, layout)], D.bool_)], D.bool_)
        attrs = ir.AssertAttrs(o.attrs.msg, o.attrs.scalar, layout.rank)
        self.emit(SimtOp.ASSERT, [self.get(p) for p in o.operands[:3]] + coords + [failed], None, attrs)

    def op_GRID_DEPENDENCY(self, o):
        self.emit(SimtOp.GRID_DEPENDENCY, [], None, o.attrs)

    def op_SCAN(self, o):
        sort = o.attrs.kind == "sort"
        self.values[o.result] = (lower_shared.bitonic_sort if sort else lower_shared.scan)(self, o)

    def op_DOT(self, o):
        cfg = self.dot_plans.config(o)
        if cfg is None:
            self.values[o.result] = lower_shared.dot_fallback(self, o)
        else:
            self.values[o.result] = lower_dot.lower_dot(self, o, cfg, self.staged)

    def op_BROADCAST(self, o):
        self.values[o.result] = self.broadcast(o, self.layouts[o.result])

    def op_RESHAPE(self, o):
        src_v, dst = o.operands[0], self.layouts.get(o.result)
        st = src_v.type.shape if is_tile(src_v) else ()
        merge = dst is not None and len(st) >= 2 and tuple(dst.shape) == tuple(st[:-2]) + (st[-2] * st[-1],)
        split = L.split_last(dst, st[-1]) if merge else None
        # a merge of the last two dims computed in place, register for register: a deferred source
        # is built in that layout; a concrete one holding the same elements (``nibble_operands``'
        # unpacked bytes) is renamed
        if split is not None and (src_v in self.deferred or src_v in self.layouts and min(st[-2:]) > 1
                                  and L.same_elements(self.layouts[src_v], split) is not None):
            self.values[o.result] = self.get(src_v, split)
            return
        src = self.layout_of(src_v)
        sv = self.get(src_v, src)
        if dst is None:                       # a one-element tile to a scalar: every thread has it
            self.values[o.result] = self.gather(sv, [0])
        elif L.unit_dims_changed(src, dst.shape) == dst:
            self.values[o.result] = sv
        else:
            self.values[o.result] = lower_shared.exchange(
                self, sv, src, rowmajor(src.shape), dst, rowmajor(dst.shape), src_v.type.dtype)

    def op_TRANS(self, o):
        src_v, dst, perm = o.operands[0], self.layouts[o.result], o.attrs.perm
        src = self.layout_of(src_v)
        sv = self.get(src_v, src)
        if L.permuted(src, perm) == dst:
            self.values[o.result] = sv
            return
        dst_strides = rowmajor(dst.shape)
        src_strides = [0] * len(perm)
        for i, p in enumerate(perm):
            src_strides[p] = dst_strides[i]
        self.values[o.result] = lower_shared.exchange(self, sv, src, tuple(src_strides), dst,
                                                      dst_strides, src_v.type.dtype)

    # --- control flow ----------------------------------------------------------------------------
    def reg_type(self, v: ir.Value) -> RegType:
        return RegType(v.type.dtype, self.layouts[v].n if is_tile(v) else 1)

    def region(self, tile_block: ir.Block, targets, skip: int = 0, before=None) -> ir.Block:
        """Lower ``tile_block`` into a new SIMT block whose args mirror the tile block's; its
        YIELD converts operand ``skip + i`` to the layout of ``targets[i]``.  ``before(first
        arg)`` emits code at the start of the block (the pipeliner's waits and copies)."""
        out = ir.Block([ir.Value(self.reg_type(a)) for a in tile_block.args])
        outer = self.b
        self.b = ir.Builder(out)
        self.scopes.append({})
        for a, sa in zip(tile_block.args, out.args):
            self.values[a] = sa
        if before is not None:
            before(out.args[0])
        self.tile_blocks.append(tile_block)
        try:
            self.block(tile_block)
            pending = self.take_pending()
            if pending:     # wgmma groups still in flight (wgmma.lower_wgmma): retired here, the wait
                # held at the body's end (ptxas would hoist it above the work it should overlap)
                for a, v in zip(pending, wgmma.wait_group(self, [self.get(a) for a in pending], 0, hold=True)):
                    self.rebind(a, v)
        finally:
            self.tile_blocks.pop()
        ys = tile_block.ops[-1].operands
        converted = [self.get(y) for y in ys[:skip]]
        converted += [self.get(y, self.layouts.get(t)) for y, t in zip(ys[skip:], targets)]
        self.emit(SimtOp.YIELD, converted)
        self.scopes.pop()
        self.b = outer
        return out

    def control(self, o, simt_op, operands, regions) -> None:
        op = self.b.create(simt_op, operands, [self.reg_type(r) for r in o.results], o.attrs, regions, loc=self.loc)
        for r, sr in zip(o.results, op.results):
            self.values[r] = sr

    def op_FOR(self, o):
        plan = self.loop_plans[o]
        for s in plan.staged_before:
            if s.value in self.staged:      # staged already: by a rotated loop's first product
                continue
            self.stage(s.value, lower_dot.stage_registers(self, s.value, self.dot_plans.config(s.dot),
                                                          s.tile, s.align))
        if plan.pipelined:         # (the specialisation promises the rows' alignment: no run-time check)
            pipeline_loads.lower_pipelined_for(self, o, plan)
        elif plan.row_rings:
            row_rings.lower_row_ring_for(self, o, plan)
        else:
            self.plain_for(o)
        for s in plan.staged_before:
            self.unstage(s.value)

    def users(self, v: ir.Value) -> list:
        """The tile ops that read ``v`` anywhere in the function (computed once)."""
        if self._users is None:
            self._users = ir.users(self.fn)
        return self._users.get(v, [])

    def in_flight_after(self, dot: ir.Operation) -> int:
        """wgmma groups DOT ``dot`` leaves pending: its loop's plan, in the pipelined body."""
        return max((plan.in_flight_after(dot) for plan in self.pipelining), default=0)

    def plain_for(self, o):
        region = o.regions[0]
        args = region.args[1:]
        inits = [self.get(x, self.layouts.get(a)) for x, a in zip(o.operands[3:], args)]
        body = self.region(region, args)
        self.control(o, SimtOp.FOR, [self.get(x) for x in o.operands[:3]] + inits, [body])

    def op_WHILE(self, o):
        region = o.regions[0]
        inits = [self.get(x, self.layouts.get(a)) for x, a in zip(o.operands, region.args)]
        body = self.region(region, region.args, skip=1)
        self.control(o, SimtOp.WHILE, inits, [body])

    def op_IF(self, o):
        regions = [self.region(r, o.results) for r in o.regions]
        self.control(o, SimtOp.IF, [self.get(o.operands[0])], regions)

    # --- the function ------------------------------------------------------------------------------
    def run(self) -> ir.Function:
        for i, a in enumerate(self.fn.args):
            if not isinstance(a.type, ArrayType):
                self.values[a] = self.param(ParamKind.SCALAR, i)
        self.block(self.fn.body)
        if any(o.op is SimtOp.LOAD_SHARED_CLUSTER for o in self.b.block.walk()):
            self.emit(SimtOp.CLUSTER_BARRIER, [])   # no CTA leaves while another may still read its shared memory
        body = ir.Block([], self.prologue.block.ops + self.b.block.ops)
        meta = simt.SimtMeta(self.fn.name, self.params, self.num_warps, sorted(self.writes),
                             self.fn.meta.get("loc", ir.UNKNOWN_LOC), self.self_synced)
        meta.lane_bits = self.lane_bits
        meta.tma_loops = self.tma_loops
        meta.cluster_ctas = self.fn.meta.get("cluster_ctas", 1)
        meta.scalar_dots = tuple((o.loc, plan.why_fma) for o, plan in self.dot_plans.items() if plan.why_fma)
        return ir.Function(self.fn.name, body, list(self.fn.arg_names), meta)


def lower_to_simt(fn: ir.Function, num_warps: int) -> ir.Function:
    """The SIMT function of tile function ``fn`` (after ``assign_layouts``)."""
    return Lowering(fn, num_warps).run()
