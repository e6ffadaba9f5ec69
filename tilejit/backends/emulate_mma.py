"""NumPy emulation of the warp-level tensor-core and async-copy instructions: ``ldmatrix``,
``mma.sync`` and ``cp.async`` with its commit/wait groups, exactly as the PTX ISA defines them.

Register values are arrays shaped ``(..., threads, n)`` of 32-bit registers (uint32 bit
patterns for A/B fragments and ldmatrix results; float32 or int32 for accumulators), as in
the SIMT emulator; ``threads`` is a multiple of 32 and every warp (32 consecutive threads)
executes the instruction on its own.  Shared memory is a uint8 array ``(..., bytes)`` with the
same leading (CTA batch) dims.  The fragment maps come from ``tilejit.passes.mma_layouts``.
"""
from __future__ import annotations

from collections import deque

import ml_dtypes
import numpy as np

from tilejit.errors import LaunchError
from tilejit.passes import mma_layouts as ML

WARP = ML.WARP_SIZE
TF32_DROPPED_BITS = 13     # f32 has 23 mantissa bits, tf32 keeps 10


class MmaEmulationError(LaunchError):
    """A tensor-core or async-copy instruction was used in a way the hardware leaves undefined
    (misaligned address, out-of-range access, wrong operand shape): a compiler bug."""


def _batch(x: np.ndarray, tail: int) -> tuple[np.ndarray, tuple]:
    """``x`` reshaped to (batch, *last ``tail`` dims), and the leading shape to restore."""
    lead = x.shape[:x.ndim - tail]
    return x.reshape((-1,) + x.shape[x.ndim - tail:]), lead


def _per_thread(x, batch: int, threads: int, dtype) -> np.ndarray:
    """``x`` (a scalar, (threads,) or (..., threads)) as a (batch, threads) array."""
    x = np.asarray(x, dtype)
    return np.broadcast_to(x.reshape(-1, x.shape[-1]) if x.ndim else x, (batch, threads))


def _warps(threads: int) -> int:
    if threads % WARP:
        raise MmaEmulationError(f"warp-level instruction run by {threads} threads (not whole warps)")
    return threads // WARP


# -------------------------------------------------------------------------------------- ldmatrix
def ldmatrix(shared: np.ndarray, row_addr: np.ndarray, num: int, trans: bool = False) -> np.ndarray:
    """``ldmatrix.sync.aligned.m8n8.x<num>{.trans}.shared.b16``: returns (..., threads, num)
    uint32 registers.  ``shared``: (..., bytes) uint8; ``row_addr``: (..., threads) byte
    addresses into it.  Lane ``i < 8*num`` of each warp supplies row ``i % 8`` of matrix
    ``i // 8`` (16 bytes, 16-byte aligned); register ``m`` of every lane holds its two 16-bit
    values of matrix ``m`` (Figure 104 of PTX ISA §9.7.14.5.15, low half first)."""
    if num not in (1, 2, 4):
        raise MmaEmulationError(f"ldmatrix .x{num}: only .x1, .x2, .x4 exist")
    if shared.dtype != np.uint8:
        raise MmaEmulationError("ldmatrix: shared memory must be a uint8 array")
    mem, lead = _batch(shared, 1)
    addr = _per_thread(row_addr, mem.shape[0], np.shape(row_addr)[-1], np.int64)
    warps = _warps(addr.shape[1])
    rows = addr.reshape(-1, warps, WARP)[:, :, :8 * num].reshape(-1, warps, num, 8)
    if (rows % ML.LDMATRIX_ROW_BYTES).any() or rows.min() < 0 or rows.max() + 16 > mem.shape[1]:
        raise MmaEmulationError("ldmatrix: a row address is not 16-byte aligned or is out of range")
    lane, half = np.arange(WARP)[:, None], np.arange(2)[None, :]
    r, c = ML.ldmatrix_coord(lane, half, trans)                   # (32, 2) each
    b = np.arange(mem.shape[0])[:, None, None, None, None]
    # element (r, c) of matrix m: the c-th 16-bit value of the row whose address lane r gave
    first = rows[:, :, :, r] + 2 * c                              # (batch, warps, num, 32, 2)
    vals = mem[b, first].astype(np.uint32) | (mem[b, first + 1].astype(np.uint32) << 8)
    regs = vals[..., 0] | (vals[..., 1] << 16)                    # (batch, warps, num, 32)
    out = regs.transpose(0, 1, 3, 2).reshape(mem.shape[0], warps * WARP, num)
    return out.reshape(lead + out.shape[1:])


