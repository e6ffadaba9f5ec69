"""Distributed layouts: which thread of a CTA holds which tile element, in which register.

Every layout here has the same form, so lowering and the emulator need one code path for all:
the coordinate of register ``r`` of thread ``(lane, warp)`` along dim ``d`` is

    thread part  sum(((src >> shift) & (2**bits - 1)) * scale  for each BitTerm of dim d)
  + register part  regs[r][d]   (a compile-time constant)

Blocked layouts (Triton's ``size_per_thread / threads_per_warp / warps_per_cta / order``),
their slices (a reduction's result) and permutations (a transpose) are all of this form, and
so are the tensor-core fragment layouts (``row = lane >> 2``, ...).  Lane and warp
bits that no term reads are *replicas*: threads differing only there hold the same elements.
"""
from __future__ import annotations

import enum

import itertools
from dataclasses import dataclass

import numpy as np

WARP_SIZE = 32


@dataclass(frozen=True)
class BitTerm:
    """``((lane or warp) >> shift) & (2**bits - 1)`` times ``scale``."""
    src: str          # "lane" or "warp"
    shift: int
    bits: int
    scale: int

    def eval(self, lane, warp):
        v = lane if self.src == "lane" else warp
        return ((v >> self.shift) & ((1 << self.bits) - 1)) * self.scale


class LayoutKind(enum.Enum):
    """Where a layout came from.  Code may branch on it (an mma accumulator is stored
    differently from a blocked tile); two layouts of different kinds are different layouts."""
    BLOCKED = "blocked"                         # Triton's blocked layout (``blocked_layout``)
    SLICE = "slice"                             # a reduction's result
    PERMUTED = "permuted"                       # a transpose
    COLLAPSED = "collapsed"                     # unit dims dropped or added
    MMA_A = "mma_a"                             # mma.sync fragments (``mma_layouts.mma_layout``)
    MMA_B = "mma_b"
    MMA_C = "mma_c"                             # the tensor-core accumulator
    LDMATRIX_A = "ldmatrix_a"                   # ldmatrix row addresses (``mma_tiling``)
    LDMATRIX_B = "ldmatrix_b"
    LDMATRIX_B_NK = "ldmatrix_b_nk"
    CHUNKS = "chunks"                           # one register per 16-byte cp.async chunk
    NIBBLE_BYTES = "nibble_bytes"               # packed 4-bit B as ldmatrix.trans leaves it
    NIBBLE_B = "nibble_b"                       # its mma B fragments, columns interleaved
    NIBBLE_C = "nibble_c"                       # the accumulator of such a B


@dataclass(frozen=True)
class Layout:
    kind: LayoutKind
    shape: tuple[int, ...]
    num_warps: int
    regs: tuple[tuple[int, ...], ...]           # register part of each register's coordinate
    terms: tuple[tuple[BitTerm, ...], ...]      # thread part, per dim
    desc: str = ""

    @property
    def n(self) -> int:
        return len(self.regs)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def used_bits(self, src: str) -> int:
        mask = 0
        for dim_terms in self.terms:
            for t in dim_terms:
                if t.src == src:
                    mask |= ((1 << t.bits) - 1) << t.shift
        return mask

    def replica_bits(self, src: str) -> int:
        """Lane (or warp) bits no term reads: threads differing only there are duplicates."""
        full = WARP_SIZE - 1 if src == "lane" else self.num_warps - 1
        return full & ~self.used_bits(src)

    def thread_coords(self, tid: np.ndarray) -> np.ndarray:
        """Thread part of the coordinate for thread ids ``tid``: shape (len(tid), rank)."""
        lane, warp = tid % WARP_SIZE, tid // WARP_SIZE
        out = np.zeros((len(tid), self.rank), np.int64)
        for d, dim_terms in enumerate(self.terms):
            for t in dim_terms:
                out[:, d] += t.eval(lane, warp)
        return out

    def table(self) -> np.ndarray:
        """Coordinates of every (thread, register): shape (threads, n, rank)."""
        tid = np.arange(self.num_warps * WARP_SIZE)
        regs = np.array(self.regs, np.int64).reshape(self.n, self.rank)
        return self.thread_coords(tid)[:, None, :] + regs[None, :, :]

    def __str__(self) -> str:
        return f"#{self.kind.value}<{'x'.join(map(str, self.shape))}{', ' + self.desc if self.desc else ''}>"


