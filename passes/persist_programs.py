"""Persistent programs with the next program's loads in flight.  A row kernel (one row per
program, straight-line code) exposes each row's load latency: a CTA starts the next row only
when it is done with this one, and holding a second row in registers (``coarsen_programs``)
halves the CTAs an SM holds.  This SIMT pass makes every CTA loop over the programs along grid
axis 0 and copies the next program's rows into shared memory with ``cp.async`` while this one
computes:

    prologue:  cp.async program blockIdx.x's loads into slot 0; commit
    for i in range(trips):              # trips = ceil(grid0 / gridDim.x): the same in every CTA
        pid = blockIdx.x + i * gridDim.x
        cp.async program pid + gridDim.x's loads into slot (i + 1) % 2; commit   (none past grid0)
        wait_group(1)                   # program pid's copies have landed
        the body, with program_id(0) = pid and num_programs(0) = grid0: each staged load reads
        its values back from slot i % 2 (``other`` where its mask is false); writes, prints and
        asserts only when pid < grid0
    wait_group(0)

    persist_programs(fn, budget=SLOT_BYTES) -> fn          stageable_loads(fn) -> list

Every thread copies and reads back only its own bytes (its group ``g`` of the slot at
``slot + (g * threads + tid) * 16``: a warp's 16-byte accesses are consecutive), so no barrier
orders the slots: the copy into a slot is issued after the same thread's last read of it has
been used.  A load is staged when its offsets and mask depend on ``program_id(0)`` through
address arithmetic only and its groups are 16 bytes; loads that do not depend on the program
(a layernorm's weights) stay in the body.  A copy reads only a group's elements in bounds and
zero-fills the rest: the lowering's mask of a load grouped along its last dim is the product of
its bounds checks, and a group starts at a multiple of its size, so ``idx >= 0`` holds for all of
a group or none and ``idx < n`` for a prefix of it; the in-bounds elements are a prefix whose
length the copy is given.  The launch runs ``min(grid0, CTAs the device holds at
once)`` CTAs (the emulator: half of ``grid0``, so that its loop runs) and passes ``grid0`` as one
more parameter (``backends.launch_geometry``).  Programs run in no set order on a GPU, so a
later program's loads may pass an earlier one's stores.  Only straight-line kernels without
tensor cores or async copies, and not packed, are made persistent.
"""
from __future__ import annotations

import math

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.abi import ParamDesc, ParamKind
from tilejit.ir import TileOp
from tilejit.passes.coarsen_programs import _AHEAD, _REFUSED, _WRITES
from tilejit.simt import RegType, SimtOp

I32 = D.int32
COPY = 16                       # bytes of one cp.async
# Both slots of a CTA take at most this many bytes of shared memory (two CTAs per SM keep room).
SLOT_BYTES = 96 * 1024
# The switch (benchmarks/switch_probe.py): True applies the pass where ``worth_it`` holds, "always"
# wherever it can, False nowhere.
PERSIST = True
# Read a load whose ``other`` is not zero again after a cross-warp exchange (True), or keep its
# first read in registers (False: its select per element is paid once; softmax's -inf)
REREAD_OTHER = True
# Threads per SM that a persistent kernel asks ptxas to fit (its ``min_ctas_per_sm``; None: no
# hint beyond the pipeline's).  Without one, ptxas (nvJitLink 13.5) gives the loop 16-47 more
# registers than the plain kernel, which it trades for occupancy.
THREADS_PER_SM = None
_PURE = tuple(op for op in _AHEAD if op not in (SimtOp.LOAD_GLOBAL, SimtOp.SHARED_ALLOC))


def _slice(ops: list, roots: list) -> list | None:
    """The ops of ``ops`` (top level, in order) that ``roots`` depend on; None when one of them
    is not address arithmetic."""
    made = {r: o for o in ops for r in o.results}
    need, seen = list(roots), set()
    while need:
        v = need.pop()
        o = made.get(v)
        if o is None or o in seen:
            continue
        if o.op not in _PURE:
            return None
        seen.add(o)
        need += o.operands
    return [o for o in ops if o in seen]