# ------------------------------------------------------------------------------------------- mma
_DECODE = {"bf16": ml_dtypes.bfloat16, "f16": np.float16,
           "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def tf32_truncate(f32_bits: np.ndarray) -> np.ndarray:
    """The tf32 value the tensor core is modelled to use for an f32 register: the low 13
    mantissa bits dropped (round toward zero).  PTX ISA §5.2.3 leaves the tf32 layout
    implementation-defined (">= 10 bits of precision"), so this is a model, checked on the GPU
    by ``test_probe_on_gpu_matches_emulator[tf32]``.  Compilers round with
    ``cvt.rna.tf32.f32`` first (``tf32_round``); on rounded values the model is exact."""
    bits = np.asarray(f32_bits).astype(np.uint32)
    return (bits & np.uint32(~((1 << TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)).view(np.float32)


def tf32_round(x: np.ndarray) -> np.ndarray:
    """``cvt.rna.tf32.f32``: round an f32 to 10 mantissa bits, ties away from zero; returns the
    f32 bit pattern (uint32) with the low 13 bits clear.  Inf/NaN pass through unchanged."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = (bits + (1 << (TF32_DROPPED_BITS - 1))) & ~np.uint64((1 << TF32_DROPPED_BITS) - 1)
    return np.where(finite, rounded, bits).astype(np.uint32)


def unpack(regs: np.ndarray, ab_type: str) -> np.ndarray:
    """(..., r) uint32 registers -> (..., r * per_reg) element values (float32 or int32), element
    ``i`` taken from register ``i // per_reg`` at bit ``(i % per_reg) * bits`` (low first)."""
    regs = np.asarray(regs).astype(np.uint32)
    if ab_type == "tf32":
        return tf32_truncate(regs)
    if ab_type in ("bf16", "f16"):
        parts = np.stack([regs & 0xFFFF, regs >> 16], axis=-1).astype(np.uint16)
        return parts.view(_DECODE[ab_type]).astype(np.float32).reshape(regs.shape[:-1] + (-1,))
    parts = np.stack([(regs >> (8 * j)) & 0xFF for j in range(4)], axis=-1).astype(np.uint8)
    if ab_type == "s8":
        return parts.view(np.int8).astype(np.int32).reshape(regs.shape[:-1] + (-1,))
    return parts.view(_DECODE[ab_type]).astype(np.float32).reshape(regs.shape[:-1] + (-1,))


def pack(values: np.ndarray, ab_type: str) -> np.ndarray:
    """Inverse of ``unpack``: (..., e) element values (already of the operand's type, or
    NumPy values cast to it with round-to-nearest-even) -> (..., e // per_reg) uint32."""
    values = np.asarray(values)
    if ab_type == "tf32":
        return values.astype(np.float32).view(np.uint32)
    if ab_type == "s8":
        raw = values.astype(np.int8).view(np.uint8)
    elif ab_type in ("bf16", "f16"):
        raw = values.astype(_DECODE[ab_type]).view(np.uint16)
    else:
        raw = values.astype(_DECODE[ab_type]).view(np.uint8)
    bits = raw.dtype.itemsize * 8
    per = 32 // bits
    raw = raw.astype(np.uint32).reshape(values.shape[:-1] + (-1, per))
    return np.bitwise_or.reduce(raw << (np.arange(per, dtype=np.uint32) * bits), axis=-1)


def gather_fragment(kind, operand: "ML.Operand | str", matrices: np.ndarray) -> np.ndarray:
    """Per-lane fragment values of ``matrices`` (..., rows, cols) for every warp: the register
    contents a correct load would produce, (..., 32, elements).  Test and debugging helper."""
    table = ML.fragment_table(kind, operand)
    return matrices[..., table[..., 0], table[..., 1]]


def scatter_fragment(kind, operand: "ML.Operand | str", values: np.ndarray) -> np.ndarray:
    """Inverse of ``gather_fragment``: (..., 32, elements) -> (..., rows, cols)."""
    table = ML.fragment_table(kind, operand)
    out = np.zeros(values.shape[:-2] + ML.operand_shape(kind, operand), values.dtype)
    out[..., table[..., 0], table[..., 1]] = values
    return out


def mma(a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray, kind) -> np.ndarray:
    """``mma.sync.aligned.<shape>.row.col`` for every warp: D = A @ B + C, returned as
    (..., threads, 4) float32 (f32 accumulators) or int32 (s32).  ``kind``: an
    ``mma_layouts.MmaKind`` or its name ("bf16", "f16", "tf32", "s8", "e4m3", "e5m2").

    Numerics: each product is exact in float32 for these input types; the sum of the K products
    and C is formed in float64 and rounded once to float32 (the hardware's adder tree may differ
    in the last bit; PTX does not specify it).  s8 products are summed in int64 and wrap to
    int32 (no ``.satfinite``).  tf32 inputs are truncated (``tf32_truncate``)."""
    kind = ML.as_mma_kind(kind)
    if kind.ab_type == "f64":
        return _dmma(kind, np.asarray(a_regs, np.float64), np.asarray(b_regs, np.float64),
                     np.asarray(c_regs, np.float64))
    a, lead = _batch(np.asarray(a_regs), 2)
    b, c = np.asarray(b_regs).reshape(a.shape[0], -1, kind.b_regs), np.asarray(c_regs)
    c = c.reshape(a.shape[0], -1, kind.c_regs)
    if a.shape[2] != kind.a_regs or a.shape[1] != b.shape[1] or a.shape[1] != c.shape[1]:
        raise MmaEmulationError(f"{kind.ptx}: operands have shapes {a.shape}, {b.shape}, {c.shape}")
    warps = _warps(a.shape[1])
    per_warp = (a.shape[0], warps, WARP, -1)
    a_mat = scatter_fragment(kind, "a", unpack(a, kind.ab_type).reshape(per_warp))
    b_mat = scatter_fragment(kind, "b", unpack(b, kind.ab_type).reshape(per_warp))
    if kind.acc_type == "s32":
        c_mat = scatter_fragment(kind, "c", c.astype(np.int32).reshape(per_warp)).astype(np.int64)
        d = (a_mat.astype(np.int64) @ b_mat.astype(np.int64) + c_mat).astype(np.int32)
    else:
        c_mat = scatter_fragment(kind, "c", c.astype(np.float32).reshape(per_warp))
        d = (a_mat.astype(np.float64) @ b_mat.astype(np.float64) + c_mat).astype(np.float32)
    out = gather_fragment(kind, "c", d).reshape(a.shape[0], warps * WARP, kind.c_regs)
    return out.reshape(lead + out.shape[1:])


def _dmma(kind, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``mma.sync.aligned.m8n8k4.row.col.f64``: one double of A and B and two of C per lane;
    D = A @ B + C in float64 (each of the four products and C summed by NumPy in that order: the
    hardware's order of roundings is not specified)."""
    a, lead = _batch(a, 2)
    b, c = b.reshape(a.shape[0], -1, 1), c.reshape(a.shape[0], -1, 2)
    if a.shape[2] != 1 or not a.shape[1] == b.shape[1] == c.shape[1]:
        raise MmaEmulationError(f"{kind.ptx}: operands have shapes {a.shape}, {b.shape}, {c.shape}")
    warps = _warps(a.shape[1])
    per_warp = (a.shape[0], warps, WARP, -1)
    d = scatter_fragment(kind, "a", a.reshape(per_warp)) @ scatter_fragment(kind, "b", b.reshape(per_warp)) \
        + scatter_fragment(kind, "c", c.reshape(per_warp))
    out = gather_fragment(kind, "c", d).reshape(a.shape[0], warps * WARP, 2)
    return out.reshape(lead + out.shape[1:])


# ---------------------------------------------------------------------------------------- cp.async
class AsyncCopies:
    """The cp.async state of one CTA batch: copies issued but not committed, and the committed
    cp.async-groups, oldest first (PTX ISA §9.7.9.25.3.1-3).

    A copy reads global memory when it is issued and writes shared memory only when a
    ``wait_group`` completes its group, so a missing or too-weak wait leaves the old shared
    bytes visible (the hardware gives no guarantee before the wait).  ``pending_mask`` tells
    which shared bytes still have a copy in flight, so an emulator can reject reads of them."""

    def __init__(self):
        self.uncommitted: list[tuple] = []
        self.groups: deque[list[tuple]] = deque()

    def cp_async(self, shared: np.ndarray, smem_addr, global_buffer: np.ndarray,
                 global_byte_offset, src_bytes=16, active=None) -> None:
        """``cp.async.cg.shared.global [smem_addr], [global + offset], 16, src_bytes`` by every
        thread.  ``shared``: (..., bytes) uint8; ``smem_addr``, ``global_byte_offset``,
        ``src_bytes`` and ``active`` broadcast to (..., threads).  Bytes ``[src_bytes, 16)`` of
        each destination are zero-filled and their source is never read, so a thread with
        ``src_bytes == 0`` may point anywhere (the masked-edge idiom).  Threads where
        ``active`` is False issue nothing (a predicated-off instruction)."""
        if shared.dtype != np.uint8 or not shared.flags.c_contiguous:
            raise MmaEmulationError("cp.async: shared memory must be a C-contiguous uint8 array")
        mem, _ = _batch(shared, 1)
        batch, threads = mem.shape[0], np.shape(smem_addr)[-1]
        smem = _per_thread(smem_addr, batch, threads, np.int64)
        on = _per_thread(True if active is None else active, batch, threads, bool)
        size = np.where(on, _per_thread(src_bytes, batch, threads, np.int64), 0)
        data = self._read_sources(np.ascontiguousarray(global_buffer).reshape(-1).view(np.uint8),
                                  _per_thread(global_byte_offset, batch, threads, np.int64), size)
        if ((smem % 16 != 0) | (smem < 0) | (smem + 16 > mem.shape[1]))[on].any():
            raise MmaEmulationError("cp.async: shared address not 16-byte aligned or out of range")
        self.uncommitted.append((mem, np.where(on, smem, -1), data))

    @staticmethod
    def _read_sources(flat: np.ndarray, goff: np.ndarray, size: np.ndarray) -> np.ndarray:
        if ((size < 0) | (size > 16)).any():
            raise MmaEmulationError("cp.async: src-size must be in 0..16")
        reading = size > 0
        if ((goff % 16 != 0) & reading).any():
            raise MmaEmulationError("cp.async: global address not 16-byte aligned")
        if ((goff < 0) | (goff + size > flat.size))[reading].any():
            raise MmaEmulationError("cp.async: global read outside the buffer")
        keep = np.arange(16) < size[..., None]
        idx = np.where(keep, goff[..., None] + np.arange(16), 0)      # never touch unread bytes
        if not flat.size:
            return np.zeros(idx.shape, np.uint8)
        return np.where(keep, flat[idx], 0).astype(np.uint8)

    def commit_group(self) -> None:
        """``cp.async.commit_group``: batch every uncommitted copy into a new (maybe empty) group."""
        self.groups.append(self.uncommitted)
        self.uncommitted = []

    def wait_group(self, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``cp.async.wait_group n``: complete every committed group except the ``n`` newest,
        oldest first (later copies to the same bytes win, as they were issued later).

        Returns what landed, as ``(shared (batch, bytes) view, addresses (batch, threads))``
        pairs with -1 for threads that issued nothing, so a race checker can record each
        thread as the writer of its 16 bytes.  (PTX makes a copy visible only to the thread
        that waited; other threads still need a barrier after the wait.)"""
        landed = []
        while len(self.groups) > n:
            for mem, smem, data in self.groups.popleft():
                t_b, t_i = np.nonzero(smem >= 0)
                mem[t_b[:, None], smem[t_b, t_i][:, None] + np.arange(16)] = data[t_b, t_i]
                landed.append((mem, smem))
        return landed

    def wait_all(self) -> None:
        """``cp.async.wait_all`` = commit_group + wait_group 0."""
        self.commit_group()
        self.wait_group(0)

    def pending_mask(self, shared: np.ndarray) -> np.ndarray:
        """Boolean mask shaped like ``shared``: bytes a committed-but-unwaited or uncommitted
        copy will still write."""
        mask = np.zeros(shared.shape, bool)
        flat, _ = _batch(mask, 1)
        for group in [*self.groups, self.uncommitted]:
            for mem, smem, _ in group:
                if np.shares_memory(mem, shared):
                    t_b, t_i = np.nonzero(smem >= 0)
                    flat[t_b[:, None], smem[t_b, t_i][:, None] + np.arange(16)] = True
        return mask


# ---------------------------------------------------------------------------- wgmma (sm_90a)
WARPGROUP = 4 * WARP


def swizzled_address(addr: np.ndarray, span: int) -> np.ndarray:
    """The byte a swizzled wgmma operand access lands on: for a ``span``-byte swizzle (32, 64 or
    128) the 16-byte chunk bits 4.. are XORed with the address bits 7.. (the row of the atom),
    on the absolute shared address (PTX ISA "Shared Memory Matrix Layout", swizzling modes)."""
    return addr ^ (((addr >> 7) & (span // 16 - 1)) << 4)


def wgmma_operand_addresses(start: int, attrs, operand: ML.Operand, n: int) -> np.ndarray:
    """Byte address of every element of a wgmma operand as its descriptor lays it out: A is
    (64, 16), B is (16, n).  K-major tiles have rows of ``row_bytes`` (8-row groups 8 rows
    apart: SBO = 8 * row_bytes); an N-major B has k rows of 128-byte atoms, each atom 64
    columns wide and ``b_atom_bytes`` from the next (LBO); an M-major A (``a_m_major``) has k
    rows of one such atom."""
    item = wgmma_item(attrs)
    ks = 32 // item                     # one instruction's K: 16, or 32 float8
    if operand is ML.Operand.A:
        m, k = np.meshgrid(np.arange(64), np.arange(ks), indexing="ij")
        if getattr(attrs, "a_m_major", False):      # k rows of one 128-byte atom of 64 rows
            return swizzled_address(start + k * attrs.a_row_bytes + m * item, attrs.a_row_bytes)
        return swizzled_address(start + m * attrs.a_row_bytes + k * item, attrs.a_row_bytes)
    k, col = np.meshgrid(np.arange(ks), np.arange(n), indexing="ij")
    span = attrs.b_row_bytes
    if attrs.b_n_major:
        per_atom = span // item
        off = (col // per_atom) * attrs.b_atom_bytes + k * span + (col % per_atom) * item
    else:
        off = col * span + k * item
    return swizzled_address(start + off, span)


WGMMA_TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
               "e5m2": ml_dtypes.float8_e5m2}


def wgmma_item(attrs) -> int:
    """Bytes per A/B element of a wgmma (2, or 1 for float8)."""
    return np.dtype(WGMMA_TYPES[attrs.kind]).itemsize


def register_a(regs: np.ndarray, kind: str) -> np.ndarray:
    """The 64 x 16 A (uint16 bit patterns) a warpgroup holds in registers: (128, 4) i32, each
    warp's 16 rows as the mma.sync m16n8k16 A fragment (``mma_layouts.a_coord``)."""
    bits = np.ascontiguousarray(regs).view(np.uint32)
    out = np.zeros((64, 16), np.uint16)
    lane = np.arange(WARPGROUP) % WARP
    warp = np.arange(WARPGROUP) // WARP
    for i in range(8):                       # element i: register i // 2, half i % 2
        row, col = ML.a_coord(kind, lane, i)
        out[16 * warp + row, col] = (bits[:, i // 2] >> (16 * (i % 2))) & 0xFFFF
    return out


def wgmma(shared: np.ndarray, a_addr: np.ndarray, b_addr: np.ndarray, acc: np.ndarray, attrs) -> np.ndarray:
    """``wgmma.mma_async`` m64nNk16 per warpgroup (four consecutive warps), D = A @ B + D with
    A and B read from ``shared`` ((ctas, bytes) uint8) at the addresses in ``a_addr`` /
    ``b_addr`` ((ctas, threads): the warpgroup's first thread's value is used; with
    ``attrs.a_regs`` ``a_addr`` is (ctas, threads, 4) A fragment registers) and the f32
    accumulators ``acc`` ((ctas, threads, n/2)) in the mma C-fragment order: warp w of a group
    holds rows 16w.., register 4j+i row groupID + 8*(i>>1), column 8j + 2*tig + (i&1)."""
    ctas, threads, regs = acc.shape
    n = attrs.n
    if threads % WARPGROUP or regs != n // 2:
        raise MmaEmulationError(f"wgmma m64n{n}k16 needs whole warpgroups and {n // 2} accumulators")
    dt = WGMMA_TYPES[attrs.kind]
    item = np.dtype(dt).itemsize
    lane = np.arange(WARPGROUP) % WARP
    warp = np.arange(WARPGROUP) // WARP
    j, i = np.arange(regs) // 4, np.arange(regs) % 4
    rows = (16 * warp + (lane >> 2))[:, None] + 8 * (i >> 1)[None, :]
    cols = (2 * (lane & 3))[:, None] + (8 * j + (i & 1))[None, :]
    out = np.array(acc, np.float32)
    operands = ((ML.Operand.B, b_addr),) if attrs.a_regs else ((ML.Operand.A, a_addr), (ML.Operand.B, b_addr))
    for c in range(ctas):
        mem = shared[c]
        for g in range(threads // WARPGROUP):
            first = g * WARPGROUP
            addrs = {x: wgmma_operand_addresses(int(v[c, first]), attrs, x, n) for x, v in operands}
            if any(v.min() < 0 or v.max() + item > mem.shape[0] or (v % item).any() for v in addrs.values()):
                raise MmaEmulationError("wgmma operand outside shared memory or misaligned")
            elems = mem.view(np.uint16 if item == 2 else np.uint8)
            if attrs.a_regs:
                a = register_a(a_addr[c, first:first + WARPGROUP], attrs.kind).view(dt).astype(np.float64)
            else:
                a = elems[addrs[ML.Operand.A] // item].view(dt).astype(np.float64)
            b = elems[addrs[ML.Operand.B] // item].view(dt).astype(np.float64)
            d = a @ b
            out[c, first:first + WARPGROUP] += d[rows, cols].astype(np.float32)
    return out
