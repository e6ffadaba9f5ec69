"""Tensor-core fragment maps against the PTX ISA figures, ldmatrix maps, and the ldmatrix swizzle."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from tilejit import dtypes as D
from tilejit.passes import mma_layouts as ML

KINDS = sorted(ML.MMA_KINDS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_fragment_map_is_a_bijection_onto_the_tile(kind, operand):
    table = ML.fragment_table(kind, operand)
    rows, cols = ML.operand_shape(kind, operand)
    assert table.shape == (32, ML.fragment_size(kind, operand), 2)
    assert (table >= 0).all() and (table[..., 0] < rows).all() and (table[..., 1] < cols).all()
    ids = table[..., 0] * cols + table[..., 1]
    assert np.array_equal(np.sort(ids.ravel()), np.arange(rows * cols))


# Hand-checked entries, read off the PTX ISA figures (lane "T<n>", element "a<i>" -> (row, col)).
FIGURE_ENTRIES = [
    # Figure 79 (m16n8k16 A, .f16/.bf16): "row = groupID for ai where 0 <= i < 2 || 4 <= i < 6,
    # groupID + 8 otherwise; col = (threadID_in_group * 2) + (i & 0x1) for ai where i < 4,
    # ... + 8 for ai where i >= 4"
    ("bf16", "a", 0, [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]),
    ("f16", "a", 5, [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]),
    ("bf16", "a", 31, [(7, 6), (7, 7), (15, 6), (15, 7), (7, 14), (7, 15), (15, 14), (15, 15)]),
    # Figure 81 (m16n8k16 B): "row = (threadID_in_group * 2) + (i & 0x1) for bi where i < 2,
    # ... + 8 for bi where i >= 2; col = groupID"
    ("bf16", "b", 0, [(0, 0), (1, 0), (8, 0), (9, 0)]),
    ("f16", "b", 31, [(6, 7), (7, 7), (14, 7), (15, 7)]),
    # Figure 83 (m16n8k16 C/D): "row = groupID for ci where i < 2, groupID + 8 for ci where
    # i >= 2; col = (threadID_in_group * 2) + (i & 0x1)"
    ("bf16", "c", 0, [(0, 0), (0, 1), (8, 0), (8, 1)]),
    ("bf16", "c", 14, [(3, 4), (3, 5), (11, 4), (11, 5)]),
    # Figure 72 (m16n8k8 A, .tf32): "row = groupID for a0 and a2, groupID + 8 for a1 and a3;
    # col = threadID_in_group for a0 and a1, threadID_in_group + 4 for a2 and a3"
    ("tf32", "a", 0, [(0, 0), (8, 0), (0, 4), (8, 4)]),
    ("tf32", "a", 7, [(1, 3), (9, 3), (1, 7), (9, 7)]),
    # Figure 75 (m16n8k8 B, .tf32): "row = threadID_in_group for b0, threadID_in_group + 4 for
    # b1; col = groupID"
    ("tf32", "b", 0, [(0, 0), (4, 0)]),
    ("tf32", "b", 31, [(3, 7), (7, 7)]),
    # Figure 77 (m16n8k8 C/D): same rule as Figure 83
    ("tf32", "c", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
    # Figure 88 (m16n8k32 A, .s8): "row = groupID for ai where 0 <= i < 4 || 8 <= i < 12,
    # groupID + 8 otherwise; col = (threadID_in_group * 4) + (i & 0x3) for ai where i < 8,
    # ... + 16 for ai where i >= 8"
    ("s8", "a", 0, [(0, 0), (0, 1), (0, 2), (0, 3), (8, 0), (8, 1), (8, 2), (8, 3),
                    (0, 16), (0, 17), (0, 18), (0, 19), (8, 16), (8, 17), (8, 18), (8, 19)]),
    ("s8", "a", 31, [(7, 12), (7, 13), (7, 14), (7, 15), (15, 12), (15, 13), (15, 14), (15, 15),
                     (7, 28), (7, 29), (7, 30), (7, 31), (15, 28), (15, 29), (15, 30), (15, 31)]),
    # Figures 90-91 (m16n8k32 B, .s8): "row = (threadID_in_group * 4) + (i & 0x3) for bi where
    # i < 4, ... + 16 for bi where i >= 4; col = groupID"
    ("s8", "b", 6, [(8, 1), (9, 1), (10, 1), (11, 1), (24, 1), (25, 1), (26, 1), (27, 1)]),
    # Figure 92 (m16n8k32 C/D, .s32)
    ("s8", "c", 1, [(0, 2), (0, 3), (8, 2), (8, 3)]),
]


@pytest.mark.parametrize("kind, operand, lane, coords", FIGURE_ENTRIES)
def test_fragment_map_matches_ptx_figures(kind, operand, lane, coords):
    got = [tuple(int(v) for v in ML.fragment_coord(kind, operand, lane, i)) for i in range(len(coords))]
    assert got == coords
    assert len(coords) == ML.fragment_size(kind, operand)


def test_fp8_fragments_use_the_8bit_figures():
    # Figure 88/90-92 cover .e4m3/.e5m2 with the same text as .s8
    for operand in "abc":
        assert np.array_equal(ML.fragment_table("e4m3", operand), ML.fragment_table("s8", operand))


@pytest.mark.parametrize("kind, operand, i, slot", [
    ("bf16", "a", 0, (0, 0)), ("bf16", "a", 1, (0, 16)), ("bf16", "a", 5, (2, 16)),
    ("s8", "a", 9, (2, 8)), ("s8", "b", 7, (1, 24)), ("tf32", "b", 1, (1, 0)), ("bf16", "c", 3, (3, 0)),
])
def test_elements_pack_low_half_first(kind, operand, i, slot):
    assert ML.element_slot(kind, operand, i) == slot


def test_mma_kind_for_dtypes():
    assert ML.mma_kind_for(D.bfloat16).ptx == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    assert ML.mma_kind_for(D.float16).k == 16
    assert ML.mma_kind_for(D.int8).ptx == "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
    assert ML.mma_kind_for(D.float32) is None
    assert ML.mma_kind_for(D.float32, allow_tf32=True).shape == "m16n8k8"
    assert ML.mma_kind_for(D.int32) is None


# ------------------------------------------------------------------------------------- ldmatrix
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragment_covers_the_8x8_matrix(trans):
    lane, half = np.meshgrid(np.arange(32), np.arange(2), indexing="ij")
    row, col = ML.ldmatrix_coord(lane, half, trans)
    assert np.array_equal(np.sort((row * 8 + col).ravel()), np.arange(64))


def test_ldmatrix_fragment_matches_figure_104():
    # "Each thread in a warp loads fragments of a row, with thread 0 receiving the first fragment
    # in its register r, and so on. A group of four threads loads an entire row of the matrix."
    assert [ML.ldmatrix_coord(0, h, False) for h in (0, 1)] == [(0, 0), (0, 1)]
    assert [ML.ldmatrix_coord(3, h, False) for h in (0, 1)] == [(0, 6), (0, 7)]
    assert [ML.ldmatrix_coord(13, h, False) for h in (0, 1)] == [(3, 2), (3, 3)]
    # ".trans indicates that the matrix is loaded in column-major format"
    assert [ML.ldmatrix_coord(13, h, True) for h in (0, 1)] == [(2, 3), (3, 3)]


def test_ldmatrix_address_lanes():
    # "Addresses addr0-addr7 correspond to the rows of the first matrix, addr8-addr15 ... second"
    assert list(ML.ldmatrix_address_lanes(1)) == list(range(8))
    assert list(ML.ldmatrix_address_lanes(2)) == list(range(16))
    assert list(ML.ldmatrix_address_lanes(4)) == list(range(32))
    with pytest.raises(AssertionError):
        ML.ldmatrix_address_lanes(3)


@pytest.mark.parametrize("operand, num, shape", [
    ("a", 4, (16, 32)), ("b_nk", 2, (8, 32)), ("b_nk", 4, (16, 32)),
    ("b_kn", 2, (16, 16)), ("b_kn", 4, (16, 32))])
def test_ldmatrix_rows_cover_the_stored_tile_once(operand, num, shape):
    rows = ML.ldmatrix_rows(operand, num)[:8 * num]
    starts = {(int(r), int(c)) for r, c in rows}
    assert len(starts) == 8 * num
    want = {(r, c) for r in range(shape[0]) for c in range(0, shape[1], 16)}
    assert starts == want
    assert np.array_equal(ML.ldmatrix_rows(operand, num)[8 * num:], rows[:32 - 8 * num])


# ---------------------------------------------------------------------------------------- swizzle
ROW_BYTES = [16, 32, 64, 128, 256, 512]


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
def test_swizzle_is_a_permutation_of_16_byte_chunks_within_128_byte_groups(row_bytes):
    rows = 64
    r, c = np.meshgrid(np.arange(rows), np.arange(row_bytes), indexing="ij")
    off = ML.swizzled_offset(r, c, row_bytes)
    assert np.array_equal(np.sort(off.ravel()), np.arange(rows * row_bytes))
    assert (off // row_bytes == r).all()                           # stays in its row
    assert (off % 16 == c % 16).all()                              # chunks are not split
    group = min(row_bytes, 128)
    assert (off % row_bytes // group == c // group).all()          # nor moved across 128 B


@pytest.mark.parametrize("row_bytes", [64, 128, 256])
@pytest.mark.parametrize("row0, col0", [(0, 0), (8, 16), (16, 32), (24, 48)])
def test_ldmatrix_offsets_follow_their_closed_form(row_bytes, row0, col0):
    # the docstring's closed form, at block starts that are not multiples of the operand's width
    lane = np.arange(32)
    low, high = (lane >> 3) & 1, lane >> 4
    for tile, row, col in [("a", (lane & 7) + 8 * low, 16 * high), ("b_kn", (lane & 7) + 8 * low, 16 * high),
                           ("b_nk", (lane & 7) + 8 * high, 16 * low)]:
        if col0 + 32 > row_bytes:
            continue
        want = ML.swizzled_offset(row + row0, col + col0, row_bytes)
        assert np.array_equal(ML.ldmatrix_offsets(tile, 4, row_bytes, row0, col0), want), tile


def test_defaults_and_refused_shapes():
    # ldmatrix forms default to .x4 at the tile's origin
    assert np.array_equal(ML.ldmatrix_rows("a"), ML.ldmatrix_rows("a", 4))
    assert np.array_equal(ML.ldmatrix_offsets("b_nk", 4, 128), ML.ldmatrix_offsets("b_nk", 4, 128, 0, 0))
    # an operand tile its warps do not cut into whole instruction tiles is refused
    for shape, warps in [((48, 16), (2, 1)), ((16, 24), (1, 2)), ((16, 16), (1, 1)), ((32, 16), (4, 1)),
                         ((17, 16), (1, 1)), ((33, 8), (2, 1)), ((512, 264), (1, 1))]:
        kind = "bf16"
        ok = shape[0] % (16 * warps[0]) == 0 and shape[1] % (8 * warps[1]) == 0
        if ok:
            ML.mma_layout(kind, "c", shape, warps)
        else:
            with pytest.raises(AssertionError):
                ML.mma_layout(kind, "c", shape, warps)


@pytest.mark.parametrize("row_bytes", [8, 20, 24, 40, 48, 96, 200])
def test_the_swizzle_refuses_rows_that_are_not_a_power_of_two_of_at_least_16_bytes(row_bytes):
    with pytest.raises(AssertionError):
        ML.swizzle_xor(0, row_bytes)


@pytest.mark.parametrize("warps", [(3, 1), (1, 3), (5, 1), (1, 5), (5, 2), (2, 5)])
def test_warp_splits_that_are_not_powers_of_two_are_refused(warps):
    with pytest.raises(AssertionError):
        ML.mma_layout("bf16", "c", (16 * 5 * 3, 8 * 5 * 3), warps)


def test_wavefronts_count_every_word_an_access_touches():
    # 8-byte reads at bytes 4 and 136: words 1, 2 and 34, 35; words 2 and 34 share bank 2
    assert ML.wavefronts([4, 136], 8) == 2
    assert ML.wavefronts([4, 140], 8) == 1


def unswizzled(row, col_byte, row_bytes):
    return row * row_bytes + col_byte


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
@pytest.mark.parametrize("operand, num", [("a", 4), ("b_nk", 4), ("b_kn", 4), ("b_nk", 2)])
def test_swizzled_ldmatrix_phases_are_conflict_free(row_bytes, operand, num):
    base = ML.ldmatrix_rows(operand, num)
    if base[:, 1].max() + 16 > row_bytes:
        pytest.skip("the operand tile is wider than a row")
    for row0 in range(0, 32, 8):                 # any 8-row-aligned tile in a taller buffer
        for col0 in range(0, row_bytes - int(base[:, 1].max()) - 15, 32):
            rows, cols = base[:, 0] + row0, base[:, 1] + col0
            addr = ML.swizzled_offset(rows, cols, row_bytes)
            assert ML.ldmatrix_phase_wavefronts(addr[:8 * num]) == [1] * num


@pytest.mark.parametrize("row_bytes", [64, 128, 256])
def test_unswizzled_ldmatrix_conflicts_are_detected(row_bytes):
    rows = ML.ldmatrix_rows("a", 4)
    addr = unswizzled(rows[:, 0], rows[:, 1], row_bytes)
    assert max(ML.ldmatrix_phase_wavefronts(addr)) == min(8, row_bytes // 16)


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
def test_swizzled_row_major_16_byte_stores_are_conflict_free(row_bytes):
    # cp.async / st.shared.v4 of a tile in row-major order: thread t writes chunk t
    chunks = np.arange(256)
    rows, cols = chunks * 16 // row_bytes, chunks * 16 % row_bytes
    addr = ML.swizzled_offset(rows, cols, row_bytes)
    for p in range(0, len(addr), 8):
        assert ML.wavefronts(addr[p:p + 8], 16) == 1


def test_wavefronts_counts_bank_conflicts_and_broadcasts():
    assert ML.wavefronts([0, 128, 256, 384], 4) == 4           # 4 words, one bank
    assert ML.wavefronts([0, 0, 0, 0], 4) == 1                 # one word: broadcast
    assert ML.wavefronts(np.arange(8) * 16, 16) == 1           # 128 contiguous bytes
    assert ML.wavefronts(np.arange(16) * 16, 16) == 2          # 256 bytes need two


@given(st.sampled_from(ROW_BYTES), st.integers(0, 1000), st.integers(0, 511))
def test_swizzle_xor_preserves_offset_inside_chunk(row_bytes, row, col):
    col %= row_bytes
    off = ML.swizzled_offset(row, col, row_bytes)
    assert off % 16 == col % 16 and off // row_bytes == row


# -------------------------------------------------------------------------- as layouts.Layout
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_single_tile_layout_is_the_fragment_map(kind, operand):
    layout = ML.mma_layout(kind, operand, ML.operand_shape(kind, operand))
    assert np.array_equal(layout.table(), ML.fragment_table(kind, operand))


@pytest.mark.parametrize("kind", ["bf16", "tf32", "s8"])
@pytest.mark.parametrize("warps", [(1, 1), (2, 2), (4, 1), (2, 4)])
@pytest.mark.parametrize("operand", ["a", "b", "c"])
@pytest.mark.parametrize("reps", [(2, 2, 2), (1, 4, 1), (4, 1, 3)], ids=["square", "wide", "tall"])
def test_warp_tiled_layout_covers_the_tile_and_keeps_mma_fragments_together(kind, warps, operand, reps):
    """``reps``: instruction tiles per warp along M, N and K (unequal counts catch a swapped
    loop bound)."""
    info = ML.MMA_KINDS[kind]
    bm, bn, bk = 16 * reps[0] * warps[0], 8 * reps[1] * warps[1], reps[2] * info.k
    shape = {"a": (bm, bk), "b": (bk, bn), "c": (bm, bn)}[operand]
    layout = ML.mma_layout(kind, operand, shape, warps)
    table = layout.table()                                         # (threads, regs, 2)
    ids = table[..., 0] * shape[1] + table[..., 1]
    replicas = {"a": warps[1], "b": warps[0], "c": 1}[operand]
    assert (np.bincount(ids.ravel(), minlength=shape[0] * shape[1]) == replicas).all()
    size = ML.fragment_size(kind, operand)
    frag = ML.fragment_table(kind, operand)
    for w in range(warps[0] * warps[1]):
        warp = table[32 * w:32 * w + 32]
        for j in range(layout.n // size):                      # one mma tile per register run
            run = warp[:, j * size:(j + 1) * size]
            origin = run[0, 0] - frag[0, 0]
            assert (origin % ML.operand_shape(kind, operand) == 0).all()
            assert np.array_equal(run - origin, frag)
        if operand == "c":                                     # warp w owns block (w % wm, w // wm)
            block = (bm // warps[0], bn // warps[1])
            assert (warp[..., 0] // block[0] == w % warps[0]).all()
            assert (warp[..., 1] // block[1] == w // warps[0]).all()


def test_operand_roles_are_typed_and_their_names_mean_the_same():
    from tilejit.passes.plans import SharedTile
    for op in ML.Operand:
        assert ML.fragment_size("bf16", op) == ML.fragment_size("bf16", op.value)
        assert ML.mma_layout("bf16", op, (32, 32), (2, 1)) == ML.mma_layout("bf16", op.value, (32, 32), (2, 1))
    assert ML.mma_layout("bf16", ML.Operand.C, (32, 32)).kind is ML.LayoutKind.MMA_C
    for name, tile in ML.LDMATRIX_TILES.items():
        assert (ML.ldmatrix_rows(name) == ML.ldmatrix_rows(tile)).all()
    with pytest.raises(ValueError, match="no ldmatrix form"):
        ML.ldmatrix_rows(SharedTile.B_ATOMS)
    with pytest.raises(ValueError):
        ML.fragment_size("bf16", "d")


@pytest.mark.parametrize("kind", ["s8", "e4m3", "e5m2", "bf16", "f16", "tf32"])
def test_element_slots_pack_elements_low_to_high_by_their_width(kind):
    bits = {"s8": 8, "e4m3": 8, "e5m2": 8, "bf16": 16, "f16": 16, "tf32": 32}[kind]
    per = 32 // bits
    for operand in ("a", "b"):
        for i in range(ML.fragment_size(kind, operand)):
            assert ML.element_slot(kind, operand, i) == (i // per, (i % per) * bits)
    assert ML.element_slot(kind, "c", 3) == (3, 0)