def _reads_program(sl: list) -> bool:
    return any(o.op in (SimtOp.BLOCK_ID, SimtOp.GRID_DIM) and o.attrs.axis == 0 for o in sl)


def persistable(fn: ir.Function) -> bool:
    """Code without loops, tensor cores or async copies (IFs are fine), not packed or
    coarsened."""
    return (fn.meta.programs_per_cta == 1 and not fn.meta.serial_programs
            and not any(o.op in _REFUSED and o.op is not SimtOp.IF for o in fn.walk()))


def _rewrite(block: ir.Block, program: dict, real, loc) -> None:
    """In place: uses of the program's id and count become the loop's (``program``), and every
    write, print and assert of ``block`` (and the blocks inside it) holds only when ``real``."""
    out = []
    for o in block.ops:
        o.operands = [program.get(x, x) for x in o.operands]
        for r in o.regions:
            _rewrite(r, program, real, loc)
        if o.op in _WRITES or o.op in (SimtOp.PRINT, SimtOp.ASSERT):
            at = 3 if o.op in _WRITES else len(o.operands) - 1
            mask = o.operands[at]
            n = mask.type.n
            if n > 1:
                splat = ir.Operation(SimtOp.SPLAT, [real], [RegType(D.bool_, n)], None, loc=loc)
                out.append(splat)
            both = ir.Operation(SimtOp.ELEMENTWISE, [mask, splat.result if n > 1 else real], [mask.type],
                                simt.EwAttrs(TileOp.AND), loc=loc)
            out.append(both)
            o.operands[at] = both.result
        out.append(o)
    block.ops[:] = out


def column_bound(defs: dict, mask, per: int):
    """(idx, lim) when ``mask`` (a load's; ``defs``: value -> its op) is an AND of terms one of which
    is ``idx < lim`` with ``idx = SPLAT(start) + CONSTANT`` consecutive inside each group of
    ``per`` registers (the lowering's bounds test of the last dim); else None."""
    todo = [mask]
    while todo:
        o = defs.get(todo.pop())
        if o is None or o.op is not SimtOp.ELEMENTWISE:
            continue
        if o.attrs.op is TileOp.AND:
            todo += o.operands
            continue
        if o.attrs.op is not TileOp.LT:
            continue
        idx, lim = o.operands
        add = defs.get(idx)
        if add is None or add.op is not SimtOp.ELEMENTWISE or add.attrs.op is not TileOp.ADD:
            continue
        kinds = [defs.get(x) for x in add.operands]
        consts = [k for k in kinds if k is not None and k.op is SimtOp.CONSTANT]
        if len(consts) == 1 and all(k is not None and k.op in (SimtOp.CONSTANT, SimtOp.SPLAT) for k in kinds):
            c = consts[0].attrs.values
            if all(c[g + j] == c[g] + j for g in range(0, len(c), per) for j in range(per)):
                return idx, lim
    return None



def stageable_loads(fn: ir.Function, of_program: bool = True) -> list:
    """The top-level LOAD_GLOBAL ops of ``fn`` whose 16-byte groups can be copied ahead (their mask
    bounds the last dim, ``column_bound``): those whose address depends on ``program_id(0)``
    (``of_program``), else those whose does not."""
    ops, out = fn.body.ops, []
    defs = {r: o for o in ops for r in o.results}
    for o in ops:
        if o.op is not SimtOp.LOAD_GLOBAL or len(o.operands) != 3:
            continue
        dt, n = o.result.type.dtype, o.result.type.n
        per = COPY // dt.itemsize if dt.itemsize <= COPY else 0
        # whole 16-byte groups (the lowering never groups more), bounded by the last dim's test
        if not per or o.attrs.vec != per or n % per or dt.bits < 8 or column_bound(defs, o.operands[2], per) is None:
            continue
        sl = _slice(ops, o.operands[1:3])
        if sl is not None and _reads_program(sl) == of_program:
            out.append(o)
    return out


