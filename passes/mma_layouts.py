"""Tensor-core fragment layouts (``mma.sync``, ``ldmatrix``) and the shared-memory swizzle they read.

Everything here is transcribed from the PTX ISA (section numbers of the 9.x HTML manual; other
releases number these sections differently, the titles are stable):
  * §9.7.14.5.7  "Matrix Fragments for mma.m16n8k8"   (.tf32: Figures 72, 75, 77)
  * §9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating point type" (.f16/.bf16:
    Figures 79, 81, 83)
  * §9.7.14.5.10 "Matrix Fragments for mma.m16n8k32"  (.s8/.u8/.e4m3/.e5m2: Figures 88, 90-92)
  * §9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix" (Figure 104)
In every figure ``groupID = %laneid >> 2`` and ``threadID_in_group = %laneid % 4``.  A fragment's
elements are listed "low to high": element ``i`` of an operand whose elements are ``bits`` wide
lives in 32-bit register ``i // (32 // bits)`` at bit offset ``(i % (32 // bits)) * bits`` (two
16-bit values per register, the lower-numbered one in the low half; four 8-bit values per
register, lowest byte first).

All coordinate functions accept Python ints or NumPy integer arrays (they broadcast).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from tilejit import dtypes as D
from tilejit.passes.layouts import BitTerm, Layout, LayoutKind
from tilejit.passes.plans import SharedTile

WARP_SIZE = 32
BANKS = 32                 # shared memory: 32 banks of 4 bytes
BANK_BYTES = 4
LDMATRIX_ROW_BYTES = 16    # one row of an ldmatrix 8x8 matrix of 16-bit elements
CHUNK = 16                 # the swizzle moves 16-byte chunks (one ldmatrix row / one cp.async)


@dataclass(frozen=True)
class MmaKind:
    """One ``mma.sync.aligned.<shape>.row.col`` instruction.

    ``ab_type``: the PTX type of A and B ("bf16", "f16", "tf32", "s8", "e4m3", "e5m2");
    ``acc_type``: "f32" or "s32"; ``bits``: width of one A/B element; the register counts are
    the number of 32-bit registers per thread of each operand."""
    shape: str
    m: int
    n: int
    k: int
    ab_type: str
    acc_type: str
    bits: int
    a_regs: int
    b_regs: int
    c_regs: int = 4

    @property
    def per_reg(self) -> int:
        """A/B elements packed in one 32-bit register (a float64 element fills a 64-bit one)."""
        return max(1, 32 // self.bits)

    @property
    def ptx(self) -> str:
        return (f"mma.sync.aligned.{self.shape}.row.col.{self.acc_type}."
                f"{self.ab_type}.{self.ab_type}.{self.acc_type}")


MMA_KINDS = {
    "bf16": MmaKind("m16n8k16", 16, 8, 16, "bf16", "f32", 16, 4, 2),
    "f16": MmaKind("m16n8k16", 16, 8, 16, "f16", "f32", 16, 4, 2),
    "tf32": MmaKind("m16n8k8", 16, 8, 8, "tf32", "f32", 32, 4, 2),
    "s8": MmaKind("m16n8k32", 16, 8, 32, "s8", "s32", 8, 4, 2),
    "e4m3": MmaKind("m16n8k32", 16, 8, 32, "e4m3", "f32", 8, 4, 2),
    "e5m2": MmaKind("m16n8k32", 16, 8, 32, "e5m2", "f32", 8, 4, 2),
    # DMMA (sm_80+): one float64 of A and of B and two of C per lane, in 64-bit registers
    "f64": MmaKind("m8n8k4", 8, 8, 4, "f64", "f64", 64, 1, 1, 2),
}


def mma_kind_for(dtype: D.DType, allow_tf32: bool = False) -> MmaKind | None:
    """The mma instruction ``tj.dot`` uses for inputs of ``dtype``, or None when there is none
    (float32 without ``allow_tf32`` is computed in full precision, not on tensor cores)."""
    name = {"bfloat16": "bf16", "float16": "f16", "int8": "s8",
            "float8e4m3": "e4m3", "float8e5m2": "e5m2", "float64": "f64"}.get(dtype.name)
    if dtype == D.float32 and allow_tf32:
        name = "tf32"
    return MMA_KINDS[name] if name else None


def as_mma_kind(kind: MmaKind | str) -> MmaKind:
    """``kind`` itself, or the MmaKind named by its A/B type ("bf16", "tf32", ...)."""
    return MMA_KINDS[kind] if isinstance(kind, str) else kind


class Operand(enum.Enum):
    """Which matrix of ``D = A @ B + C`` a fragment holds (its name is accepted too)."""
    A = "a"
    B = "b"
    C = "c"


def as_operand(operand: Operand | str) -> Operand:
    return operand if isinstance(operand, Operand) else Operand(operand)


def _group(lane):
    return lane >> 2, lane % 4          # groupID, threadID_in_group


# --------------------------------------------------------------------------- mma fragment maps
def a_coord(kind: MmaKind | str, lane, i):
    """(row, col) in the M x K matrix A of element ``a<i>`` held by ``lane``."""
    kind = as_mma_kind(kind)
    g, t = _group(lane)
    if kind.bits == 64:       # §9.7.14.5.1 (.f64, m8n8k4): row groupID, col threadID_in_group
        row, col = g + 0 * i, t + 0 * i
    elif kind.bits == 16:     # §9.7.14.5.8, Figure 79 (.f16/.bf16, m16n8k16)
        row = g + 8 * ((i >> 1) & 1)                  # groupID for 0<=i<2 || 4<=i<6, else +8
        col = t * 2 + (i & 1) + 8 * (i >> 2)          # +8 for i >= 4
    elif kind.bits == 32:     # §9.7.14.5.7, Figure 72 (.tf32, m16n8k8)
        row = g + 8 * (i & 1)                         # groupID for a0, a2; +8 for a1, a3
        col = t + 4 * (i >> 1)                        # tig for a0, a1; tig + 4 for a2, a3
    else:                     # §9.7.14.5.10, Figure 88 (8-bit, m16n8k32)
        row = g + 8 * ((i >> 2) & 1)                  # groupID for 0<=i<4 || 8<=i<12, else +8
        col = t * 4 + (i & 3) + 16 * (i >> 3)         # +16 for i >= 8
    return row, col


def b_coord(kind: MmaKind | str, lane, i):
    """(row, col) in the K x N matrix B of element ``b<i>`` held by ``lane``."""
    kind = as_mma_kind(kind)
    g, t = _group(lane)
    if kind.bits == 64:       # §9.7.14.5.1 (.f64, m8n8k4): row threadID_in_group
        row = t + 0 * i
    elif kind.bits == 16:     # §9.7.14.5.8, Figure 81
        row = t * 2 + (i & 1) + 8 * (i >> 1)          # +8 for i >= 2
    elif kind.bits == 32:     # §9.7.14.5.7, Figure 75: tig for b0, tig + 4 for b1
        row = t + 4 * i
    else:                     # §9.7.14.5.10, Figures 90-91: +16 for i >= 4
        row = t * 4 + (i & 3) + 16 * (i >> 2)
    return row, g                                     # col = groupID in every figure


def c_coord(kind: MmaKind | str, lane, i):
    """(row, col) in the M x N accumulator C/D of element ``c<i>`` held by ``lane``.  The same
    for all three shapes (Figures 77, 83, 92): row groupID for c0, c1 and groupID + 8 for c2,
    c3; col ``threadID_in_group * 2 + (i & 1)``."""
    g, t = _group(lane)
    return g + 8 * (i >> 1), t * 2 + (i & 1)


_COORD = {Operand.A: a_coord, Operand.B: b_coord, Operand.C: c_coord}


def fragment_coord(kind: MmaKind | str, operand: Operand | str, lane, i):
    """(row, col) of element ``i`` of ``lane``'s fragment of ``operand``."""
    return _COORD[as_operand(operand)](kind, lane, i)


