"""Analysis: how each FOR loop is lowered, decided once before lowering and recorded as a
``plans.LoopPlan`` per loop (``fn.meta["loop_plans"]``, a ``LoopPlans`` table keyed by the FOR
op).  The lowering (``lower``, ``lower_dot``, ``pipeline_loads``, ``wgmma``) reads the plans and
never decides again.

    plan_loops(fn, num_warps) -> fn

A plan says which loop-invariant DOT operands are staged into shared memory once, before the
loop (attention's ``q``), in which layout; which loads are software-pipelined through cp.async
rings of ``stages`` slots (``pipeline_loads`` describes the schedule), in which layout; and how
many wgmma groups stay in flight across an iteration.  A load is ringed when its only use is a
tensor-core DOT in the same loop body (seen through unit-dim reshapes and one transpose), its
array has a unit-stride, 16-byte aligned last dim, its ``other`` is 0, and its offsets are
computed from the induction variable and loop-invariant values (or small loads of them, such as
a page table's entry: ``ring_sources``).  A loop without DOTs and
without such rings gets thread-private rings for its loads instead (``passes.row_rings``), and
so may (``row_rings.DOT_LOOP_ROW_RINGS``) the other big loads of a loop whose rings are
cp.async's (a quantised GEMM's packed weights), in the same commit groups.
"""
from __future__ import annotations

import dataclasses

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import lower_memory, row_rings, tma as tma_copies, wgmma
from tilejit.passes.assign_layouts import is_tile, layouts_text
from tilejit.passes.mma_tiling import DEFAULT_STAGES, pipeline_stages
from tilejit.passes.plans import CopyEngine, DotFamily, LoopPlan, LoopPlans, RingPlan, SharedTile, StagedOperand
from tilejit.passes.ring_sources import ring_source


class Facts:
    """What the analysis reads: the function, its layouts, what is known about its integers,
    and the operands staged by the enclosing loops (value -> SharedTile)."""

    def __init__(self, fn: ir.Function, num_warps: int):
        self.fn, self.num_warps = fn, num_warps
        self.layouts: dict = fn.meta["layouts"]
        self.deferred: set = fn.meta["deferred"]
        self.dot_plans = fn.meta["dot_plans"]
        self.multiples = lower_memory.KnownMultiples(fn)
        self.staged: dict[ir.Value, SharedTile] = {}


# shared memory the rings of a loop whose depth the compiler picks may take: what the target
# offers per CTA less room for the kernel's other tiles (an explicit tj.range(stages=) is obeyed)
RING_BUDGET = {"sm_80": 100 * 1024, "sm_90a": 200 * 1024}
# The shared memory one of two CTAs an SM may take on sm_90a: 228 KB an SM, less the 1 KB the
# driver keeps for each CTA.  A loop storing a computed B into two buffers
# (``wgmma.COMPUTED_B_BUFFERS``) gets no more slots than leave that (W4A16 64x128x128x4: 3 slots,
# 113 KB; measured on the H100 with 4 slots, 132 KB and one CTA an SM: 67.5 against 50.0 us).
PAIR_CTA_BYTES = 113 * 1024
# The switch: True rings the packed loads a wgmma DOT's computed B is made from (a quantised GEMM's
# weights, which reach B through ``tj.unpack`` and arithmetic) in thread-private cp.async slots
# beside the loop's operand rings, so several K tiles of them are in flight (``prefetch_loads``
# then leaves them alone, and the operand rings take cp.async, as the thread-private rings ride
# their commit groups); the slots count in the loop's shared-memory fit.  False: they are loaded
# in registers one iteration ahead (``prefetch_loads.WGMMA_DEQUANTISED``), one K tile in flight.
# Off: slower on the H100 (2026-12-06, session 30, scripts/gpu_s30a.sh, alternating, two rounds):
# W4A16 M64 49.5-50.0 / 172.1-173.5 us against 45.7-46.2 / 159.3-160.1 at N 8192 / 28672 (best
# configs; 4 slots at 64x128x128x4 take 164 KB, one CTA an SM: 66.9 / 213.6).  The weights'
# latency is not what bounds that loop (ncu: 8 warps an SM, issue 0.37 a scheduler).
COMPUTED_B_RINGS = False


