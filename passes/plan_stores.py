"""TMA stores: which tile STOREs one thread copies out with ``cp.async.bulk.tensor`` instead of
every thread storing its registers.

    plan_stores(fn, target="sm_90a", tma="auto") -> fn      fn.meta["store_plans"]: plans.StorePlans

A tensor-core accumulator written to memory in a 16-bit (or 8-bit) dtype holds too few
neighbouring bytes per thread for whole 32-byte sectors, so the threads' stores go through a
shared-memory layout conversion anyway.  On sm_90a such a STORE instead writes its registers
once into a staging tile of 128-byte SW128 atoms (the layout TMA boxes use, conflict-free for
the accumulator's row pairs), and one thread issues a box copy per atom (``lower_memory.
tma_store``): no re-read into registers, no per-thread address and mask arithmetic, and the
copy drops the elements past the array's edges, as the STORE's bounds mask does.

A STORE takes this path when it is at the top level of the kernel (its epilogue), has no
user mask, writes a 2-D tile (or one reshaped with unit dims in front, into an array of that
rank: attention's (1, 1, BM, BD) output block) of whole atoms (rows a multiple of 8, at most 256) held in a
tensor-core accumulator layout without replicas, into an array that TMA can describe
(``ArraySpec.tma``) and that no other op of the kernel touches.  The others keep the
threads' stores.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes.assign_layouts import array_spec, is_tile
from tilejit.passes.plans import StorePlan, StorePlans
from tilejit.passes.tma import ATOM_BYTES, MAX_BOX, TmaCopy

# The default where ``TILEJIT_TMA_STORE`` is unset: True plans TMA stores where they apply, False
# keeps every STORE on the threads' stores.  Off until measured: the TMA store GEMMs are correct
# on the H200 (tests/test_tma_store.py, 2026-12-04), but session 11's A/B (scripts/gpu_m16.sh)
# compiled the threads' stores on both sides (the switch did not reach the backends then).
TMA_STORES = False
_MEMORY = (TileOp.LOAD, TileOp.STORE, TileOp.ATOMIC)


def plan_stores(fn: ir.Function, target: str = "sm_90a", tma: bool | str = "auto") -> ir.Function:
    """``tma``: True plans TMA stores wherever they apply, False nowhere, "auto" where measured
    faster (``TMA_STORES``)."""
    plans = StorePlans()
    if (TMA_STORES if tma == "auto" else tma) and target == "sm_90a":
        for o in fn.body.ops:
            plan = store_plan(fn, o) if o.op is TileOp.STORE else None
            if plan is not None:
                plans[o] = plan
    fn.meta["store_plans"] = plans
    return fn


def store_plan(fn: ir.Function, o: ir.Operation) -> StorePlan | None:
    """The TMA boxes of top-level STORE ``o``, or None when the threads store it."""
    array, stored = o.operands[0], ir.stored_tile(o)
    tile = flat_tile(stored)
    if ir.store_mask(o) is not None or tile is None or array.type.rank != len(stored.type.shape) \
            or tile.type.dtype != array.type.dtype:
        return None
    layout = fn.meta["layouts"].get(tile)
    if layout is None or tile in fn.meta["deferred"] or layout.kind is not L.LayoutKind.MMA_C \
            or layout.replica_bits("lane") or layout.replica_bits("warp"):
        return None
    spec = array_spec(fn, array)
    if not (spec.tma and spec.unit_inner_stride and spec.aligned16):
        return None
    if sum(x.op in _MEMORY and x.operands[0] is array for x in fn.walk()) != 1:
        return None                         # the copy lands after the threads move on
    rows, cols = tile.type.shape
    item = array.type.dtype.itemsize
    if item > 2 or (cols * item) % ATOM_BYTES or rows % 8 or rows > MAX_BOX:
        return None
    width = ATOM_BYTES // item
    front = (1,) * (array.type.rank - 2)
    copies = tuple(TmaCopy(front + (rows, width), ATOM_BYTES, a * rows * ATOM_BYTES, a * width)
                   for a in range(cols // width))
    return StorePlan(copies, rows, item, None if tile is stored else tile)


def flat_tile(stored: ir.Value) -> ir.Value | None:
    """The 2-D tile a STORE writes: ``stored`` itself, or the 2-D tile it reshapes with unit
    dims in front; None for others."""
    if not is_tile(stored):
        return None
    if len(stored.type.shape) == 2:
        return stored
    o = stored.owner
    if o is not None and o.op is TileOp.RESHAPE and all(d == 1 for d in stored.type.shape[:-2]) \
            and tuple(o.operands[0].type.shape) == tuple(stored.type.shape[-2:]):
        return o.operands[0]
    return None
