"""Issue a tensor-core loop's small loads one iteration ahead, into registers.

    prefetch_loads(fn) -> fn

Besides the operand tiles its rings copy ahead, a tensor-core loop often reads small tiles
whose offsets follow the loop variable: a block-scaled GEMM's row and block scales, a quantised
GEMM's group scales and zero points.  Loaded where the user wrote them, their memory latency
sits on every iteration's critical path, after the tensor-core work that could have hidden it
(ncu: long-scoreboard stalls).  This pass loads iteration i+A's copy during iteration i
(A = ``PREFETCH_AHEAD``, 1 by default; with A = 2)::

    x0 = load(a, f(lb)); x1 = load(a, f(lb + step))       # before the loop
    for i in range(lb, ub, step), carrying x = x0, y = x1:
        x_next = load(a, f(i + 2 * step))                 # where the load was
        ... x where the load's value was used ...
        yield ..., y, x_next

Past the last iteration the offsets still go through the load's edge checks (``other`` outside
the array), and inside it read bytes nobody uses, so nothing changes but when the loads are
issued.  A LOAD qualifies when it sits at the top level of a FOR body that has a constant step,
holds a DOT and writes no memory (a load never moves past a store), has at most
``PREFETCH_ELEMENTS`` elements, has offsets ``ring_sources.offset_slice`` can compute ahead
(from the loop variable and values defined before the loop), and its value feeds no load,
store, loop or DOT (a load that reaches a DOT operand through reshapes and transposes only is a
ring's; with ``PREFETCH_DEQUANTISED``, one that reaches it through arithmetic, such as a
quantised GEMM's scales, is prefetched too; so is one, up to ``DEQUANTISED_ELEMENTS``, whose
DOT will run on wgmma with its B computed in the loop: ``WGMMA_DEQUANTISED``).  ``assign_layouts`` pins such a
carried tile, its first load and its next load to the layout its broadcast wants, as it does
for a load used in place.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp, TileType
from tilejit.passes import plan_loops, row_rings
from tilejit.passes.nibble_operands import nibble_source
from tilejit.passes.ring_sources import offset_slice

PREFETCH_ELEMENTS = 1024        # a (128, 1) scale column, a (1, 256) row of zero points
# iterations ahead (each a carried copy of the tile).  H200, fp8 blockwise GEMM 128x128x128,
# 8 warps, 4096^3 / 8192^3 (2026-12-04, session 10, scripts/probes/prefetch.txt): 907 / 1007
# TFLOP/s at 1, 921 / 1004 at 2, 901 / 985 at 3; against 883 / 968 without the pass (the run
# before it): one iteration ahead takes what there is, deeper only holds more registers.
PREFETCH_AHEAD = 1
# The switch: True also prefetches loads that reach a DOT operand through arithmetic (a
# quantised GEMM's group scales and zero points).  Off until session 29: it raised the W4A16 example's registers
# (ptxas: 225 -> 247 at 16x128x128, 168 -> 194 at 16x64x128, one CTA per SM fewer there), and
# measured on the H200 (2026-12-04, session 11, scripts/probes/w4_prefetch.txt) it was 8% slower
# at M1 (59.3 / 166.6 against 54.5 / 154.4 us at N 8192 / 28672) and the same at M64.  Carrying
# only the packed uint8 weights ahead (their 8 registers a thread; ptxas 166 registers against 125
# at 16x64x128x4: 3 CTAs an SM instead of 4) was 35% slower at M1-16 and 23% at M64 on the H100
# (2026-12-05, session 20: 57.0 / 155.0 against 42.2-42.6 / 125.3-125.4 us): not kept.
# On (2026-12-06, session 29): with the pipelined loop's synchronous twin gone (its register-held B
# set the register count) and B taken from the nibbles, the zero-point row ahead costs one
# register (118 -> 119 at 16x128x128x4, 3 CTAs an SM either way) and removes the long-scoreboard
# stall each iteration waited on (ncu, M1 N = K = 8192: 1.86 -> 0.30 a issue).  H100, two
# alternating rounds, scripts/gpu_s29b.sh: M1 23.5-23.8 / 59.7-59.9 us against 30.5-31.0 /
# 67.8 at N 8192 / 28672; M16 27.2-27.3 / 67.9-68.4 against 34.0 / 76.0-79.2.
PREFETCH_DEQUANTISED = True
# Where a DOT is fed through arithmetic and runs on wgmma on sm_90a (its rows a warpgroup's 64 per
# four warps, B computed in the loop: ``wgmma.COMPUTED_B``), the loads that feed it (a quantised
# GEMM's packed weights, scales and zero points, up to ``DEQUANTISED_ELEMENTS`` each) are
# prefetched whatever ``PREFETCH_DEQUANTISED`` says: such a kernel already holds two CTAs an SM
# (W4A16 64x128x128x4: ptxas 189 -> 244 registers, no spill, the same two CTAs).  Measured on the
# H100 (2026-12-05, session 21, scripts/gpu_s21c.sh, alternating, two rounds): W4A16 at M 64
# 50.9-51.0 / 163.6-165.0 us against 54.4-54.5 / 170.6-171.0 at N 8192 / 28672 (-6% / -4%);
# the scales and zero points alone ahead (not the weights): the same as none.
WGMMA_DEQUANTISED = True
DEQUANTISED_ELEMENTS = 8192     # a (128, 64) tile of packed 4-bit weights
_FEEDS = (TileOp.DOT, TileOp.LOAD, TileOp.STORE, TileOp.ATOMIC, TileOp.FOR, TileOp.WHILE, TileOp.IF)


def prefetch_loads(fn: ir.Function, num_warps: int = 4, target: str = "sm_80") -> ir.Function:
    """``fn`` with its tensor-core loops' small loads issued ahead (see the module docstring);
    ``num_warps`` and ``target`` say which DOTs will run on wgmma (``WGMMA_DEQUANTISED``)."""
    _block(fn.body, num_warps if target == "sm_90a" else 0)
    return fn


def _block(block: ir.Block, num_warps: int) -> None:
    for o in list(block.ops):
        for r in o.regions:
            _block(r, num_warps)
        if o.op is TileOp.FOR and _eligible(o):
            for load in [x for x in o.regions[0].ops if _qualifies(o, x, num_warps)]:
                _prefetch(block, o, load)


def _on_wgmma(dot: ir.Operation, num_warps: int) -> bool:
    """Whether ``dot``, fed through arithmetic, will run on wgmma with its B computed in the loop
    (``WGMMA_DEQUANTISED``; ``num_warps`` 0 off sm_90a): its rows a warpgroup's 64 per four warps."""
    from tilejit.passes import wgmma
    rows = dot.result.type.shape[-2] if len(dot.result.type.shape) >= 2 else 0
    return WGMMA_DEQUANTISED and wgmma.COMPUTED_B and num_warps >= 4 and rows == 16 * num_warps


