"""How many warps a launch that gives no ``num_warps`` gets (a decision made once, from the tile
IR, before the pipeline runs; ``inspect()`` shows it).

    choose_num_warps(fn) -> int

Kernels with a ``tj.dot`` keep 4: their warp split comes with their tile sizes (the examples and
their tuners give ``num_warps`` with ``BM``).  Memory-bound kernels get enough warps that their
largest loaded or stored tile is about 64 bytes per thread (128 for 32-bit elements), and all they load about 64 values: 4 vector loads of 16 bytes, enough
bytes in flight per thread without the registers that keep fewer CTAs on an SM (bf16 softmax on
the H200, 2026-12-03: a 1024-column row 0.92x copy at 2 warps, 0.89x at 4, 0.36x at 8; an
8192-column row 0.86x at 8, 0.66x at 16, 0.78x at 4).  At least 2 warps (one warp left the
1024-column row at 0.63x) and at most 32, except for small programs (``small_program``: no tile
over 1 KiB, at most 1024 values loaded): one warp, which ``pack_programs`` runs 8 to a CTA. On
the H200 (2026-12-03, ratio to copy): bf16 softmax at 256 columns 0.52x as 4 packed 2-warp
programs, 0.91x as 8 packed 1-warp ones, 0.42x unpacked; at 1 KiB tiles, unpacked 2 warps ->
packed 1 warp: fp32 256 columns softmax 0.80 -> 0.97, RMSNorm 0.80 -> 0.98, layernorm 0.79 ->
0.92, bf16 512 softmax 0.80 -> 0.93, RMSNorm 0.79 -> 0.84, but bf16 512 layernorm (1536 values
loaded: x, weight, bias) 0.68 -> 0.58, hence the bound on the values loaded.  A row tile too large even then is split into chunks
by ``passes.chunk_rows`` first, and the warps are chosen for the chunk.  A kernel without a
DOT gets at least the warps that hold its largest tile, computed ones included, within
``MAX_VALUES_PER_THREAD`` values a thread (``tj.histogram``'s (values, bins) compares: 256 x 256
needs 2 warps where its 1 KiB loads alone would get 1).
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import cluster_rows
from tilejit.passes.chunk_rows import plan_chunks
from tilejit.passes.pack_programs import PACK_BYTES, PACK_LOADED

BYTES_PER_THREAD = 64
# ... and 128 for tiles of 32-bit (or wider) elements: about 32 values per thread either way.
# H200, 2026-12-04 (warps_probe.py, after remat_indices, ratio to copy): float32 softmax at
# 16384 columns 0.96x at 16 warps against 0.79x at the 64-byte rule's 32; at 4096 / 8192 the
# same within 1% (0.97 at 4 or 8 warps, 0.97 / 0.96 at 8 or 16); float32 RMSNorm 4096 / 8192
# 0.96 / 0.98 either way; bf16 softmax at 8192 0.96x at 8 warps against 0.95x at 4.
WIDE_BYTES_PER_THREAD = 128
# ... and at most about 64 loaded values per thread in all: a layernorm's x, weight and bias are
# each held (in float32) until its store.  H200, 2026-12-04 (benchmarks/warps_probe.py, ratio to
# copy): bf16 layernorm at 4096 columns 0.63x at 8 warps against 0.59x at the bytes rule's 4,
# at 8192 (not split: 24576 values) 0.61x at 16 against 0.44x at 8; bf16 RMSNorm 8192 keeps 8.
VALUES_PER_THREAD = 64
MIN_WARPS, MAX_WARPS, DOT_WARPS = 2, 32, 4
# the most values one thread's tile may hold (backends.resources refuses more): far past the 255
# registers a thread has, where LLVM would grind on
MAX_VALUES_PER_THREAD = 1024


def memory_tiles(fn: ir.Function) -> list:
    """The tile types ``fn`` loads or stores."""
    found = []
    for o in fn.walk():
        v = o.result if o.op is TileOp.LOAD else ir.stored_tile(o) if o.op is TileOp.STORE else None
        if v is not None and isinstance(v.type, ir.TileType):
            found.append(v.type)
    return found


def memory_tile_bytes(fn: ir.Function) -> int:
    """The bytes of the largest tile ``fn`` loads or stores."""
    return max([t.numel * t.dtype.itemsize for t in memory_tiles(fn)], default=0)


def memory_threads(fn: ir.Function) -> int:
    """Threads that hold ``fn``'s loaded and stored tiles at the bytes per thread of their width."""
    return max([-(-t.numel * t.dtype.itemsize // (WIDE_BYTES_PER_THREAD if t.dtype.itemsize >= 4 else
                                                   BYTES_PER_THREAD)) for t in memory_tiles(fn)], default=0)


def loaded_values(fn: ir.Function) -> int:
    """The values ``fn`` loads in all (each LOAD's tile counted once)."""
    return sum(o.result.type.numel for o in fn.walk()
               if o.op is TileOp.LOAD and isinstance(o.result.type, ir.TileType))


def small_program(fn: ir.Function, num_warps: int = 1) -> bool:
    """Whether ``fn``'s programs of ``num_warps`` warps are short enough to be packed several to a
    CTA: at most ``PACK_LOADED`` values loaded, and no tile over ``PACK_BYTES`` for one warp, half
    that for two (packed 2-warp programs of 1 KiB were slower than unpacked ones)."""
    limit = PACK_BYTES if num_warps == 1 else PACK_BYTES // 2
    return memory_tile_bytes(fn) <= limit and loaded_values(fn) <= PACK_LOADED


def holding_warps(fn: ir.Function) -> int:
    """The fewest warps (a power of two, at most ``MAX_WARPS``) whose threads can hold ``fn``'s
    largest tile, loaded or computed (a histogram's (values, bins) compares), within the
    registers a thread may use (``MAX_VALUES_PER_THREAD``)."""
    largest = max([r.type.numel for o in fn.walk() for r in o.results if isinstance(r.type, ir.TileType)], default=0)
    warps = 1
    while warps < MAX_WARPS and largest > warps * 32 * MAX_VALUES_PER_THREAD:
        warps *= 2
    return warps


def choose_num_warps(fn: ir.Function, cluster: bool = False) -> int:
    """The warps for a launch of ``fn`` that gives none (see the module docstring), and for a
    kernel without a DOT at least the warps that can hold its largest tile (``holding_warps``);
    with ``cluster`` (the target has clusters and the switch is on) a row that ``cluster_rows``
    splits over a cluster gets the warps of its part."""
    warps = _choose_num_warps(fn, cluster)
    return warps if any(o.op is TileOp.DOT for o in fn.walk()) else max(warps, holding_warps(fn))


def _choose_num_warps(fn: ir.Function, cluster: bool = False) -> int:
    if any(o.op is TileOp.DOT for o in fn.walk()):
        return DOT_WARPS
    if cluster and cluster_rows.plan_cluster(fn) is not None:
        part = cluster_rows.cluster_rows(ir.clone_function(fn))
        warps = choose_num_warps(part)
        while warps < MAX_WARPS and loaded_values(part) > warps * 32 * cluster_rows.VALUES_PER_THREAD:
            warps *= 2
        return warps
    plan = plan_chunks(fn)
    if plan is not None:
        return plan.num_warps       # the chunks are cut for these warps
    if small_program(fn):
        return 1                    # packed 8 programs to a CTA (pack_programs)
    threads, values, warps = memory_threads(fn), loaded_values(fn), MIN_WARPS
    while warps < MAX_WARPS and (threads > warps * 32 or values > warps * 32 * VALUES_PER_THREAD):
        warps *= 2
    return warps