def fragment_size(kind: MmaKind | str, operand: Operand | str) -> int:
    """Elements of ``operand`` one lane holds."""
    kind, operand = as_mma_kind(kind), as_operand(operand)
    if operand is Operand.C:
        return kind.c_regs
    return (kind.a_regs if operand is Operand.A else kind.b_regs) * kind.per_reg


def operand_shape(kind: MmaKind | str, operand: Operand | str) -> tuple[int, int]:
    kind = as_mma_kind(kind)
    return {Operand.A: (kind.m, kind.k), Operand.B: (kind.k, kind.n), Operand.C: (kind.m, kind.n)}[as_operand(operand)]


def fragment_table(kind: MmaKind | str, operand: Operand | str) -> np.ndarray:
    """(row, col) of every element of every lane: int array of shape (32, elements, 2)."""
    lane = np.arange(WARP_SIZE)[:, None]
    i = np.arange(fragment_size(kind, operand))[None, :]
    row, col = fragment_coord(kind, operand, lane, i)
    return np.stack(np.broadcast_arrays(row, col), axis=-1)


def element_slot(kind: MmaKind | str, operand: Operand | str, i):
    """(register, bit offset) of element ``i`` of an operand's fragment ("low to high")."""
    kind, is_c = as_mma_kind(kind), as_operand(operand) is Operand.C
    per = 1 if is_c else kind.per_reg
    bits = 32 if is_c else kind.bits
    return i // per, (i % per) * bits


