"""TMA copies for the rings of wgmma loops: which boxes fill one ring slot.

    ring_copies(fn, ring, slot_bytes) -> tuple[TmaCopy, ...] | None

A wgmma ring slot holds the load's tile with its unit dims dropped, ``R`` rows of ``C``
elements in the array's own order (rows along an outer dim, ``C`` along the innermost), in
one of two layouts (``passes.wgmma``), and each is exactly what ``cp.async.bulk.tensor``
writes for a row-major box under an address-based swizzle:

- rows of 32, 64 or 128 bytes, each 8-row group swizzled over its span: one box of the whole
  tile, swizzled over ``C * itemsize`` bytes;
- rows wider than 128 bytes, in 128-byte atoms (``R`` rows of 64 16-bit columns, ``R * 128``
  bytes apart, SW128): one box per atom, ``128 / itemsize`` columns wide.

Elements outside the array are written as zeros, which is the load's ``other=0``.  A load
whose array a TMA descriptor cannot describe (``ArraySpec.tma``, part of the specialisation:
a launch with such an array gets a kernel of its own), or whose tile does not fit those shapes
or TMA's box limits (256 per dim), keeps cp.async (``plan_loops`` records the engine per loop,
and ``inspect()`` shows it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tilejit import ir
from tilejit.passes.assign_layouts import array_spec

ATOM_BYTES = 128
MAX_BOX = 256                    # elements per box dim (cuTensorMapEncodeTiled)
SPANS = (32, 64, 128)            # swizzle spans a slot's rows may have


@dataclass(frozen=True)
class TmaCopy:
    """One box of a ring slot: ``box`` elements per array dim, swizzled over ``swizzle``
    bytes, written ``dst`` bytes into the slot, from ``inner`` elements past the load's
    innermost offset."""
    box: tuple
    swizzle: int
    dst: int
    inner: int

    @property
    def elements(self) -> int:
        return math.prod(self.box)


def ring_copies(fn: ir.Function, ring, slot_bytes: int) -> tuple[TmaCopy, ...] | None:
    """The boxes that fill one slot of wgmma ring ``ring`` (a ``plans.RingPlan``), or None
    when the ring cannot be filled by TMA."""
    if not ring.wgmma:
        return None
    array = ring.load.operands[0]
    spec = array_spec(fn, array)
    shape = tuple(ring.load.result.type.shape)
    if not spec.tma or not spec.unit_inner_stride or not spec.aligned16 or not 1 <= len(shape) <= 5:
        return None
    outer = [i for i, d in enumerate(shape[:-1]) if d != 1]
    if len(outer) != 1:
        return None
    rows, cols, item = shape[outer[0]], shape[-1], array.type.dtype.itemsize
    row_bytes = cols * item
    if ring.tile.atoms:
        if row_bytes % ATOM_BYTES or rows % 8:
            return None
        width = ATOM_BYTES // item
        box = shape[:-1] + (width,)
        copies = tuple(TmaCopy(box, ATOM_BYTES, a * rows * ATOM_BYTES, a * width)
                       for a in range(row_bytes // ATOM_BYTES))
    elif row_bytes in SPANS:
        copies = (TmaCopy(shape, row_bytes, 0, 0),)
    else:
        return None
    # (a box is at most 128 bytes wide; slots keep the 1024-byte period of the swizzle)
    if rows > MAX_BOX or slot_bytes % (8 * ATOM_BYTES):
        return None
    return copies
