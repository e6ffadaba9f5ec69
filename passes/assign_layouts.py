"""Layout assignment: pick a distributed layout for every tile value of a tile-IR function.

Anchors are memory ops (a load gets the blocked layout its array's contiguity and alignment
allow) and reductions (their result lives in the slice of their operand's layout, so a
keepdims result broadcasts back without moving data).  Elementwise ops take an operand's
layout; transposes and unit-dim reshapes keep data where it is (permuted / re-dimmed layouts).

A tile loaded only to be broadcast into an elementwise op (a bias row) is loaded straight in
the broadcast-collapsed layout of that op (``pin_broadcast_loads``), so the broadcast is free.

Values built only from constants, splats and aranges are *deferred*: they have no layout of
their own and lowering materialises them directly in whatever layout each use wants, so
``zeros`` / ``arange`` masks never cost a conversion.

Result, in ``fn.meta``: ``"layouts"`` {tile Value: Layout} for every non-deferred tile value
(region arguments included) and ``"deferred"`` (a set of Values).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import ir
from tilejit.ir import ELEMENTWISE_OPS, TileOp, TileType
from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML
from tilejit.specs import ArraySpec

DEFERRED_OPS = frozenset({TileOp.CONSTANT, TileOp.SPLAT, TileOp.ARANGE})
# rounds of moving loop-carried tiles to their yielded layout (each can change what the body yields)
CARRIED_ROUNDS = 3


def is_tile(v: ir.Value) -> bool:
    return isinstance(v.type, TileType) and v.type.shape != ()


def array_spec(fn: ir.Function, array: ir.Value) -> ArraySpec:
    """The specialisation of array argument ``array`` (conservative when none was recorded)."""
    index = next(i for i, a in enumerate(fn.args) if a is array)
    specs = fn.meta.get("specs") or []
    if index < len(specs) and isinstance(specs[index], ArraySpec):
        return specs[index]
    return ArraySpec(array.type.dtype, array.type.rank, unit_inner_stride=False, aligned16=False,
                     large=True, tma=False)


def memory_layout(shape, spec: ArraySpec, num_warps: int) -> L.Layout:
    """The layout for moving a tile to/from an array: 16 bytes per thread along a unit-stride
    last dim (one vector access each), one element per thread otherwise."""
    item = spec.dtype.itemsize
    return L.default_blocked(shape, item, num_warps, 16 if spec.unit_inner_stride else item)


def default_layout(t: TileType, num_warps: int) -> L.Layout:
    return L.default_blocked(t.shape, t.dtype.itemsize, num_warps)


class LayoutAssigner:
    def __init__(self, fn: ir.Function, num_warps: int):
        self.fn, self.num_warps = fn, num_warps
        self.dot_plans = fn.meta["dot_plans"]          # DOT -> plans.DotPlan (passes.plan_dots)
        self.layouts: dict[ir.Value, L.Layout] = {}
        self.deferred: set[ir.Value] = set()
        self.slice_parent: dict[L.Layout, L.Layout] = {}   # keepdims slice -> the reduced layout
        self.pinned: dict[ir.Value, L.Layout] = {}          # set by pin_broadcast_loads

    def set(self, v: ir.Value, layout: L.Layout | None) -> None:
        """Record ``v``'s layout; None marks it deferred.  A pinned layout always wins."""
        layout = self.pinned.get(v, layout)
        if layout is None:
            self.layouts.pop(v, None)
            self.deferred.add(v)
        else:
            self.deferred.discard(v)
            self.layouts[v] = layout

    def layout_or_default(self, v: ir.Value) -> L.Layout:
        return self.layouts.get(v) or default_layout(v.type, self.num_warps)

    def block(self, block: ir.Block) -> None:
        for o in block.ops:
            handler = getattr(self, f"op_{o.op.name}", None)
            if handler is not None:
                handler(o)
            elif o.op in ELEMENTWISE_OPS:
                self.elementwise(o)
            elif o.op in DEFERRED_OPS and o.results and is_tile(o.result):
                self.set(o.result, None)

    # --- value ops ---------------------------------------------------------------------------
    def elementwise(self, o: ir.Operation) -> None:
        if not is_tile(o.result):
            return
        found = [self.layouts[x] for x in o.operands if x in self.layouts]
        if not found:
            self.set(o.result, None)
            return
        blocked = [x for x in found if x.kind is L.LayoutKind.BLOCKED]
        self.set(o.result, (blocked or found)[0])

    def op_LOAD(self, o: ir.Operation) -> None:
        spec = array_spec(self.fn, o.operands[0])
        self.set(o.result, memory_layout(o.result.type.shape, spec, self.num_warps))

    def op_UNSTASH(self, o: ir.Operation) -> None:
        # the layout of the loads whose chunks STASH kept: each thread reads back its own bytes
        self.set(o.result, L.default_blocked(o.result.type.shape, o.result.type.dtype.itemsize, self.num_warps))

    def op_CLUSTER_REDUCE(self, o: ir.Operation) -> None:
        for r in o.results:             # each thread combines the elements it holds
            if is_tile(r):
                self.set(r, self.layout_or_default(o.operands[0]))

    op_CLUSTER_SOFTMAX = op_CLUSTER_REDUCE

    def op_ATOMIC(self, o: ir.Operation) -> None:
        # one element per access (atomics are not vectorised), neighbouring lanes on neighbours
        item = o.result.type.dtype.itemsize
        self.set(o.result, L.default_blocked(o.result.type.shape, item, self.num_warps, item))

    def op_SCAN(self, o: ir.Operation) -> None:
        self.set(o.result, self.layout_or_default(o.operands[0]))

    def op_REDUCE(self, o: ir.Operation) -> None:
        if not is_tile(o.result):
            return
        a = o.attrs
        src = self.layout_or_default(o.operands[0])
        out = L.sliced(src, a.axis, a.keepdims)
        if a.keepdims:
            self.slice_parent[out] = src
        self.set(o.result, out)

    def op_BROADCAST(self, o: ir.Operation) -> None:
        src = o.operands[0]
        if src not in self.layouts:
            self.set(o.result, None)
            return
        parent = self.slice_parent.get(self.layouts[src])
        if parent is not None and parent.shape == o.result.type.shape:
            self.set(o.result, parent)
        else:
            # materialised in each user's layout: a row vector broadcast into an accumulator
            # lands in the accumulator's layout (in registers when the rows match)
            self.set(o.result, None)

    def op_RESHAPE(self, o: ir.Operation) -> None:
        src = o.operands[0]
        if not is_tile(o.result):
            return
        if src not in self.layouts:
            # deferred unless the reshape moves elements (then its source must be concrete)
            ok = not is_tile(src) or L.unit_dims_changed(
                default_layout(src.type, self.num_warps), o.result.type.shape) is not None
            merged = None if ok else self.merged_from_leaves(src, o.result.type.shape)
            self.set(o.result, None if ok else merged or default_layout(o.result.type, self.num_warps))
            return
        moved = L.unit_dims_changed(self.layouts[src], o.result.type.shape)
        self.set(o.result, moved or default_layout(o.result.type, self.num_warps))

    def merged_from_leaves(self, src: ir.Value, shape) -> L.Layout | None:
        """For ``reshape(src)`` that merges ``src``'s last two dims ``(..., n, r) -> (..., n*r)``
        with ``src`` deferred (``tj.unpack``'s interleave: a WHERE of two broadcast ``(..., n, 1)``
        tiles): the merged layout of a concrete ``(..., n, 1)`` tile the deferred ops read
        (``expanded_last`` then ``merged_last``), so that the broadcasts, the WHERE and the
        reshape all stay inside each thread; None when there is no such tile."""
        st = src.type.shape
        if len(st) < 2 or tuple(shape) != tuple(st[:-2]) + (st[-2] * st[-1],):
            return None
        todo, seen = [src], set()
        while todo:
            v = todo.pop()
            if v in seen or not is_tile(v):
                continue
            seen.add(v)
            if v in self.layouts:
                lay = self.layouts[v]
                if tuple(lay.shape) == tuple(st[:-1]) + (1,):
                    grown = L.expanded_last(lay, st[-1])
                    if grown is not None:
                        return L.merged_last(grown)
                continue
            o = v.owner
            if o is not None and (o.op in ELEMENTWISE_OPS or o.op is TileOp.BROADCAST):
                todo += o.operands
        return None

    def op_TRANS(self, o: ir.Operation) -> None:
        src = o.operands[0]
        if src not in self.layouts:
            self.set(o.result, None)
            return
        self.set(o.result, L.permuted(self.layouts[src], o.attrs.perm))

    def op_DOT(self, o: ir.Operation) -> None:
        cfg = self.dot_plans.config(o)            # tensor cores: the mma accumulator layout
        self.set(o.result, cfg.acc_layout if cfg else default_layout(o.result.type, self.num_warps))

    # --- control flow ------------------------------------------------------------------------
    def carried(self, args, inits, region: ir.Block, yields_of) -> None:
        """Region args take the layout their yielded value gets (assigned with the init's layout
        first, or the default where the init is deferred), and the region is assigned again
        with them: a loop-carried tile whose init has another layout (a product computed before
        the loop by another engine, a load) is converted once before the loop rather than at
        every iteration's yield."""
        pending = []
        for a, init in zip(args, inits):
            if is_tile(a):
                self.set(a, self.layouts.get(init))
                if init not in self.layouts:
                    pending.append(a)
        self.block(region)
        yields = dict(zip(args, yields_of(region)))
        for a in pending:
            self.set(a, self.layouts.get(yields[a]) or default_layout(a.type, self.num_warps))
        if pending:
            self.block(region)
        for _ in range(CARRIED_ROUNDS):     # the init is converted once, not the yield every iteration
            moved = [a for a in args if is_tile(a) and self.layouts.get(yields[a]) is not None
                     and self.layouts[yields[a]] != self.layouts[a]]
            if not moved:
                break
            for a in moved:
                self.set(a, self.layouts[yields[a]])
            self.block(region)

    def op_FOR(self, o: ir.Operation) -> None:
        region = o.regions[0]
        self.carried(region.args[1:], o.operands[3:], region, lambda r: r.ops[-1].operands)
        for res, a in zip(o.results, region.args[1:]):
            if is_tile(res):
                self.set(res, self.layouts[a])

    def op_WHILE(self, o: ir.Operation) -> None:
        region = o.regions[0]
        self.carried(region.args, o.operands, region, lambda r: r.ops[-1].operands[1:])
        for res, a in zip(o.results, region.args):
            if is_tile(res):
                self.set(res, self.layouts[a])

    def op_IF(self, o: ir.Operation) -> None:
        for region in o.regions:
            self.block(region)
        for i, res in enumerate(o.results):
            if is_tile(res):
                found = [self.layouts.get(r.ops[-1].operands[i]) for r in o.regions]
                found = [x for x in found if x is not None]
                self.set(res, found[0] if found else default_layout(res.type, self.num_warps))