def plan_loops(fn: ir.Function, num_warps: int, target: str = "sm_90a",
               default_stages: int | None = None, tma: bool = True) -> ir.Function:
    """Record a ``LoopPlan`` for every FOR loop of ``fn`` (after ``assign_layouts``).
    ``default_stages``: the depth of loops that do not say (the ``num_stages`` launch option);
    None lets the compiler pick per loop (``preferred_stages``).  ``tma``: fill the rings of a
    loop whose rings all read wgmma tiles with TMA copies where ``passes.tma`` can."""
    facts = Facts(fn, num_warps)
    plans = LoopPlans()

    def walk(block: ir.Block) -> None:
        for o in block.ops:
            if o.op is not TileOp.FOR:
                for r in o.regions:
                    walk(r)
                continue
            staged = invariant_operands(facts, o)
            facts.staged.update((s.value, s.tile) for s in staged)
            rings = tuple(ring_plans(facts, o, default_stages or DEFAULT_STAGES))
            stages = pipeline_stages(o, default_stages or preferred_stages(o, rings, facts.dot_plans))
            if rings and not (o.attrs and o.attrs.stages):          # the compiler's choice: fit it
                per_stage = sum(facts.dot_plans.config(r.dot).tile_bytes(r.tile) for r in rings)
                # less what the loop's staged operands (attention's q) hold for its whole run
                budget = RING_BUDGET.get(target, RING_BUDGET["sm_80"]) - sum(
                    facts.dot_plans.config(s.dot).tile_bytes(s.tile) for s in staged)
                # and what a B the loop computes and stores each iteration holds: one buffer, two
                # where its group may stay in flight (3+ slots), else 2 slots and one buffer
                restaged = _restaged_bytes(o, rings, staged, facts.dot_plans)
                weights = computed_b_rings(facts, o, rings, staged)
                per_stage += sum(_row_slot_bytes(facts, r) for r in weights)
                while stages > 1 and stages * per_stage > budget - restaged:
                    stages -= 1
                if restaged and stages >= 3 and wgmma.COMPUTED_B_BUFFERS == 2 and num_warps == 4 \
                        and stages * per_stage > budget - 2 * restaged:
                    two = (budget - 2 * restaged) // per_stage
                    stages = two if two >= 3 else 2                  # (2 slots: nothing in flight)
                if stages < 2:
                    rings = ()
                stages = _pair_fit(o, rings, staged, facts.dot_plans, stages, per_stage, num_warps, target)
            weights = computed_b_rings(facts, o, rings, staged)
            engine = CopyEngine.TMA if tma and target == "sm_90a" and rings and not weights and all(
                tma_copies.ring_copies(fn, r, facts.dot_plans.config(r.dot).tile_bytes(r.tile)) for r in rings) \
                else CopyEngine.CP_ASYNC
            row_stages, row = (0, ()) if rings or staged else \
                row_rings.row_ring_plans(fn, facts.layouts, facts.multiples, o, num_warps, target)
            if rings and engine is CopyEngine.CP_ASYNC:         # the loop's other big loads ride along
                row = row_rings.dot_loop_row_rings(fn, facts.layouts, facts.multiples, o, rings, num_warps, stages)
                row += tuple(r for r in weights if stages >= 2 and r.load not in {x.load for x in row})
            plans[o] = LoopPlan(row_stages or stages, rings,
                                _in_flight(o, rings, stages, facts.dot_plans, staged, num_warps),
                                tuple(staged), engine, row)
            walk(o.regions[0])
            for s in staged:
                del facts.staged[s.value]
    walk(fn.body)
    fn.meta["loop_plans"] = plans
    return fn


def plans_text(fn: ir.Function) -> str:
    """The function's text and layouts (``layouts_text``) followed by each loop's plan."""
    printer = ir.Printer()
    printer.function(fn)                       # names every value as the dump does
    lines = [layouts_text(fn), "# loop plans"]
    for o in fn.walk():
        if o in fn.meta["loop_plans"]:
            lines += [f"#   for {printer.name(o.regions[0].args[0])} (line {o.loc.line}): " +
                      line if i == 0 else "#   " + line
                      for i, line in enumerate(fn.meta["loop_plans"][o].describe(printer.name))]
    return "\n".join(lines)