# ------------------------------------------------------------------------------------- blocked
def blocked(shape, size_per_thread, threads_per_warp, warps_per_cta, order, num_warps) -> Layout:
    """Triton's blocked layout; lanes (then warps) are numbered along ``order`` (fastest dim
    first).  Each dim's ``spt * tpw * wpc`` must divide its size; the rest repeats in registers.
    ``prod(threads_per_warp) < 32`` or ``prod(warps_per_cta) < num_warps`` leaves replicas."""
    rank = len(shape)
    span = [size_per_thread[d] * threads_per_warp[d] * warps_per_cta[d] for d in range(rank)]
    assert all(shape[d] % span[d] == 0 for d in range(rank)), (shape, span)
    reps = [shape[d] // span[d] for d in range(rank)]
    terms: list[list[BitTerm]] = [[] for _ in range(rank)]
    for src, counts, scale_of in (("lane", threads_per_warp, lambda d: size_per_thread[d]),
                                  ("warp", warps_per_cta,
                                   lambda d: size_per_thread[d] * threads_per_warp[d])):
        shift = 0
        for d in order:
            bits = counts[d].bit_length() - 1
            if bits:
                terms[d].append(BitTerm(src, shift, bits, scale_of(d)))
            shift += bits
    slow_first = list(reversed(order))       # itertools.product varies its last factor fastest
    regs = []
    for rep in itertools.product(*[range(reps[d]) for d in slow_first]):
        for sub in itertools.product(*[range(size_per_thread[d]) for d in slow_first]):
            coord = [0] * rank
            for k, d in enumerate(slow_first):
                coord[d] = rep[k] * span[d] + sub[k]
            regs.append(tuple(coord))
    desc = (f"spt={tuple(size_per_thread)}, tpw={tuple(threads_per_warp)}, "
            f"wpc={tuple(warps_per_cta)}, order={tuple(order)}")
    return Layout(LayoutKind.BLOCKED, tuple(shape), num_warps, tuple(regs),
                  tuple(tuple(t) for t in terms), desc)


def pow2_part(n: int) -> int:
    """The largest power of two dividing ``n``."""
    return n & -n


def default_blocked(shape, itemsize: int, num_warps: int, vec_bytes: int = 16) -> Layout:
    """The blocked layout for a tile of ``shape``: each thread holds ``vec_bytes`` contiguous
    bytes along the last dim, lanes go along the last dim first and then the rows, warps over
    the rows first.  Dims that are not powers of two keep their odd factor in registers."""
    rank = len(shape)
    room = [pow2_part(s) for s in shape]         # what threads may split along each dim
    spt = [1] * rank
    spt[-1] = min(max(1, vec_bytes // itemsize), room[-1])
    room[-1] //= spt[-1]
    tpw, lanes = [1] * rank, WARP_SIZE
    for d in reversed(range(rank)):
        tpw[d] = min(lanes, room[d])
        lanes //= tpw[d]
        room[d] //= tpw[d]
    wpc, warps = [1] * rank, num_warps
    for d in range(rank):
        wpc[d] = min(warps, room[d])
        warps //= wpc[d]
        room[d] //= wpc[d]
    return blocked(shape, spt, tpw, wpc, tuple(reversed(range(rank))), num_warps)


# ----------------------------------------------------------------------------- derived layouts
def slice_groups(layout: Layout, axis: int) -> list[list[int]]:
    """The registers of ``layout`` grouped by their coordinate with ``axis`` removed, in order
    of first appearance: group ``i`` is what register ``i`` of the slice layout reduces."""
    groups: dict[tuple, list[int]] = {}
    for r, c in enumerate(layout.regs):
        groups.setdefault(c[:axis] + c[axis + 1:], []).append(r)
    return list(groups.values())


def sliced(layout: Layout, axis: int, keepdims: bool) -> Layout:
    """Layout of a reduction of ``layout`` along ``axis``: the threads that split ``axis``
    become replicas, so the result is held where its row was (free to broadcast back)."""
    regs = []
    for group in slice_groups(layout, axis):
        c = layout.regs[group[0]]
        regs.append(c[:axis] + ((0,) if keepdims else ()) + c[axis + 1:])
    terms = list(layout.terms)
    shape = list(layout.shape)
    if keepdims:
        terms[axis], shape[axis] = (), 1
    else:
        del terms[axis], shape[axis]
    return Layout(LayoutKind.SLICE, tuple(shape), layout.num_warps, tuple(regs), tuple(terms),
                  f"dim={axis} of {layout}")


def permuted(layout: Layout, perm: tuple[int, ...]) -> Layout:
    """Layout of ``trans(x, perm)`` that keeps every element in the thread and register it was
    in (result dim ``i`` is source dim ``perm[i]``)."""
    regs = tuple(tuple(c[p] for p in perm) for c in layout.regs)
    return Layout(LayoutKind.PERMUTED, tuple(layout.shape[p] for p in perm), layout.num_warps, regs,
                  tuple(layout.terms[p] for p in perm), f"perm={perm} of {layout}")


def collapsed(layout: Layout, dims) -> Layout:
    """``layout`` with ``dims`` shrunk to size 1: the layout a broadcast's source needs for the
    broadcast to ``layout`` to stay inside each thread."""
    dims = set(dims)
    regs, seen = [], set()
    for c in layout.regs:
        c = tuple(0 if d in dims else x for d, x in enumerate(c))
        if c not in seen:
            seen.add(c)
            regs.append(c)
    terms = tuple(() if d in dims else t for d, t in enumerate(layout.terms))
    shape = tuple(1 if d in dims else s for d, s in enumerate(layout.shape))
    return Layout(LayoutKind.COLLAPSED, shape, layout.num_warps, tuple(regs), terms, f"of {layout}")


def unit_dims_changed(layout: Layout, new_shape: tuple[int, ...]) -> Layout | None:
    """Layout of a reshape that only inserts or removes size-1 dims (a no-op on the data), or
    None when the reshape moves elements."""
    old_keep = [d for d, s in enumerate(layout.shape) if s != 1]
    new_keep = [d for d, s in enumerate(new_shape) if s != 1]
    if [layout.shape[d] for d in old_keep] != [new_shape[d] for d in new_keep]:
        return None
    if any(t.bits for d, s in enumerate(layout.shape) if s == 1 for t in layout.terms[d]):
        return None
    terms = [()] * len(new_shape)
    for od, nd in zip(old_keep, new_keep):
        terms[nd] = layout.terms[od]
    regs = []
    for c in layout.regs:
        nc = [0] * len(new_shape)
        for od, nd in zip(old_keep, new_keep):
            nc[nd] = c[od]
        regs.append(tuple(nc))
    return Layout(layout.kind, tuple(new_shape), layout.num_warps, tuple(regs), tuple(terms),
                  layout.desc)


def expanded_last(layout: Layout, r: int) -> Layout | None:
    """``layout`` (shape ``(..., 1)``, nothing of the last dim on threads) grown to ``(..., r)``
    in registers: each register followed by its ``r - 1`` neighbours along the last dim (the
    layout in which a broadcast of the unit dim stays inside each thread); None otherwise."""
    if layout.shape[-1] != 1 or layout.terms[-1]:
        return None
    regs = tuple(c[:-1] + (j,) for c in layout.regs for j in range(r))
    return Layout(LayoutKind.COLLAPSED, layout.shape[:-1] + (r,), layout.num_warps, regs, layout.terms,
                  f"expanded of {layout}")


def merged_last(layout: Layout) -> Layout | None:
    """Layout of the reshape ``(..., n, r) -> (..., n * r)`` that moves no data: element
    ``(..., a, j)`` becomes ``(..., a * r + j)`` in the same register of the same thread.  None
    when the last dim is spread over threads (the merged dim would not be ``layout``'s then)."""
    if layout.rank < 2 or layout.terms[-1]:
        return None
    r = layout.shape[-1]
    regs = tuple(c[:-2] + (c[-2] * r + c[-1],) for c in layout.regs)
    terms = layout.terms[:-2] + (tuple(BitTerm(t.src, t.shift, t.bits, t.scale * r) for t in layout.terms[-2]),)
    return Layout(LayoutKind.COLLAPSED, layout.shape[:-2] + (layout.shape[-2] * r,), layout.num_warps, regs,
                  terms, f"merged of {layout}")


def split_last(layout: Layout, r: int) -> Layout | None:
    """The inverse of ``merged_last``: ``layout`` of shape ``(..., m)`` as ``(..., m / r, r)``
    with the same registers, when every thread step along the last dim is a multiple of ``r``
    (each thread holds whole groups of ``r``); else None."""
    m = layout.shape[-1]
    if m % r or any(t.scale % r for t in layout.terms[-1]):
        return None
    regs = tuple(c[:-1] + (c[-1] // r, c[-1] % r) for c in layout.regs)
    terms = layout.terms[:-1] + (tuple(BitTerm(t.src, t.shift, t.bits, t.scale // r) for t in layout.terms[-1]), ())
    return Layout(LayoutKind.COLLAPSED, layout.shape[:-1] + (m // r, r), layout.num_warps, regs, terms,
                  f"split of {layout}")


# ------------------------------------------------------------------------ in-thread conversions
def register_map(src: Layout, dst: Layout, dst_to_src) -> tuple[int, ...] | None:
    """Register indices ``idx`` such that ``dst`` register ``j`` of every thread is ``src``
    register ``idx[j]`` of the same thread, where ``dst_to_src`` maps a coordinate array
    (..., dst.rank) to the source coordinate it reads; None when some value lives in another
    thread (a conversion through shared memory is needed then)."""
    src_ids = np.ravel_multi_index(np.moveaxis(src.table(), -1, 0), src.shape)
    want = dst_to_src(dst.table())
    want_ids = np.ravel_multi_index(np.moveaxis(want, -1, 0), src.shape)
    first = {}
    for i, e in enumerate(src_ids[0]):
        first.setdefault(int(e), i)
    idx = []
    for e in want_ids[0]:
        if int(e) not in first:
            return None
        idx.append(first[int(e)])
    if not (src_ids[:, idx] == want_ids).all():
        return None
    return tuple(idx)


def same_elements(src: Layout, dst: Layout) -> tuple[int, ...] | None:
    """``register_map`` of a plain layout conversion (same shape)."""
    return register_map(src, dst, lambda c: c)


def vector_width(addresses: np.ndarray, itemsize: int, max_bytes: int = 16) -> int:
    """The widest ``v`` (a power of two, ``v*itemsize <= max_bytes``) such that each group of
    ``v`` registers has consecutive byte ``addresses`` (shape (threads, n)) starting at a
    multiple of ``v*itemsize``, in every thread."""
    n = addresses.shape[1]
    v = max(1, max_bytes // itemsize)
    while v > 1:
        if n % v == 0:
            groups = addresses.reshape(addresses.shape[0], n // v, v)
            steps = groups - groups[:, :, :1]
            if (steps == np.arange(v) * itemsize).all() and (groups[:, :, 0] % (v * itemsize) == 0).all():
                return v
        v //= 2
    return 1


def contiguous_run(layout: Layout) -> int:
    """How many consecutive registers hold consecutive elements along the last dim, aligned to
    that count (the widest vector access the layout allows if memory is contiguous)."""
    table = layout.table()
    if layout.rank == 0 or layout.n == 0:
        return 1
    rows = np.ravel_multi_index(np.moveaxis(table[..., :-1], -1, 0), layout.shape[:-1]) \
        if layout.rank > 1 else np.zeros(table.shape[:2], np.int64)
    # an address model where rows are far apart: consecutive only along the last dim
    fake = rows * (layout.shape[-1] + 1024) * 64 + table[..., -1]
    return vector_width(fake, 1, max_bytes=64)
