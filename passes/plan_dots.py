"""Analysis: how each DOT is lowered, decided once before layouts are assigned and recorded as a
``plans.DotPlan`` per DOT (``fn.meta["dot_plans"]``, a ``DotPlans`` table keyed by the DOT op).
``assign_layouts``, ``plan_loops`` and the lowering read the plans and never decide again.

    plan_dots(fn, num_warps, target, wgmma=True, default_stages=DEFAULT_STAGES) -> fn

A DOT's family is WGMMA when ``wgmma.qualifies`` holds for it in a loop that is pipelined
(sm_90a, ``Options.wgmma``), MMA_SYNC when ``mma_tiling.dot_config`` gives it a tensor-core
config, else FMA.  The warp split is ``(num_warps, 1)`` for wgmma DOTs (one 64-row slice per
warpgroup) and for chained DOTs (``dot(f(dot(a, b)), c)``, attention's ``p @ v`` after
``q @ k.T``): every warp then owns whole rows, the first accumulator's C fragments are the
second DOT's A fragments (passed in registers), and the softmax's row statistics stay inside
each warp.  Other DOTs get ``mma_tiling.choose_warps``'s split.  A decode-shaped mma.sync DOT
(at most 32 rows) whose B is ``tj.unpack`` of a uint8 tile (a W4A16 GEMM's weights), cast and
shifted, with 32 columns or more a warp, takes B's fragments straight from the packed bytes
(``DotConfig.nibbles``, ``passes/nibble_operands.py``): no bfloat16 copy of B in shared memory.
"""
from __future__ import annotations

import dataclasses

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import wgmma
from tilejit.passes.nibble_operands import nibble_source
from tilejit.passes.mma_layouts import nibble_ok
from tilejit.passes.assign_layouts import carried_yields, source_dot
from tilejit.passes.mma_layouts import mma_kind_for
from tilejit.passes.mma_tiling import DEFAULT_STAGES, dot_config, no_tensor_cores
from tilejit.passes.plans import DotFamily, DotPlan, DotPlans


def chained_dots(fn: ir.Function, num_warps: int) -> set[ir.Operation]:
    """The DOTs of ``dot(f(dot(a, b)), c)`` chains whose rows split evenly over the warps."""
    out = set()
    carried = carried_yields(fn)
    for o in fn.walk():
        if o.op is not TileOp.DOT:
            continue
        a = o.operands[0]
        first = source_dot(a, a.type.shape, carried)
        kind = mma_kind_for(a.type.dtype)
        if first is None or kind is None or kind.bits != 16:
            continue
        m = a.type.shape[0]
        if m % (kind.m * num_warps) or first.result.type.shape[0] != m:
            continue
        out.update((first, o))
    return out


def plan_dots(fn: ir.Function, num_warps: int, target: str = "sm_90a", wgmma_switch: bool = True,
              default_stages: int = DEFAULT_STAGES) -> ir.Function:
    """Record a ``DotPlan`` for every DOT of ``fn`` (before ``assign_layouts``)."""
    on_wgmma = wgmma.wgmma_dots(fn, num_warps, target, wgmma_switch, default_stages)
    rows = on_wgmma | chained_dots(fn, num_warps)
    plans = DotPlans()
    for o in fn.walk():
        if o.op is not TileOp.DOT:
            continue
        cfg = dot_config(o, num_warps, (num_warps, 1) if o in rows else None, target)
        family = DotFamily.FMA if cfg is None else DotFamily.WGMMA if o in on_wgmma else DotFamily.MMA_SYNC
        if family is DotFamily.MMA_SYNC and nibble_ok(cfg.kind, cfg.n, cfg.warps) and nibble_source(o) is not None:
            cfg = dataclasses.replace(cfg, nibbles=True)     # B's fragments from its packed bytes
        plans[o] = DotPlan(family, cfg, no_tensor_cores(o, num_warps, target) if cfg is None else "")
    fn.meta["dot_plans"] = plans
    return fn


def dot_plans_text(fn: ir.Function) -> str:
    """The ``# dot plans`` section of a dump: one line per DOT (names as ``ir.print_function``)."""
    printer = ir.Printer()
    printer.function(fn)                       # names every value as the dump does
    plans = fn.meta.get("dot_plans", {})
    return "\n".join(["# dot plans"] + [f"#   {printer.name(o.result)} (line {o.loc.line}): {plans[o].describe()}"
                                        for o in fn.walk() if o in plans])