def invariant_operands(facts: Facts, o: ir.Operation) -> list[StagedOperand]:
    """The tensor-core operands that DOTs in loop ``o`` read but the loop does not compute
    (attention's ``q``): staged into their shared tiles once, before the loop, instead of on
    every iteration (in the wgmma layout, 1024-byte aligned, for a wgmma DOT)."""
    body = o.regions[0]
    inside = {r for op in body.walk() for r in op.results} | set(body.args)
    out, seen = [], set(facts.staged)
    for dot in body.ops:
        cfg = facts.dot_plans.config(dot) if dot.op is TileOp.DOT else None
        if cfg is None or cfg.registers_only:
            continue
        on_wgmma = facts.dot_plans.family(dot) is DotFamily.WGMMA
        for tile, v in zip((SharedTile.A, SharedTile.B), dot.operands[:2]):
            if v in inside or v in seen or v in facts.deferred or not is_tile(v):
                continue
            if on_wgmma and tile is SharedTile.A:
                tile = wgmma.ring_layout(tile, cfg)
            out.append(StagedOperand(v, tile, dot, 1024 if on_wgmma else 128))
            seen.add(v)
    return out


def preferred_stages(o: ir.Operation, rings: tuple[RingPlan, ...], dot_plans) -> int:
    """The depth the compiler picks for loop ``o``, from H200 measurements (benchmarks/README):
    a GEMM loop whose one wgmma group stays in flight wants 4 slots (copies 2 ahead: 574 vs
    526 TFLOP/s with 3 at 8192^3), and so does one whose single wgmma DOT's product is worked on
    in the loop (the fp8 blockwise GEMM, 128x128x128, 8 warps: 813 / 898 against 741 / 808
    TFLOP/s with 2 at 4096^3 / 8192^3); chained wgmma DOTs (attention) want 2 (344 vs 323
    TFLOP/s with 3 at D64); mma.sync loops keep DEFAULT_STAGES."""
    if not any(r.wgmma for r in rings):
        return DEFAULT_STAGES
    dots = [d for d in o.regions[0].ops if d.op is TileOp.DOT and dot_plans.family(d) is DotFamily.WGMMA]
    return 4 if len(dots) == 1 else 2


def _carried_only(o: ir.Operation, dot_plans) -> bool:
    """The loop has one wgmma DOT and its accumulator is only carried to the next iteration."""
    region = o.regions[0]
    dots = [d for d in region.ops if d.op is TileOp.DOT and dot_plans.family(d) is DotFamily.WGMMA]
    return len(dots) == 1 and [u for op in region.walk() for u in op.operands
                               if u is dots[0].result] == [dots[0].result] \
        and dots[0].result in region.ops[-1].operands


def _in_flight(o: ir.Operation, rings: tuple[RingPlan, ...], stages: int, dot_plans, staged=(),
               num_warps: int = 4) -> int:
    """wgmma keeps one group in flight across iterations when the ring has a slot to spare
    (3+ stages): copies then run a slot less ahead, so the slot they overwrite was read two
    iterations back, by a group every warpgroup retired before this iteration's barrier.  Only
    a GEMM-style accumulator (carried straight to the next iteration) may stay in flight: any
    other reader would make ptxas wait (or serialise) anyway; nor may a group whose B the loop
    stores again next iteration (``_restaged``), unless that B has two buffers
    (``wgmma.COMPUTED_B_BUFFERS``) and one warpgroup (``num_warps`` 4) reads it."""
    return 1 if any(r.wgmma for r in rings) and stages >= 3 and _carried_only(o, dot_plans) \
        and (not _restaged(o, rings, staged, dot_plans) or (wgmma.COMPUTED_B_BUFFERS == 2 and num_warps == 4)) \
        else 0


def _pair_fit(o: ir.Operation, rings, staged, dot_plans, stages: int, per_stage: int, num_warps: int,
              target: str) -> int:
    """``stages``, fewer where loop ``o`` stores a computed wgmma B into two buffers
    (``wgmma.COMPUTED_B_BUFFERS``; one warpgroup) and the ring would otherwise take the SM's
    second CTA (``PAIR_CTA_BYTES``); not below the 3 slots that keep its group in flight."""
    if not (target == "sm_90a" and rings and wgmma.COMPUTED_B_BUFFERS == 2 and num_warps == 4
            and _restaged(o, rings, staged, dot_plans)):
        return stages
    b_bytes = sum(dot_plans.config(d).tile_bytes(SharedTile.B) for d in o.regions[0].ops
                  if d.op is TileOp.DOT and dot_plans.family(d) is DotFamily.WGMMA)
    fit = (PAIR_CTA_BYTES - 2 * b_bytes - 1024) // per_stage
    return min(stages, fit) if fit >= 3 else stages


