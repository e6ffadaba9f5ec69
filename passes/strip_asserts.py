"""Remove ``tj.device_assert`` checks from kernels not compiled with debug (tile IR -> tile IR).

An ASSERT costs a compare, a branch and an atomic per failing register; release builds carry
none of it: this pass drops every ASSERT (in nested regions too) and the DCE after it drops the
values only the checks read.  With ``debug`` (``kernel[grid](..., debug=True)`` or
``TILEJIT_DEBUG=1``) the function is returned unchanged.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp


def _strip(block: ir.Block) -> None:
    block.ops = [o for o in block.ops if o.op is not TileOp.ASSERT]
    for o in block.ops:
        for r in o.regions:
            _strip(r)


def strip_asserts(fn: ir.Function, debug: bool = False) -> ir.Function:
    """``fn`` without its ASSERT ops unless ``debug`` (in place)."""
    if not debug:
        _strip(fn.body)
    return fn