def _nibble_bytes(dot: ir.Operation, load: ir.Operation) -> bool:
    """``load`` reads the packed bytes ``dot`` may take its B fragments from
    (``nibble_operands``): they ride the loop's rings, and carried ahead in registers instead
    they cost more than they hide (measured on the H100 in session 20, see ``PREFETCH_DEQUANTISED``)."""
    source = nibble_source(dot)
    return source is not None and source.packed is load.result


def _eligible(loop: ir.Operation) -> bool:
    body = loop.regions[0]
    step = loop.operands[2].owner
    return step is not None and step.op is TileOp.CONSTANT and \
        any(x.op is TileOp.DOT for x in body.walk()) and \
        not any(x.op in (TileOp.STORE, TileOp.ATOMIC) for x in body.walk())


def _qualifies(loop: ir.Operation, load: ir.Operation, num_warps: int = 0) -> bool:
    body = loop.regions[0]
    if load.op is not TileOp.LOAD or ir.gathers(load) or not isinstance(load.result.type, TileType) \
            or not load.result.type.shape or load.result.type.numel > max(PREFETCH_ELEMENTS, DEQUANTISED_ELEMENTS):
        return False
    if offset_slice(body, load) is None:
        return False
    uses = ir.users(body)
    todo, seen, wgmma_fed = [(load.result, True)], set(), False
    while todo:                    # everything the value flows into within the body
        v, plain = todo.pop()      # plain: reached through reshapes and transposes only
        for u in uses.get(v, ()):
            if u.op is TileOp.DOT and not plain and (PREFETCH_DEQUANTISED or _on_wgmma(u, num_warps)):
                if not _on_wgmma(u, num_warps) and _nibble_bytes(u, load):
                    return False   # the packed weights of B from nibbles: a ring's (ahead in registers: slower)
                wgmma_fed |= _on_wgmma(u, num_warps)
                continue           # a DOT operand computed from it (a dequantised tile): not a ring's
            if u.op in _FEEDS:
                return False
            if u.op is not TileOp.YIELD and id(u) not in seen:
                seen.add(id(u))
                todo.extend((r, plain and u.op in (TileOp.RESHAPE, TileOp.TRANS)) for r in u.results)
    if wgmma_fed and plan_loops.COMPUTED_B_RINGS and \
            load.result.type.numel * load.result.type.dtype.itemsize >= row_rings.DOT_LOOP_MIN_BYTES:
        return False               # the packed weights: a thread-private ring's (plan_loops)
    return load.result.type.numel <= (DEQUANTISED_ELEMENTS if wgmma_fed else PREFETCH_ELEMENTS)


def _prefetch(parent: ir.Block, loop: ir.Operation, load: ir.Operation) -> None:
    body = loop.regions[0]
    iv, start, step = body.args[0], loop.operands[0], loop.operands[2]
    ops = offset_slice(body, load) + [load]

    def later(v: ir.Value, n: int, out: list) -> ir.Value:      # v + n * step, ops appended to out
        for _ in range(n):
            out.append(ir.Operation(TileOp.ADD, [v, step], [iv.type], None, None, load.loc))
            v = out[-1].result
        return v
    # before the loop: the first PREFETCH_AHEAD iterations' values
    first, values = [], []
    for j in range(PREFETCH_AHEAD):
        first += ir.clone_ops(ops, {iv: later(start, j, first)})
        values.append(first[-1].result)
    at = parent.ops.index(loop)
    parent.ops[at:at] = first
    # in the body, where the load was: iteration i + PREFETCH_AHEAD's
    ahead: list[ir.Operation] = []
    ahead += ir.clone_ops(ops, {iv: later(iv, PREFETCH_AHEAD, ahead)})
    at = body.ops.index(load)
    body.ops[at:at + 1] = ahead
    carried = [ir.Value(load.result.type) for _ in range(PREFETCH_AHEAD)]
    _replace_uses(body, load.result, carried[0])
    body.args += carried
    loop.operands += values
    body.ops[-1].operands += carried[1:] + [ahead[-1].result]
    loop.results += [ir.Value(load.result.type, owner=loop) for _ in carried]


def _replace_uses(block: ir.Block, old: ir.Value, new: ir.Value) -> None:
    for o in block.walk():
        o.operands = [new if x is old else x for x in o.operands]
