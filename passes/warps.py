"""How many warps a launch that gives no ``num_warps`` gets (a decision made once, from the tile
IR, before the pipeline runs; ``inspect()`` shows it).

    choose_num_warps(fn) -> int

Kernels with a ``tj.dot`` keep 4: their warp split comes with their tile sizes (the examples and
their tuners give ``num_warps`` with ``BM``).  Memory-bound kernels get enough warps that their
largest loaded or stored tile is about 64 bytes per thread: 4 vector loads of 16 bytes, enough
bytes in flight per thread without the registers that keep fewer CTAs on an SM (bf16 softmax on
the H200, 2026-12-03: a 1024-column row 0.92x copy at 2 warps, 0.89x at 4, 0.36x at 8; an
8192-column row 0.86x at 8, 0.66x at 16, 0.78x at 4).  At least 2 warps (one warp left the
1024-column row at 0.63x) and at most 32, except for tiles of at most 512 bytes: one warp, which
``pack_programs`` runs 8 to a CTA (bf16 softmax at 256 columns 0.52x copy as 4 packed 2-warp
programs, 0.91x as 8 packed 1-warp ones; 0.42x unpacked at either).  A row tile too large even then is split into chunks
by ``passes.chunk_rows`` first, and the warps are chosen for the chunk.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes.chunk_rows import plan_chunks
from tilejit.passes.pack_programs import PACK_BYTES

BYTES_PER_THREAD = 64
MIN_WARPS, MAX_WARPS, DOT_WARPS = 2, 32, 4


def memory_tile_bytes(fn: ir.Function) -> int:
    """The bytes of the largest tile ``fn`` loads or stores."""
    sizes = [0]
    for o in fn.walk():
        v = o.result if o.op is TileOp.LOAD else ir.stored_tile(o) if o.op is TileOp.STORE else None
        if v is not None and isinstance(v.type, ir.TileType):
            sizes.append(v.type.numel * v.type.dtype.itemsize)
    return max(sizes)


def choose_num_warps(fn: ir.Function) -> int:
    """The warps for a launch of ``fn`` that gives none (see the module docstring)."""
    if any(o.op is TileOp.DOT for o in fn.walk()):
        return DOT_WARPS
    plan = plan_chunks(fn)
    if plan is not None:
        return plan.num_warps       # the chunks are cut for these warps
    size, warps = memory_tile_bytes(fn), MIN_WARPS
    if size <= PACK_BYTES:
        return 1                    # packed 8 programs to a CTA (pack_programs)
    while warps < MAX_WARPS and size > warps * 32 * BYTES_PER_THREAD:
        warps *= 2
    return warps