# ------------------------------------------------------------------------ as distributed layouts
def _lane_terms(kind: MmaKind, operand: Operand) -> tuple[tuple, tuple]:
    """The lane part of the fragment maps, split per dim: every map above is
    ``(groupID or threadID_in_group) * scale + f(i)``, so it fits ``layouts.Layout``."""
    group = BitTerm("lane", 2, 3, 1)                         # groupID = lane >> 2
    def tig(scale):                                          # threadID_in_group = lane % 4
        return BitTerm("lane", 0, 2, scale)
    if operand is Operand.A:
        return (group,), (tig(kind.per_reg),)
    if operand is Operand.B:
        return (tig(kind.per_reg),), (group,)
    return (group,), (tig(2),)


def mma_layout(kind: MmaKind | str, operand: Operand | str, shape: tuple[int, int],
               warps: tuple[int, int] = (1, 1)) -> Layout:
    """The ``layouts.Layout`` of an mma operand tile of ``shape`` held by ``warps = (wm, wn)``
    warps (``wm * wn`` = num_warps, powers of two): warp ``w`` computes the C block
    ``(w % wm, w // wm)``; A tiles are split over ``wm`` only (the ``wn`` warps of a row are
    replicas) and B tiles over ``wn`` only.  Each warp's block is covered by repeated
    instruction tiles; layout register ``(rep0 * reps1 + rep1) * size + i`` is element ``i`` of
    the fragment of instruction tile ``(rep0, rep1)``, so one mma's A, B or C fragment is a
    contiguous run of ``fragment_size`` layout registers (packed ``per_reg`` to a 32-bit
    hardware register for A and B)."""
    kind, operand = as_mma_kind(kind), as_operand(operand)
    wm, wn = warps
    assert wm & (wm - 1) == 0 and wn & (wn - 1) == 0, warps
    split = {Operand.A: (wm, 1), Operand.B: (1, wn), Operand.C: (wm, wn)}[operand]
    inst = operand_shape(kind, operand)
    block = (shape[0] // split[0], shape[1] // split[1])
    assert all(block[d] % inst[d] == 0 and block[d] * split[d] == shape[d] for d in (0, 1)), \
        (shape, warps, inst)
    lane_rows, lane_cols = _lane_terms(kind, operand)
    warp_m = (BitTerm("warp", 0, wm.bit_length() - 1, block[0]),) if wm > 1 and operand is not Operand.B else ()
    warp_n = (BitTerm("warp", wm.bit_length() - 1, wn.bit_length() - 1, block[1]),) \
        if wn > 1 and operand is not Operand.A else ()
    reps = (block[0] // inst[0], block[1] // inst[1])
    lane0 = np.zeros(fragment_size(kind, operand), np.int64)
    r0, c0 = _COORD[operand](kind, lane0, np.arange(len(lane0)))    # the register part
    regs = tuple((int(p * inst[0] + r), int(q * inst[1] + c))
                 for p in range(reps[0]) for q in range(reps[1]) for r, c in zip(r0, c0))
    return Layout(_LAYOUT_KIND[operand], tuple(shape), wm * wn, regs,
                  (lane_rows + warp_m, lane_cols + warp_n),
                  f"{kind.shape}.{kind.ab_type}, warps={warps}")


_LAYOUT_KIND = {Operand.A: LayoutKind.MMA_A, Operand.B: LayoutKind.MMA_B, Operand.C: LayoutKind.MMA_C}


# ------------------------------------------------------------------- 4-bit B, columns interleaved
# A B operand unpacked from 4-bit values packed two per byte along N (``tj.unpack``) is taken
# into fragments straight from the packed bytes.  ``ldmatrix.x4.trans`` of a (K x N/2)-byte tile
# moves 16-bit pairs of bytes: lane (g, t) receives rows 2t and 2t+1 of byte pair g of each
# 16-byte row, that is 2 rows of K x 4 columns of N.  So the mma's column ``x`` of n8 tile
# ``j`` of a 32-column block ``nb`` is the tile's column ``32 nb + 4 x + j``: each lane's four
# columns are neighbours in memory, and register ``b<i>`` of tile ``j`` is nibble ``j`` of
# rows 2t + (i & 1) (+ 8): the two rows of one 32-bit word, bytes 0 and 2 (a ``lop3`` turns
# a word's four nibble pairs into four bf16x2 fragment registers).  The accumulator follows:
# column ``x`` of tile (nb, j) is ``32 nb + 4 x + j``.  Warp tiles must span 32 columns.
NIBBLE_BLOCK = 32                  # columns of N one ldmatrix row (16 bytes) holds


def nibble_ok(kind: MmaKind | str, n: int, warps: tuple[int, int]) -> bool:
    """Whether a B tile of ``n`` columns on ``warps`` can take interleaved 4-bit fragments."""
    kind = as_mma_kind(kind)
    return kind.bits == 16 and n % warps[1] == 0 and (n // warps[1]) % NIBBLE_BLOCK == 0


def _warp_terms(warps: tuple[int, int], operand: Operand, block: tuple[int, int]):
    wm, wn = warps
    warp_m = (BitTerm("warp", 0, wm.bit_length() - 1, block[0]),) if wm > 1 and operand is Operand.C else ()
    warp_n = (BitTerm("warp", wm.bit_length() - 1, wn.bit_length() - 1, block[1]),) if wn > 1 else ()
    return warp_m, warp_n


def nibble_bytes_layout(shape: tuple[int, int], warps: tuple[int, int]) -> Layout:
    """The packed bytes (K x N/2, uint8) of an interleaved 4-bit B: lane (g, t) holds bytes
    ``2g, 2g+1`` of each 16-byte row chunk of rows ``2t, 2t+1`` (+ 8) of each k16 step, in
    register order (k step, 16-byte chunk, row + 8, row + 1, byte): each four registers are
    one 32-bit ``ldmatrix.trans`` destination register."""
    k, half = shape
    _, warp_n = _warp_terms(warps, Operand.B, (k, half // warps[1]))
    chunks = half // warps[1] // LDMATRIX_ROW_BYTES
    regs = tuple((16 * kk + 8 * h + r, LDMATRIX_ROW_BYTES * c + e)
                 for kk in range(k // 16) for c in range(chunks) for h in range(2) for r in range(2) for e in range(2))
    return Layout(LayoutKind.NIBBLE_BYTES, tuple(shape), warps[0] * warps[1], regs,
                  ((BitTerm("lane", 0, 2, 2),), (BitTerm("lane", 2, 3, 2),) + warp_n), f"warps={warps}")


def nibble_b_layout(kind: MmaKind | str, shape: tuple[int, int], warps: tuple[int, int]) -> Layout:
    """The B operand (K x N, 16-bit) of interleaved 4-bit fragments, in the register order
    of ``mma_layout``'s B (k step, n8 tile, fragment element): n8 tile ``4 nb + j``'s column
    ``x`` is column ``32 nb + 4 x + j``, so each adjacent register pair is one 32-bit
    fragment register, the same nibble of two rows."""
    kind = as_mma_kind(kind)
    k, n = shape
    _, warp_n = _warp_terms(warps, Operand.B, (k, n // warps[1]))
    blocks = n // warps[1] // NIBBLE_BLOCK
    r0, _ = b_coord(kind, np.zeros(4, np.int64), np.arange(4))
    regs = tuple((16 * kk + int(r), NIBBLE_BLOCK * nb + j)
                 for kk in range(k // 16) for nb in range(blocks) for j in range(4) for r in r0)
    return Layout(LayoutKind.NIBBLE_B, tuple(shape), warps[0] * warps[1], regs,
                  ((BitTerm("lane", 0, 2, 2),), (BitTerm("lane", 2, 3, 4),) + warp_n),
                  f"{kind.shape}.{kind.ab_type}, warps={warps}")


def nibble_c_layout(kind: MmaKind | str, shape: tuple[int, int], warps: tuple[int, int]) -> Layout:
    """The accumulator (M x N) of a DOT whose B is ``nibble_b_layout``: ``mma_layout``'s C
    register order (m16 tile, n8 tile, element) with n8 tile ``4 nb + j``'s column ``x`` at
    ``32 nb + 4 x + j``."""
    kind = as_mma_kind(kind)
    m, n = shape
    block = (m // warps[0], n // warps[1])
    warp_m, warp_n = _warp_terms(warps, Operand.C, block)
    r0, c0 = c_coord(kind, np.zeros(4, np.int64), np.arange(4))
    regs = tuple((kind.m * mi + int(r), NIBBLE_BLOCK * nb + 4 * int(c) + j)
                 for mi in range(block[0] // kind.m) for nb in range(block[1] // NIBBLE_BLOCK) for j in range(4)
                 for r, c in zip(r0, c0))
    return Layout(LayoutKind.NIBBLE_C, tuple(shape), warps[0] * warps[1], regs,
                  ((BitTerm("lane", 2, 3, 1),) + warp_m, (BitTerm("lane", 0, 2, 8),) + warp_n),
                  f"{kind.shape}.{kind.ab_type}, warps={warps}")


def nibble_ldmatrix_rows(shape: tuple[int, int], warps: tuple[int, int], warp: int) -> np.ndarray:
    """(k steps / 2, chunks, 32, 2): the (row, byte column) of the packed tile whose 16 bytes
    lane ``i`` of warp ``warp`` addresses in ``ldmatrix.x4.trans`` number (pair of k steps p,
    chunk c): matrix ``i // 8`` is rows ``16 (2p + m // 2) + 8 (m % 2)`` + 0..7, so destination
    register ``m`` is ``nibble_bytes_layout``'s registers of k step ``2p + m // 2``, row + 8
    ``m % 2`` (a k tile of 16 rows takes ``.x2``, whose lanes past 16 repeat)."""
    k, half = shape
    wn_index = warp // warps[0]
    lanes = np.arange(WARP_SIZE)
    matrix, r = lanes >> 3, lanes & 7
    steps = k // 16
    pairs = max(1, steps // 2)
    chunks = half // warps[1] // LDMATRIX_ROW_BYTES
    out = np.zeros((pairs, chunks, WARP_SIZE, 2), np.int64)
    for p in range(pairs):
        for c in range(chunks):
            m = matrix % (4 if steps > 1 else 2)
            out[p, c, :, 0] = 16 * (2 * p + m // 2) + 8 * (m % 2) + r
            out[p, c, :, 1] = wn_index * (half // warps[1]) + LDMATRIX_ROW_BYTES * c
    return out


def nibble_ldmatrix_layout(shape: tuple[int, int], warps: tuple[int, int]) -> Layout:
    """``nibble_ldmatrix_rows`` as a layout of row addresses over the packed (K x N/2) tile, K a
    multiple of 32: one register per ``ldmatrix.x4.trans`` (pair of k steps, 16-byte chunk),
    whose lane ``i`` points at row ``8 (i >> 3) + (i & 7)`` of its 32 rows."""
    k, half = shape
    assert k % 32 == 0, shape
    _, warp_n = _warp_terms(warps, Operand.B, (k, half // warps[1]))
    chunks = half // warps[1] // LDMATRIX_ROW_BYTES
    regs = tuple((32 * p, LDMATRIX_ROW_BYTES * c) for p in range(k // 32) for c in range(chunks))
    return Layout(LayoutKind.LDMATRIX_B, tuple(shape), warps[0] * warps[1], regs,
                  ((BitTerm("lane", 0, 3, 1), BitTerm("lane", 3, 2, 8)), warp_n), f"nibbles, warps={warps}")


# -------------------------------------------------------------------------------------- ldmatrix
def ldmatrix_address_lanes(num: int) -> np.ndarray:
    """Lanes whose address ``ldmatrix .x<num>`` reads: lane ``i`` (``i < 8*num``) holds the start
    of row ``i % 8`` of matrix ``i // 8`` (§9.7.14.5.15, table of .num vs threads).  From sm_80
    on the other lanes' addresses are ignored."""
    assert num in (1, 2, 4), num
    return np.arange(8 * num)


def ldmatrix_coord(lane, half, trans: bool):
    """(row, col) inside its 8x8 matrix of the 16-bit value that ``lane`` receives in the low
    (``half=0``) or high (``half=1``) half of a destination register.  ``row`` is the matrix row
    whose address a lane supplied.  Figure 104: a group of four consecutive threads loads one
    row, thread ``4r + j`` getting columns ``2j, 2j+1``; ``.trans`` loads the matrix in
    column-major order, so the same lane gets the transposed element."""
    row, col = lane >> 2, (lane % 4) * 2 + half
    return (col, row) if trans else (row, col)


LDMATRIX_TILES = {"a": SharedTile.A, "b_nk": SharedTile.B_NK, "b_kn": SharedTile.B}   # (names accepted)


def ldmatrix_rows(tile: SharedTile | str, num: int = 4) -> np.ndarray:
    """Where each lane's ldmatrix address points for an mma operand tile stored in shared
    memory: (32, 2) int array of (row, byte column) in the stored tile.  Lanes past ``8*num``
    repeat the lower lanes (harmless from sm_80 on; required on sm_75).

    ``tile`` (a ``plans.SharedTile``, or its name here):
      * A, "a"   -- A (M x K) stored row-major; ``.x4`` non-trans gives a0..a<last> of any dtype
                 (16 rows x 32 bytes: K = 16 bf16/f16, 8 tf32, 32 int8/fp8).  Register order:
                 rows 0-7/bytes 0-15, rows 8-15/bytes 0-15, rows 0-7/bytes 16-31, rows 8-15/...
      * B_NK, "b_nk" -- B stored N-major (B^T row-major, N x K); non-trans.  ``.x2``: one n8 block
                 (regs b-reg0, b-reg1); ``.x4``: two n8 blocks (regs 0, 1 for n 0-7; 2, 3 for
                 n 8-15).  Works for every dtype.
      * B, "b_kn" -- B stored K-major (row-major K x N), loaded with ``.trans``; 16-bit dtypes only
                 (``.trans`` moves 16-bit elements).  ``.x2``: one n8 block; ``.x4``: two, in
                 the same register order as "b_nk".  Byte columns are ``2 * n``.
    """
    tile = LDMATRIX_TILES.get(tile, tile)
    lane = np.arange(WARP_SIZE) % (8 * num)
    matrix, r = lane >> 3, lane % 8
    if tile in (SharedTile.A, SharedTile.B):
        rows, cols = r + 8 * (matrix & 1), LDMATRIX_ROW_BYTES * (matrix >> 1)
    elif tile is SharedTile.B_NK:
        rows, cols = r + 8 * (matrix >> 1), LDMATRIX_ROW_BYTES * (matrix & 1)
    else:
        raise ValueError(f"no ldmatrix form for shared tile {tile!r}")
    return np.stack([rows, cols], axis=-1)


# --------------------------------------------------------------------------------------- swizzle
def swizzle_xor(row, row_bytes: int):
    """The value XORed into the 16-byte chunk index of ``row`` of a tile whose rows are
    ``row_bytes`` long (a power of two, >= 16).

    Shared memory serves 128 bytes (32 banks x 4 B) per wavefront, and each 8-lane phase of an
    ldmatrix reads one 16-byte chunk from each of 8 rows.  Those 8 chunks must land in 8
    different 16-byte bank groups.  ``128 // row_bytes`` consecutive rows already share one
    128-byte line (different bank groups); the XOR spreads the ``8 // rows_per_line`` lines of
    an 8-row window over the chunk positions, and never leaves the 128-byte group of a row."""
    assert row_bytes >= CHUNK and row_bytes & (row_bytes - 1) == 0, row_bytes
    chunks_per_row = row_bytes // CHUNK
    rows_per_line = max(1, 128 // row_bytes)
    return (row // rows_per_line) % min(8, chunks_per_row)


def swizzled_offset(row, col_byte, row_bytes: int):
    """Byte offset in the swizzled tile of byte ``col_byte`` of ``row`` (bytes inside a 16-byte
    chunk stay together, so one ldmatrix row or one 16-byte cp.async is never split).  The
    conflict-freedom holds for a tile whose base address is a multiple of 128 bytes."""
    chunk = (col_byte // CHUNK) ^ swizzle_xor(row, row_bytes)
    return row * row_bytes + chunk * CHUNK + col_byte % CHUNK


def ldmatrix_offsets(tile: SharedTile | str, num: int, row_bytes: int, row0: int = 0, col0: int = 0) -> np.ndarray:
    """Each lane's ldmatrix address (32 byte offsets) into a swizzled tile of ``row_bytes``-byte
    rows, for the operand block whose first row is ``row0`` and first byte column ``col0``
    (``ldmatrix_rows`` placed in the tile, then ``swizzled_offset``).  In closed form, for
    "a": ``row = row0 + (lane & 7) + 8 * ((lane >> 3) & 1)``, ``col = col0 + 16 * (lane >> 4)``
    ("b_kn" is the same; "b_nk" swaps the roles of lane bits 3 and 4; lanes past ``8 * num``
    repeat the lower ones)."""
    rows = ldmatrix_rows(tile, num)
    return swizzled_offset(rows[:, 0] + row0, rows[:, 1] + col0, row_bytes)


def wavefronts(byte_addresses, access_bytes: int) -> int:
    """Shared-memory wavefronts one phase of accesses needs: each address reads ``access_bytes``
    consecutive bytes; two different 4-byte words in one bank cost a wavefront each (the same
    word is broadcast).  1 means conflict-free for a phase of up to 128 bytes."""
    addr = np.asarray(byte_addresses).reshape(-1)
    words = (addr[:, None] // BANK_BYTES + np.arange(access_bytes // BANK_BYTES)[None, :]).ravel()
    words = np.unique(words)
    return int(np.bincount(words % BANKS, minlength=BANKS).max())


def ldmatrix_phase_wavefronts(row_addresses) -> list[int]:
    """Wavefronts of each 8-lane phase of an ldmatrix whose (up to 32) row addresses are
    ``row_addresses``: every address supplies one 16-byte row."""
    addr = np.asarray(row_addresses).reshape(-1)
    return [wavefronts(addr[p:p + 8], LDMATRIX_ROW_BYTES) for p in range(0, len(addr), 8)]