def carried_yields(fn: ir.Function) -> dict:
    """Each FOR's carried tile -> the value its body yields for it."""
    return {a: y for o in fn.walk() if o.op is TileOp.FOR
            for a, y in zip(o.regions[0].args[1:], o.regions[0].ops[-1].operands)}


def source_dot(v: ir.Value, shape, carried: dict | None = None) -> ir.Operation | None:
    """The DOT whose accumulator ``v`` is computed from elementwise (through operands of the same
    shape; row vectors broadcast in from the side do not count), or None.  With ``carried``
    (``carried_yields``), through a loop-carried tile to what the loop yields for it (a product
    computed one iteration ahead: ``rotate_products``), and from a loop's result to what its body
    yields for it (the product a loop's last trip leaves for after it: ``defer_products``)."""
    seen = set()
    stack = [v]
    while stack:
        x = stack.pop()
        o = x.owner
        if x in seen or x.type.shape != shape:
            continue
        seen.add(x)
        if o is None:
            if carried and x in carried:
                stack.append(carried[x])
            continue
        if o.op is TileOp.DOT:
            return o
        if o.op in ELEMENTWISE_OPS:
            stack.extend(o.operands)
        elif o.op is TileOp.FOR and carried:      # a loop's result: what its body yields for it
            stack.append(o.regions[0].ops[-1].operands[o.results.index(x)])
        elif o.op is TileOp.IF:           # e.g. a mask skipped on uniform blocks (uniform_masks)
            i = o.results.index(x)
            stack.extend(r.ops[-1].operands[i] for r in o.regions)
    return None