def worth_it(loads: list, fixed: list) -> bool:
    """Where the persistent loop was measured faster: kernels that also load tiles every program
    reads alike (``fixed``: a norm's weight and bias, copied once per CTA instead of re-read
    behind each row), two of them or one with 16-bit rows.  H200, 2026-12-04, 2**26 elements,
    ratio to copy at 1K / 4K / 8K / 16K columns, persistent (``PERSIST="always"``) against plain
    in one run (``scripts/persist_probe.sh``): layernorm bf16 0.91 / 0.79 / 0.83 / 0.56 against
    0.77 / 0.63 / 0.60 / 0.56, fp32 0.94 / 0.89 / 0.87 / 0.77 against 0.94 / 0.77 / 0.87 / 0.77;
    RMSNorm bf16 0.92 / 0.89 / 0.89 / 0.68 against 0.94 / 0.84 / 0.79 / 0.69 (16K: chunk loops,
    never persistent).  Not taken: RMSNorm fp32 0.93 / 0.90 / 0.91 against 0.99 / 0.98 / 0.97;
    softmax bf16 0.77 / 0.74 / 0.66 against 0.96 / 0.91 / 0.87, fp32 0.86 / 0.84 / 0.84 against
    0.99 / 0.98 / 0.96, although its loop has fewer registers (70 against 80 at bf16 4K) and 9%
    more instructions than the plain kernel: not yet profiled."""
    return len(fixed) >= 2 or (len(fixed) == 1 and all(o.result.type.dtype.bits == 16 for o in loads))


def persist_programs(fn: ir.Function, budget: int = SLOT_BYTES, always: bool | None = None) -> ir.Function:
    """``fn`` as a persistent loop over its programs (see the module docstring); unchanged when
    it has nothing to stage, its slots would take more than ``budget`` bytes, or (unless
    ``always``, default: ``PERSIST == "always"``) ``worth_it`` does not hold."""
    if not PERSIST or not persistable(fn):
        return fn
    loads, fixed = stageable_loads(fn), stageable_loads(fn, of_program=False)
    if not (PERSIST == "always" if always is None else always) and not worth_it(loads, fixed):
        return fn
    threads = fn.meta.cta_threads

    def size(group):
        return sum(o.result.type.n * o.result.type.dtype.itemsize for o in group) * threads
    slot = size(loads)
    if not loads or 2 * slot + size(fixed) > budget:
        return fn
    return _Persist(fn, loads, fixed, threads, slot).run()


