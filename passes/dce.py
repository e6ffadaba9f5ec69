"""Dead-code elimination on tile IR: a backward liveness walk.

Roots are ops with side effects (STORE), control ops whose regions contain one, and region
terminators (YIELD); an op is live when one of its results is used by a live op.  A live control op keeps its whole yield
(loop-carried values are not pruned one by one).
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp

SIDE_EFFECT_OPS = frozenset({TileOp.STORE, TileOp.ATOMIC, TileOp.PRINT, TileOp.ASSERT, TileOp.STASH,
                             TileOp.GRID_DEPENDENCY})


def has_side_effects(o: ir.Operation) -> bool:
    return o.op in SIDE_EFFECT_OPS or any(has_side_effects(x) for r in o.regions for x in r.ops)


def _live_block(block: ir.Block, used: set) -> None:
    """Drop the dead ops of ``block``; ``used`` collects the values live ops read."""
    kept = []
    for o in reversed(block.ops):
        if not (o.op is TileOp.YIELD or has_side_effects(o) or any(r in used for r in o.results)):
            continue
        for r in o.regions:
            _live_block(r, used)
        used.update(o.operands)
        kept.append(o)
    block.ops = kept[::-1]


def dce(fn: ir.Function) -> ir.Function:
    """Remove ops whose results are never used and that have no side effects (in place)."""
    _live_block(fn.body, set())
    return fn