def assign_layouts(fn: ir.Function, num_warps: int) -> ir.Function:
    """Fill ``fn.meta["layouts"]`` and ``fn.meta["deferred"]`` (see the module docstring)."""
    assigner = LayoutAssigner(fn, num_warps)
    for a in fn.args:
        if is_tile(a):
            assigner.set(a, default_layout(a.type, num_warps))
    assigner.block(fn.body)
    from tilejit.passes.nibble_operands import pin_nibble_operands
    uses = _Uses.of_function(fn)

    def pin_row(v, lay, found):          # a row broadcast into a nibble DOT's B (a zero point per column)
        return _pin_source(v, lay, uses, assigner, found)
    if pin_nibble_operands(fn, assigner, pin_row) | pin_broadcast_loads(fn, assigner, uses) | pin_dmma_operands(fn, assigner, uses):
        assigner.block(fn.body)
    fn.meta["layouts"] = assigner.layouts
    fn.meta["deferred"] = assigner.deferred
    return fn


def pin_broadcast_loads(fn: ir.Function, assigner: LayoutAssigner, uses: _Uses) -> bool:
    """A tile loaded only to be (cast, reshaped, combined with other such tiles and) broadcast
    into one elementwise op (a bias row, a column of scales, a row scale times a block's scale)
    is loaded straight into the broadcast-collapsed layout of that op, and so are the ops between,
    so the broadcast stays inside each thread instead of going through shared memory (Triton
    rematerialises such loads the same way).  Returns whether anything was pinned."""
    pinned = False
    for o in reversed(list(fn.walk())):  # the last broadcast first: it pins the ones feeding it
        users = uses.of(o.results[0]) if o.op is TileOp.BROADCAST and o.result not in assigner.pinned else []
        if len(users) != 1 or users[0].op not in ELEMENTWISE_OPS or users[0].result not in assigner.layouts \
                or users[0].result.type.shape != o.result.type.shape:
            continue                      # (a DOT operand, say, has its own layout and shape)
        want = assigner.layouts[users[0].result]
        found: dict[ir.Value, L.Layout] = {}
        if _pin_source(o.result, want, uses, assigner, found, top=True) and not any(v in assigner.pinned
                                                                                     for v in found):
            pinned = pinned or any(assigner.layouts.get(v) != lay for v, lay in found.items())
            assigner.pinned.update(found)
    return pinned