class _Persist:
    """The rewrite (one instance per kernel): ``loads`` are copied per program into a 2-slot
    ring, ``fixed`` (program-invariant loads) once per CTA; the body reads each value back from
    shared memory where it is used, and again after each cross-warp exchange, so that no
    loaded tile stays in registers across a reduction."""

    def __init__(self, fn, loads, fixed, threads, slot):
        self.fn, self.loads, self.fixed, self.threads, self.slot = fn, loads, fixed, threads, slot
        self.loc = fn.meta.loc
        self.synced = fn.meta.self_synced_ops
        self.first = {}                         # load -> index of its first 16-byte group in its region
        for group in (loads, fixed):
            groups = 0
            for o in group:
                self.first[o] = groups
                groups += o.result.type.n * o.result.type.dtype.itemsize // COPY
        self.defs = {r: o for o in fn.body.ops for r in o.results}
        self.buffer = 1 + max((o.attrs.buffer for o in fn.walk() if o.op is SimtOp.SHARED_ALLOC), default=-1)

    # --- op builders
    def emit(self, block, op, operands, attrs=None, dtype=I32, n=1):
        o = ir.Operation(op, operands, [RegType(dtype, n)] if dtype is not None else [], attrs, loc=self.loc)
        block.append(o)
        return o.result if o.results else None

    def const(self, block, values, dtype=I32):
        return self.emit(block, SimtOp.CONSTANT, [], simt.VectorConstAttrs(tuple(values)), dtype, len(values))

    def ew(self, block, op, xs, dtype=I32):
        return self.emit(block, SimtOp.ELEMENTWISE, xs, simt.EwAttrs(op), dtype, xs[0].type.n)

    def splat(self, block, x, n):
        return self.emit(block, SimtOp.SPLAT, [x], None, x.type.dtype, n) if n > 1 else x

    def in_bounds(self, block, mask, per: int, values: dict | None = None, original=None):
        """Per 16-byte group of ``mask``'s registers: how many are true (i32, one per group).
        ``original``: the load's own mask that ``mask`` was cloned from (``values``: the clones).
        The mask bounds the last dim (``column_bound``, checked by ``stageable_loads``), so a
        group's count is ``min(lim - idx, per)`` at its first element when that one is in bounds
        (the rest are a prefix): four ops per group."""
        n = mask.type.n
        starts = simt.IndicesAttrs(tuple(range(0, n, per)))
        idx, lim = ((values or {}).get(x, x) for x in column_bound(self.defs, original if original is not None
                                                                    else mask, per))
        dt = idx.type.dtype
        first = self.emit(block, SimtOp.GATHER, [mask], starts, D.bool_, n // per)
        room = self.ew(block, TileOp.SUB, [self.emit(block, SimtOp.GATHER, [lim], starts, dt, n // per),
                                           self.emit(block, SimtOp.GATHER, [idx], starts, dt, n // per)], dt)
        room = self.ew(block, TileOp.MINIMUM, [room, self.const(block, [per] * (n // per), dt)], dt)
        if dt != I32:
            room = self.ew(block, TileOp.CAST, [room], I32)
        return self.ew(block, TileOp.WHERE, [first, room, self.const(block, [0] * (n // per))])

    # --- copies
    def copy(self, block, loads, pid, at, real) -> None:
        """cp.async ``loads`` (of program ``pid``) into the region at byte ``at`` (+ this thread's
        16 bytes); nothing is read for a program past the grid (``real`` false) and only the
        in-bounds prefix of a group (see the module docstring)."""
        values: dict = {}
        for o in _slice(self.fn.body.ops, [x for ld in loads for x in ld.operands[:3]]):
            if o.op in (SimtOp.BLOCK_ID, SimtOp.GRID_DIM) and o.attrs.axis == 0:
                values[o.result] = pid if o.op is SimtOp.BLOCK_ID else self.count
                continue
            new = ir.Operation(o.op, [values.get(x, x) for x in o.operands], [r.type for r in o.results],
                               o.attrs, [], o.loc)
            values[o.result] = new.result
            block.append(new)
        where = self.ew(block, TileOp.ADD, [self.mine, at])
        for o in loads:
            dt, n = o.result.type.dtype, o.result.type.n
            per, k = COPY // dt.itemsize, n * dt.itemsize // COPY
            ptr, offs, mask = (values.get(x, x) for x in o.operands[:3])
            src = self.ew(block, TileOp.MUL, [self.in_bounds(block, mask, per, values, o.operands[2]),
                                              self.const(block, [dt.itemsize] * k)])
            if real is not None:
                src = self.ew(block, TileOp.WHERE, [self.splat(block, real, k), src, self.const(block, [0] * k)])
            starts = self.emit(block, SimtOp.GATHER, [offs], simt.IndicesAttrs(tuple(range(0, n, per))), offs.type.dtype, k)
            # a copy that reads nothing (a row past the array) from the array's first element: its
            # address stays 16-byte aligned whatever the unit dims' strides (cp.async requires it)
            reads = self.ew(block, TileOp.GT, [src, self.const(block, [0] * k)], D.bool_)
            starts = self.ew(block, TileOp.WHERE, [reads, starts, self.const(block, [0] * k, offs.type.dtype)],
                             offs.type.dtype)
            addr = self.ew(block, TileOp.ADD, [self.splat(block, where, k),
                                               self.const(block, [(self.first[o] + g) * self.threads * COPY for g in range(k)])])
            cp = ir.Operation(SimtOp.CP_ASYNC, [ptr, starts, addr, src], [], simt.SharedAttrs(1, self.buffer), loc=self.loc)
            self.synced.add(cp)
            block.append(cp)

    # --- reads
    def read(self, block, o, base):
        """``o``'s values from its copy at ``base`` (+ this thread's bytes), ``other`` where its mask is false."""
        dt, n = o.result.type.dtype, o.result.type.n
        per = COPY // dt.itemsize
        within = [(self.first[o] + r // per) * self.threads * COPY + (r % per) * dt.itemsize for r in range(n)]
        addr = self.ew(block, TileOp.ADD, [self.splat(block, base, n), self.const(block, within)])
        if o.attrs.other == 0 and math.copysign(1, o.attrs.other) > 0:    # what copies zero-fill
            value = self.emit(block, SimtOp.LOAD_SHARED, [addr], simt.SharedAttrs(per, self.buffer), dt, n)
            self.synced.add(block[-1])
            return value
        if o not in self.counts:    # element r is in bounds when r < its group's count: one integer
            self.counts[o] = self.in_bounds(block, o.operands[2], per)      # per group stays live
        counts = self.emit(block, SimtOp.GATHER, [self.counts[o]], simt.IndicesAttrs(tuple(r // per for r in range(n))),
                           I32, n)
        keep = self.ew(block, TileOp.LT, [self.const(block, [r % per for r in range(n)]), counts], D.bool_)
        # a masked read: one branch skips the selects when the thread's groups are all in bounds
        value = self.emit(block, SimtOp.LOAD_SHARED, [addr, keep],
                          simt.MaskedSharedAttrs(per, self.buffer, o.attrs.other), dt, n)
        self.synced.add(block[-1])
        return value

    def body_ops(self, base_of: dict) -> list:
        """The body with each copied load read back where it is used: again after each shared
        access (a cross-warp exchange, so a barrier) since the last read, and through a CAST of it."""
        remat: dict = {}            # value -> (load, casts applied: tuple of (attrs, type))
        cache: dict = {}            # value -> (read value, epoch)
        out, epoch = [], 0

        def need(x):
            load, casts = remat[x]
            got = cache.get(x)
            zero = load.attrs.other == 0 and math.copysign(1, load.attrs.other) > 0
            if got is None or (got[1] != epoch and (zero or REREAD_OTHER)):
                v = self.read(out, load, base_of[load])
                for attrs, type_ in casts:
                    v = self.emit(out, SimtOp.ELEMENTWISE, [v], attrs, type_.dtype, type_.n)
                cache[x] = got = (v, epoch)
            return got[0]

        def used(o) -> set:
            found = {x for x in o.operands if x in remat}
            for r in o.regions:
                for inner in r.ops:
                    found |= used(inner)
            return found

        def substitute(o, m) -> None:
            o.operands = [m.get(x, x) for x in o.operands]
            for r in o.regions:
                for inner in r.ops:
                    substitute(inner, m)

        def touches_shared(o) -> bool:
            return o.op in (SimtOp.LOAD_SHARED, SimtOp.STORE_SHARED) or any(
                touches_shared(inner) for r in o.regions for inner in r.ops)

        for o in self.fn.body.ops:
            if o in base_of:
                remat[o.result] = (o, ())
                continue
            if (o.op is SimtOp.ELEMENTWISE and o.attrs.op is TileOp.CAST and len(o.operands) == 1
                    and o.operands[0] in remat):
                load, casts = remat[o.operands[0]]
                remat[o.result] = (load, casts + ((o.attrs, o.result.type),))
                continue
            wanted = used(o)
            if wanted:
                substitute(o, {x: need(x) for x in wanted})
            out.append(o)
            if touches_shared(o):
                epoch += 1
        return out

    def run(self) -> ir.Function:
        fn, loc, head = self.fn, self.loc, []
        emit, const, ew = self.emit, self.const, self.ew
        self.counts = {}
        fn.meta.params = list(fn.meta.params) + [ParamDesc(ParamKind.SCALAR, len(fn.arg_names), None, I32)]
        self.count = emit(head, SimtOp.PARAM, [], ir.AxisAttrs(len(fn.meta.params) - 1))
        cta = emit(head, SimtOp.BLOCK_ID, [], ir.AxisAttrs(0))
        ctas = emit(head, SimtOp.GRID_DIM, [], ir.AxisAttrs(0))
        trips = ew(head, TileOp.FLOORDIV, [ew(head, TileOp.SUB, [ew(head, TileOp.ADD, [self.count, ctas]),
                                                                 const(head, [1])]), ctas])
        fixed_bytes = sum(o.result.type.n * o.result.type.dtype.itemsize for o in self.fixed) * self.threads
        base = emit(head, SimtOp.SHARED_ALLOC, [], simt.AllocAttrs(self.buffer, 2 * self.slot + fixed_bytes, COPY))
        tid = emit(head, SimtOp.THREAD_ID, [])
        self.mine = ew(head, TileOp.ADD, [base, ew(head, TileOp.MUL, [tid, const(head, [COPY])])])
        for o in fn.body.ops:
            if o.op is SimtOp.THREAD_ID:    # read in the loop: LLVM would hoist every column index and
                o.attrs = simt.VolatileAttrs(True)      # mask computed from it and hold them in registers
        fixed_at = const(head, [2 * self.slot])
        if self.fixed:                      # once per CTA, landing with the first program's rows
            self.copy(head, self.fixed, cta, fixed_at, None)
        self.copy(head, self.loads, cta, const(head, [0]), ew(head, TileOp.LT, [cta, self.count], D.bool_))
        head.append(ir.Operation(SimtOp.CP_ASYNC_COMMIT, loc=loc))
        body = ir.Block([ir.Value(RegType(I32, 1), "i")], [])
        ops = body.ops
        i = body.args[0]
        pid = ew(ops, TileOp.ADD, [cta, ew(ops, TileOp.MUL, [i, ctas])])
        cur = ew(ops, TileOp.MUL, [ew(ops, TileOp.AND, [i, const(ops, [1])]), const(ops, [self.slot])])
        nxt = ew(ops, TileOp.ADD, [pid, ctas])
        self.copy(ops, self.loads, nxt, ew(ops, TileOp.SUB, [const(ops, [self.slot]), cur]),
                  ew(ops, TileOp.LT, [nxt, self.count], D.bool_))
        ops.append(ir.Operation(SimtOp.CP_ASYNC_COMMIT, loc=loc))
        ops.append(ir.Operation(SimtOp.CP_ASYNC_WAIT, attrs=simt.WaitAttrs(1), loc=loc))
        real = ew(ops, TileOp.LT, [pid, self.count], D.bool_)
        here = ew(ops, TileOp.ADD, [self.mine, cur])
        there = ew(ops, TileOp.ADD, [self.mine, fixed_at])
        base_of = {o: here for o in self.loads} | {o: there for o in self.fixed}
        program = {}
        kept = []
        for o in self.body_ops(base_of):
            if o.op in (SimtOp.BLOCK_ID, SimtOp.GRID_DIM) and o.attrs.axis == 0:
                program[o.result] = pid if o.op is SimtOp.BLOCK_ID else self.count
            else:
                kept.append(o)
        rest = ir.Block([], kept)
        _rewrite(rest, program, real, loc)
        ops += rest.ops
        ops.append(ir.Operation(SimtOp.YIELD, loc=loc))
        loop = ir.Operation(SimtOp.FOR, [const(head, [0]), trips, const(head, [1])], [], None, [body], loc=loc)
        fn.body.ops = head + [loop, ir.Operation(SimtOp.CP_ASYNC_WAIT, attrs=simt.WaitAttrs(0), loc=loc)]
        fn.meta.persistent = True
        return fn
