"""Issue every top-level load as early as its operands allow.

A row kernel reads its parameters (layernorm's weight and bias, RMSNorm's weight) where the
user wrote them: after the row's reductions.  Each reduction ends in a CTA barrier, and no
compiler moves a load across one, so the parameter loads start only once the statistics are
known, and their whole memory latency sits on every row's critical path.  This pass moves each
LOAD of the function's top-level block up to just after the last of:

- the op that defines one of its operands, other than the scalar ops (constants, dims, program
  ids, scalar arithmetic) that feed only its offsets; those move up with it;
- the last op with a side effect (a STORE, or a region that holds one): a load never passes a
  store, so an output that aliases an input reads the same values;
- the load before it: loads keep their order.

A load moves only past a reduction or a loop or branch, the ops whose latency it can hide;
elsewhere the code stays as written.

Only the function's own block is reordered (loop bodies and branches are left as written), and
the values are the same, so the pass changes when the loads are issued and nothing else.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes.dce import has_side_effects


def _scalar_op(o: ir.Operation) -> bool:
    """A region-free op with only scalar results and no memory access (cheap to move)."""
    return (not o.regions and o.op not in (TileOp.LOAD, TileOp.STORE, TileOp.ATOMIC, TileOp.REDUCE, TileOp.DOT)
            and all(not isinstance(r.type, ir.TileType) or not r.type.shape for r in o.results))


def hoist_loads(fn: ir.Function) -> ir.Function:
    if not any(o.op is TileOp.REDUCE or o.regions for o in fn.body.ops):
        return fn                               # nothing to start loads ahead of (and no quadratic walk)
    out: list[ir.Operation] = []
    for o in fn.body.ops:
        if o.op is TileOp.LOAD:
            _insert_early(out, o)
        else:
            out.append(o)
    fn.body.ops[:] = out
    return fn


def _insert_early(out: list[ir.Operation], load: ir.Operation) -> None:
    """Put ``load`` (and the scalar ops feeding it that would stop it) as early in ``out`` as
    the rules in the module docstring allow."""
    index = {id(o): i for i, o in enumerate(out)}
    definer = {id(r): o for o in out for r in o.results}
    cone: dict[int, ir.Operation] = {}          # scalar ops that move up with the load, by id
    floor = 0                                   # the earliest slot
    for i, o in enumerate(out):
        if o.op is TileOp.LOAD or has_side_effects(o):
            floor = i + 1

    def need(v: ir.Value) -> None:
        nonlocal floor
        o = definer.get(id(v))
        if o is None or id(o) in cone:
            return                              # a block argument, or already moving
        if _scalar_op(o):
            cone[id(o)] = o
            for x in o.operands:
                need(x)
        else:
            floor = max(floor, index[id(o)] + 1)

    for v in load.operands:
        need(v)
    if not any(o.op is TileOp.REDUCE or o.regions for o in out[floor:]):
        out.append(load)                        # nothing slow to start ahead of: stay
        return
    moving = [o for o in cone.values() if index[id(o)] >= floor]
    moving.sort(key=lambda o: index[id(o)])
    ids = {id(o) for o in moving}
    out[:] = out[:floor] + moving + [load] + [o for o in out[floor:] if id(o) not in ids]