def pin_dmma_operands(fn: ir.Function, assigner: LayoutAssigner, uses: _Uses) -> bool:
    """A float64 DOT's operand loaded for it alone (through casts and reshapes) is loaded
    straight into its DMMA fragment layout (``mma_tiling.DotConfig.registers_only``): lane
    (g, t) reads A[g, t] and B[t, g] of each 8 x 4 / 4 x 8 instruction tile, whole 32-byte
    sectors per warp, with no conversion through shared memory.  Returns whether anything was
    pinned."""
    pinned = False
    for o in fn.walk():
        cfg = assigner.dot_plans.config(o) if o.op is TileOp.DOT else None
        if cfg is None or not cfg.registers_only:
            continue
        for operand, v, shape in ((ML.Operand.A, o.operands[0], (cfg.m, cfg.k)),
                                  (ML.Operand.B, o.operands[1], (cfg.k, cfg.n))):
            found: dict[ir.Value, L.Layout] = {}
            if v not in assigner.pinned and _pin_source(v, ML.mma_layout(cfg.kind, operand, shape, cfg.warps),
                                                        uses, assigner, found) \
                    and not any(x in assigner.pinned for x in found):
                pinned = pinned or any(assigner.layouts.get(x) != lay for x, lay in found.items())
                assigner.pinned.update(found)
    return pinned


