"""One load per tensor-core operand: a tile that a loop body loads once and reads in two DOTs
is loaded once per DOT.

    split_dot_loads(fn) -> fn

The pipeliner copies a DOT operand ahead into a ring of shared slots only when its load has
that one reader (``ring_sources``): each ring is laid out for the instruction that reads it.
A FlashAttention backward reads ``q`` in ``S = Q Kᵀ`` and again in ``dK += dSᵀ Q``, and ``dO``
in ``dV += Pᵀ dO`` and ``dP = dO Vᵀ``; loaded once, neither could be ringed, so neither DOT
could take wgmma and the loop was not pipelined at all.  Here such a load (and the unit-dim
reshapes and transpose between it and each DOT) is cloned for every DOT operand after the
first, so each read has its own load and ring.  The copies read the same bytes (from L2 after
the first), which costs copy bandwidth but no latency on the loop's critical path.

A LOAD qualifies when it sits at the top level of a FOR body that the pipeliner takes (a
constant positive step, ``tj.range(stages=1)`` not asked), every reader of its value is a
DOT's A or B reached through ``RESHAPE`` / ``TRANS`` ops of that body (no other use: a tile
also used by arithmetic stays one load in registers), there are two such DOT operands or
more, the tile is a 16-bit or 8-bit float type (tensor-core operands), none of those DOTs
reads a transpose of a tile computed in registers (``dot(p.T, do)``: mma.sync through a layout
conversion, where more rings only spill), and its array and offsets are what a ring copies
(unit-stride 16-byte aligned last dim, ``other`` 0, offsets computable ahead:
``ring_sources``), and the loop's operand tiles with the copies still fit two slots each in the
budget ``plan_loops`` gives its rings (else the rings the loop has would lose their depth).  FlashAttention's backward written as FlashAttention-2 and Triton's
tutorial write it, ``Sᵀ = K Qᵀ`` (``tj.dot(k, q.T)``), then runs both its loops on wgmma.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import lower_memory
from tilejit.passes.mma_tiling import pipeline_stages
from tilejit.passes.plan_loops import RING_BUDGET
from tilejit.passes.ring_sources import ringable_offsets

_OPERAND_DTYPES = (D.bfloat16, D.float16, D.float8e4m3, D.float8e5m2)
# The switch (benchmarks/switch_probe.py): False leaves every load as the user wrote it.
SPLIT_DOT_LOADS = True
_CHAIN = (TileOp.RESHAPE, TileOp.TRANS)


def split_dot_loads(fn: ir.Function, target: str = "sm_90a") -> ir.Function:
    if SPLIT_DOT_LOADS:
        _walk(fn, fn.body, RING_BUDGET.get(target, RING_BUDGET["sm_80"]), lower_memory.KnownMultiples(fn))
    return fn


def _walk(fn: ir.Function, block: ir.Block, budget: int, multiples) -> None:
    for o in list(block.ops):
        for r in o.regions:
            _walk(fn, r, budget, multiples)
        if o.op is TileOp.FOR and pipeline_stages(o) >= 2:
            body = o.regions[0]
            split = []
            for load in [x for x in body.ops if x.op is TileOp.LOAD]:
                paths = _dot_paths(load, body)
                if paths is not None and len(paths) >= 2 and ringable_offsets(fn, multiples, load, body) is not None \
                        and not any(_transposed_registers(dot) for *_, (dot, _) in paths):
                    split.append((load, paths))
            extra = sum(2 * _bytes(load.result) * (len(paths) - 1) for load, paths in split)
            if split and _operand_bytes(body) + extra <= budget:
                for load, paths in split:
                    for path in paths[1:]:
                        _clone_path(body, load, path)


def _bytes(v: ir.Value) -> int:
    return v.type.numel * v.type.dtype.itemsize


def _operand_bytes(body: ir.Block) -> int:
    """Shared memory the loop's DOT operands take at the pipeliner's least depth: two slots of
    each tile loaded in the body (a ring's), one of each loop-invariant tile (staged before the
    loop); tiles computed in the body stay in registers.  An estimate made before the plans:
    ``plan_loops`` fits the rings it makes to its own budget."""
    in_body = {r for o in body.ops for r in o.results}
    loads, staged = set(), set()
    for o in body.ops:
        if o.op is not TileOp.DOT:
            continue
        for v in o.operands[:2]:
            while v.owner is not None and v in in_body and v.owner.op in _CHAIN:
                v = v.owner.operands[0]
            if v not in in_body:
                staged.add(v)
            elif v.owner.op is TileOp.LOAD:
                loads.add(v)
    return sum(2 * _bytes(v) for v in loads) + sum(_bytes(v) for v in staged)


def _dot_paths(load: ir.Operation, body: ir.Block) -> list[list[tuple[ir.Operation, int]]] | None:
    """Every way the load's value reaches a DOT operand: a list of (op, operand index) steps
    from the load's first reader to the DOT; None if it has any other reader."""
    uses = ir.users(body)
    paths: list = []

    def follow(v: ir.Value, steps: list) -> bool:
        readers = uses.get(v, [])
        if not readers:
            return not steps            # the load itself unread: nothing to split
        for o in readers:
            if o not in body.ops:
                return False            # read inside a nested region
            if o.op is TileOp.DOT:
                slots = [i for i, x in enumerate(o.operands[:2]) if x is v]
                if not slots or v in o.operands[2:]:
                    return False        # the accumulator
                paths.extend(steps + [(o, i)] for i in slots)
            elif o.op in _CHAIN:
                if not follow(o.result, steps + [(o, 0)]):
                    return False
            else:
                return False
        return True

    if load.result.type.dtype not in _OPERAND_DTYPES or not follow(load.result, []):
        return None
    return paths


def _transposed_registers(dot: ir.Operation) -> bool:
    """A DOT reading a transpose of a tile computed in registers (``p.T`` of a softmax, cast or
    not): it runs on mma.sync through a layout conversion, where more rings only add register
    pressure (the FlashAttention dK/dV loop spilled 2.5x more with its loads split)."""
    def source(v: ir.Value) -> ir.Value:
        while v.owner is not None and v.owner.op in (TileOp.RESHAPE, TileOp.CAST):
            v = v.owner.operands[0]
        return v
    for v in dot.operands[:2]:
        v = source(v)
        if v.owner is not None and v.owner.op is TileOp.TRANS:
            src = source(v.owner.operands[0])
            if src.owner is None or src.owner.op is not TileOp.LOAD:
                return True
    return False


def _clone_path(body: ir.Block, load: ir.Operation, path: list[tuple[ir.Operation, int]]) -> None:
    """A new load and chain for the DOT operand at the end of ``path``, inserted after the
    load (its offsets are defined before it), the DOT rewired to read it."""
    at = body.ops.index(load) + 1
    copy = ir.Operation(load.op, load.operands, [load.result.type], load.attrs, None, load.loc)
    copy.result.hint = load.result.hint
    new_ops, v = [copy], copy.result
    for op, _ in path[:-1]:
        step = ir.Operation(op.op, [v], [op.result.type], op.attrs, None, op.loc)
        step.result.hint = op.result.hint
        new_ops.append(step)
        v = step.result
    body.ops[at:at] = new_ops
    dot, slot = path[-1]
    dot.operands[slot] = v
    for op, _ in reversed(path[:-1]):          # the original chain's ops only this DOT read
        if any(op.result in o.operands for o in body.walk()):
            break
        body.ops.remove(op)