def computed_b_rings(facts: "Facts", o: ir.Operation, rings, staged) -> tuple:
    """The thread-private rings (``row_rings.ringable``) of the loads loop ``o`` computes a wgmma B
    from (``COMPUTED_B_RINGS``): each big load of the body (at least ``row_rings.DOT_LOOP_MIN_BYTES``)
    that reaches the B operand of a wgmma DOT whose B the loop computes (``_restaged``)."""
    if not (COMPUTED_B_RINGS and rings and _restaged(o, rings, staged, facts.dot_plans)):
        return ()
    body = o.regions[0]
    feeds = set()
    for d in body.ops:
        if d.op is TileOp.DOT and facts.dot_plans.family(d) is DotFamily.WGMMA:
            feeds |= _feeding(body, d.operands[1])
    out = []
    for x in body.ops:
        if x.op is TileOp.LOAD and x.result in feeds and \
                x.result.type.numel * x.result.type.dtype.itemsize >= row_rings.DOT_LOOP_MIN_BYTES:
            r = row_rings.ringable(facts.fn, facts.layouts, facts.multiples, body, x)
            if r is not None:
                out.append(r)
    return tuple(out)


def _feeding(body: ir.Block, v: ir.Value) -> set:
    """``v`` and every value of ``body``'s top level that it is computed from."""
    inside = {r: x for x in body.ops for r in x.results}
    out, todo = set(), [v]
    while todo:
        w = todo.pop()
        if w in out or w not in inside:
            continue
        out.add(w)
        todo.extend(inside[w].operands)
    return out


def _row_slot_bytes(facts: "Facts", r) -> int:
    v = r.load.result
    return row_rings.slot_bytes(facts.layouts[v], v.type.dtype.itemsize, facts.num_warps)


def _restaged_bytes(o: ir.Operation, rings: tuple[RingPlan, ...], staged, dot_plans) -> int:
    """Bytes of one buffer of each B that loop ``o`` computes and stores for wgmma each iteration
    (``_restaged``); 0 when there is none."""
    if not _restaged(o, rings, staged, dot_plans):
        return 0
    return sum(dot_plans.config(d).tile_bytes(SharedTile.B) for d in o.regions[0].ops
               if d.op is TileOp.DOT and dot_plans.family(d) is DotFamily.WGMMA)


def _restaged(o: ir.Operation, rings: tuple[RingPlan, ...], staged, dot_plans) -> bool:
    """Whether a wgmma DOT of loop ``o`` reads a B that the loop computes and stores into shared
    memory each iteration (``wgmma.COMPUTED_B``): no ring's and not staged before the loop."""
    before = {s.value for s in staged}
    return wgmma.COMPUTED_B and any(
        dot_plans.family(d) is DotFamily.WGMMA and d.operands[1] not in before
        and not any(r.dot is d and r.operand is d.operands[1] for r in rings)
        for d in o.regions[0].ops if d.op is TileOp.DOT)


def ring_plans(facts: "Facts", o: ir.Operation, default_stages: int = DEFAULT_STAGES) -> list[RingPlan]:
    """The rings of the loads of FOR ``o`` to pipeline (``pipeline_loads`` describes them)."""
    if pipeline_stages(o, default_stages) < 2:
        return []
    body = o.regions[0]
    uses = ir.users(body)
    out = []
    for dot in body.ops:
        cfg = facts.dot_plans.config(dot) if dot.op is TileOp.DOT else None
        if cfg is None or cfg.registers_only:
            continue
        mine = []
        on_wgmma = facts.dot_plans.family(dot) is DotFamily.WGMMA
        for tile, v in zip((SharedTile.A, SharedTile.B), dot.operands[:2]):
            src = ring_source(facts.fn, facts.multiples, dot, v, body, uses)
            if src is None or (src.n_major and tile is SharedTile.A and not on_wgmma):
                continue
            if src.n_major:                     # through a transpose: B as N x K, A as K x M (wgmma)
                tile = SharedTile.A_MN_ATOMS if tile is SharedTile.A else SharedTile.B_NK
            if on_wgmma:                        # the tile layouts wgmma reads (passes.wgmma)
                tile = wgmma.ring_layout(tile, cfg)
            mine.append(RingPlan(src.load, tile, dot, v, src.chain, src.offsets, on_wgmma))
        if on_wgmma and not wgmma.sources_ready(facts, dot, cfg, {r.operand for r in mine}, facts.staged):
            # wgmma needs each operand in shared (a ring, or staged before the loop) or A in
            # registers; otherwise the DOT runs on mma.sync and its rings keep ldmatrix layouts
            # (an M-major A has no ldmatrix form: its load is not ringed then)
            mine = [dataclasses.replace(r, tile=r.tile.ldmatrix, wgmma=False) for r in mine
                    if r.tile is not SharedTile.A_MN_ATOMS]
        out += mine
    return out