@dataclass(frozen=True)
class _Uses:
    """What ``_pin_source`` looks up: each value's users, and each FOR's carried args -> the FOR."""
    users: dict
    loops: dict

    @staticmethod
    def of_function(fn: ir.Function) -> "_Uses":
        return _Uses(ir.users(fn), {a: o for o in fn.walk() if o.op is TileOp.FOR for a in o.regions[0].args[1:]})

    def of(self, v: ir.Value) -> list:
        return self.users.get(v, [])


def _pin_source(v: ir.Value, lay: L.Layout, uses: _Uses, assigner: LayoutAssigner, found: dict,
                top: bool = False) -> bool:
    """Record in ``found`` layouts that give ``v`` the layout ``lay`` with no data movement: a
    load (used once) takes it; a broadcast, reshape or cast passes the collapsed / re-dimmed
    layout on to its source; an elementwise op of loads and such broadcasts passes ``lay`` to each
    tile operand (deferred ones are built in place); a FOR's carried tile passes it to its init
    and its yielded value.  False (nothing to pin) otherwise."""
    if not top and len(uses.of(v)) != 1:
        return False
    if v.owner is None:                 # a FOR's carried tile (prefetch_loads): its init and yield too
        loop = uses.loops.get(v)
        if loop is None:
            return False
        i = loop.regions[0].args.index(v) - 1
        if not (_pin_source(loop.operands[3 + i], lay, uses, assigner, found)
                and _pin_source(loop.regions[0].ops[-1].operands[i], lay, uses, assigner, found)):
            return False
        found[v] = found[loop.results[i]] = lay
        return True
    o = v.owner
    if o.op is TileOp.LOAD:
        found[v] = lay
        return True
    if o.op in (TileOp.BROADCAST, TileOp.RESHAPE, TileOp.CAST):
        src = o.operands[0]
        if o.op is TileOp.BROADCAST:
            dims = [d for d, (a, b) in enumerate(zip(src.type.shape, v.type.shape)) if a != b]
            inner = L.unit_dims_changed(L.collapsed(lay, dims), src.type.shape)
        else:
            inner = L.unit_dims_changed(lay, src.type.shape)
        if inner is None or not is_tile(src) or not _pin_source(src, inner, uses, assigner, found):
            return False
        found[v] = lay
        return True
    if o.op in ELEMENTWISE_OPS and o.op is not TileOp.WHERE and not top:
        tiles = [x for x in o.operands if is_tile(x) and (x not in assigner.deferred or (
            x.owner is not None and x.owner.op is TileOp.BROADCAST))]
        if not tiles or any(x.type.shape != v.type.shape or not _pin_source(x, lay, uses, assigner, found)
                            for x in tiles):
            return False
        found[v] = lay
        return True
    return False


def layouts_text(fn: ir.Function) -> str:
    """The function's text followed by one ``%v: layout`` line per tile value (for dumps)."""
    printer = ir.Printer()
    text = printer.function(fn)
    lines = [text, "# layouts"]
    for o in fn.walk():
        for r in list(o.results) + [a for reg in o.regions for a in reg.args]:
            if r in fn.meta.get("layouts", {}):
                lines.append(f"#   {printer.name(r)}: {fn.meta['layouts'][r]}")
            elif r in fn.meta.get("deferred", ()):
                lines.append(f"#   {printer.name(r)}: deferred")
    return "\n".join(lines)
