"""Emulated ldmatrix + mma.sync against NumPy matmul, ldmatrix .trans, and cp.async groups."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from tilejit.backends import emulate_mma as E
from tilejit.passes import mma_layouts as ML

ITEMSIZE = {"bf16": 2, "f16": 2, "tf32": 4, "s8": 1, "e4m3": 1, "e5m2": 1}
NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
         "e5m2": ml_dtypes.float8_e5m2}


def random_operand(rng, kind: str, shape) -> np.ndarray:
    """Values exactly representable in the operand type (so NumPy's float64 result is exact)."""
    if kind == "s8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    if kind == "tf32":
        return E.tf32_round(x).view(np.float32)
    return x.astype(NUMPY[kind])


def store_tile(shared: np.ndarray, base: int, tile: np.ndarray) -> int:
    """Write ``tile`` (rows x cols, row-major) swizzled at ``base``; returns its row length."""
    row_bytes = tile.shape[1] * tile.itemsize
    raw = np.ascontiguousarray(tile).view(np.uint8).reshape(tile.shape[0], row_bytes)
    for r in range(tile.shape[0]):
        for c in range(0, row_bytes, 16):
            off = base + ML.swizzled_offset(r, c, row_bytes)
            shared[..., off:off + 16] = raw[r, c:c + 16]
    return row_bytes


def lane_addresses(operand: str, num: int, base: int, row_bytes: int, row0=0, col0=0):
    return base + ML.ldmatrix_offsets(operand, num, row_bytes, row0, col0)


def warp_matmul(shared, kind: str, a_base, a_row_bytes, b_base, b_row_bytes, b_store, steps, c):
    """One warp: ``steps`` mma's along K, A and B fragments loaded with ldmatrix."""
    info = ML.MMA_KINDS[kind]
    kbytes = info.k * ITEMSIZE[kind]            # bytes of one K step (32 for every kind)
    for s in range(steps):
        a = E.ldmatrix(shared, lane_addresses("a", 4, a_base, a_row_bytes, col0=s * kbytes), 4)
        if b_store == "nk":
            addr = lane_addresses("b_nk", 2, b_base, b_row_bytes, col0=s * kbytes)
            b = E.ldmatrix(shared, addr, 2)
        else:
            addr = lane_addresses("b_kn", 2, b_base, b_row_bytes, row0=s * info.k)
            b = E.ldmatrix(shared, addr, 2, trans=True)
        c = E.mma(a, b, c, kind)
    return c


CASES = [("bf16", "nk"), ("bf16", "kn"), ("f16", "nk"), ("f16", "kn"), ("tf32", "nk"),
         ("s8", "nk"), ("e4m3", "nk"), ("e5m2", "nk")]


@pytest.mark.parametrize("kind, b_store", CASES)
@given(seed=st.integers(0, 2**32 - 1))
def test_ldmatrix_mma_equals_numpy_matmul(kind, b_store, seed):
    rng = np.random.default_rng(seed)
    info, steps = ML.MMA_KINDS[kind], 2               # K = two mma steps, chained through C
    k = info.k * steps
    a, b = random_operand(rng, kind, (16, k)), random_operand(rng, kind, (k, 8))
    acc = np.int32 if info.acc_type == "s32" else np.float32
    c0 = rng.integers(-1000, 1000, (16, 8)).astype(acc)
    shared = np.zeros(8192, np.uint8)
    a_rb = store_tile(shared, 0, a)
    b_tile = b.T if b_store == "nk" else b
    b_rb = store_tile(shared, 4096, b_tile)
    c_regs = E.gather_fragment(kind, "c", c0)                     # (32, 4)
    d = warp_matmul(shared, kind, 0, a_rb, 4096, b_rb, b_store, steps, c_regs)
    got = E.scatter_fragment(kind, "c", d)
    want = c0                     # each mma rounds its D to the accumulator type once
    for s in range(steps):
        ks = slice(s * info.k, (s + 1) * info.k)
        want = (a[:, ks].astype(np.float64) @ b[ks].astype(np.float64) + want).astype(acc)
    assert got.dtype == acc
    np.testing.assert_array_equal(got, want)


def test_warps_and_cta_batches_are_independent():
    rng = np.random.default_rng(1)
    shared = np.zeros((2, 4096), np.uint8)            # two CTAs, each with two warps' tiles
    mats = {}
    for cta in range(2):
        for w in range(2):
            a, b = random_operand(rng, "bf16", (16, 16)), random_operand(rng, "bf16", (16, 8))
            store_tile(shared[cta], 1024 * w, a)
            store_tile(shared[cta], 2048 + 1024 * w, b.T)
            mats[cta, w] = (a, b)
    a_addr = np.stack([np.concatenate([lane_addresses("a", 4, 1024 * w, 32) for w in range(2)])] * 2)
    b_addr = np.stack([np.concatenate([lane_addresses("b_nk", 2, 2048 + 1024 * w, 32)
                                       for w in range(2)])] * 2)
    a_regs, b_regs = E.ldmatrix(shared, a_addr, 4), E.ldmatrix(shared, b_addr, 2)
    assert a_regs.shape == (2, 64, 4) and b_regs.shape == (2, 64, 2)
    d = E.mma(a_regs, b_regs, np.zeros((2, 64, 4), np.float32), "bf16")
    for (cta, w), (a, b) in mats.items():
        got = E.scatter_fragment("bf16", "c", d[cta, 32 * w:32 * w + 32])
        np.testing.assert_array_equal(got, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_trans_equals_loading_the_transpose(num):
    rng = np.random.default_rng(num)
    mats = rng.integers(0, 1 << 16, (num, 8, 8)).astype(np.uint16)
    shared = np.zeros(4096, np.uint8)
    for m in range(num):
        shared[256 * m:256 * m + 128] = mats[m].view(np.uint8).ravel()
        shared[2048 + 256 * m:2048 + 256 * m + 128] = np.ascontiguousarray(mats[m].T).view(np.uint8).ravel()
    lane = np.arange(32) % (8 * num)
    rows = 256 * (lane // 8) + 16 * (lane % 8)
    trans = E.ldmatrix(shared, rows, num, trans=True)
    plain_of_transpose = E.ldmatrix(shared, 2048 + rows, num)
    np.testing.assert_array_equal(trans, plain_of_transpose)
    # and the plain load follows Figure 104: lane t holds row t//4, columns 2(t%4), 2(t%4)+1
    plain = E.ldmatrix(shared, rows, num)
    t = np.arange(32)
    for m in range(num):
        lo, hi = mats[m][t // 4, 2 * (t % 4)], mats[m][t // 4, 2 * (t % 4) + 1]
        np.testing.assert_array_equal(plain[:, m], lo.astype(np.uint32) | (hi.astype(np.uint32) << 16))


@pytest.mark.parametrize("num", [1, 2])
def test_ldmatrix_ignores_addresses_of_upper_lanes(num):
    shared = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    rows = 16 * np.arange(32)
    garbage = rows.copy()
    garbage[8 * num:] = 3                   # misaligned, but never read
    np.testing.assert_array_equal(E.ldmatrix(shared, rows, num), E.ldmatrix(shared, garbage, num))


def test_ldmatrix_rejects_misaligned_and_out_of_range_rows():
    shared = np.zeros(256, np.uint8)
    with pytest.raises(E.MmaEmulationError, match="aligned"):
        E.ldmatrix(shared, np.full(32, 8), 1)
    with pytest.raises(E.MmaEmulationError, match="range"):
        E.ldmatrix(shared, np.full(32, 256), 1)
    with pytest.raises(E.MmaEmulationError, match="warps"):
        E.ldmatrix(shared, np.zeros(16, int), 1)


# ------------------------------------------------------------------------------------------ mma
@pytest.mark.parametrize("kind", sorted(k for k in ML.MMA_KINDS if k != "f64"))    # f64: 64-bit registers
def test_pack_unpack_round_trip(kind):
    rng = np.random.default_rng(3)
    info = ML.MMA_KINDS[kind]
    vals = random_operand(rng, kind, (32, info.a_regs * info.per_reg))
    regs = E.pack(vals, kind)
    assert regs.shape == (32, info.a_regs) and regs.dtype == np.uint32
    np.testing.assert_array_equal(E.unpack(regs, kind), vals.astype(np.float32 if kind != "s8" else np.int32))


def test_bf16_register_holds_lower_element_in_low_half():
    regs = E.pack(np.array([[1.0, -2.0]], ml_dtypes.bfloat16), "bf16")
    assert regs[0, 0] == 0x3F80 | (0xC000 << 16)


def test_tf32_operands_are_truncated_and_rounding_is_to_nearest_away():
    one_plus = np.array([1.0 + 2.0**-10 + 2.0**-11 + 2.0**-20], np.float32)   # keeps 2^-10
    assert E.tf32_truncate(one_plus.view(np.uint32))[0] == 1.0 + 2.0**-10
    assert E.tf32_round(one_plus).view(np.float32)[0] == 1.0 + 2.0**-9     # rounds up
    tie = np.array([1.0 + 2.0**-11], np.float32)
    assert E.tf32_round(tie).view(np.float32)[0] == 1.0 + 2.0**-10         # tie: away from zero
    assert np.isinf(E.tf32_round(np.array([np.inf], np.float32)).view(np.float32)[0])
    # an mma on un-rounded f32 bits sees the truncated value
    a = np.zeros((16, 8), np.float32)
    b = np.zeros((8, 8), np.float32)
    a[0, 0], b[0, 0] = one_plus[0], 1.0
    d = E.mma(E.gather_fragment("tf32", "a", a).view(np.uint32),
              E.gather_fragment("tf32", "b", b).view(np.uint32), np.zeros((32, 4), np.float32), "tf32")
    assert E.scatter_fragment("tf32", "c", d)[0, 0] == np.float32(1.0 + 2.0**-10)


def test_s8_accumulator_wraps():
    a = np.zeros((16, 32), np.int8)
    b = np.zeros((32, 8), np.int8)
    a[0, 0], b[0, 0] = 1, 1
    c = np.full((16, 8), 2**31 - 1, np.int32)
    d = E.mma(E.pack(E.gather_fragment("s8", "a", a), "s8"), E.pack(E.gather_fragment("s8", "b", b), "s8"),
              E.gather_fragment("s8", "c", c), "s8")
    assert E.scatter_fragment("s8", "c", d)[0, 0] == -2**31


def test_mma_rejects_wrong_register_counts():
    with pytest.raises(E.MmaEmulationError):
        E.mma(np.zeros((32, 2), np.uint32), np.zeros((32, 2), np.uint32),
              np.zeros((32, 4), np.float32), "bf16")


# ------------------------------------------------------------------------------------- cp.async
def test_cp_async_zero_fills_past_src_bytes():
    glob = np.arange(1, 33 * 16 + 1, dtype=np.int64).astype(np.uint8)
    shared = np.full(32 * 16, 0xAA, np.uint8)
    q = E.AsyncCopies()
    sizes = np.arange(32) % 17
    q.cp_async(shared, 16 * np.arange(32), glob, 16 * np.arange(32), sizes)
    q.wait_all()
    for t in range(32):
        row = shared[16 * t:16 * t + 16]
        np.testing.assert_array_equal(row[:sizes[t]], glob[16 * t:16 * t + sizes[t]])
        assert (row[sizes[t]:] == 0).all()


def test_cp_async_masked_copy_never_reads_its_source():
    glob = np.ones(64, np.uint8)
    shared = np.full(64, 7, np.uint8)
    q = E.AsyncCopies()
    # thread 1 points past the end (a ragged edge): with src_bytes 0 that is fine
    q.cp_async(shared, np.array([0, 16] + [32] * 30), glob, np.array([48, 4096] + [0] * 30),
               np.array([16, 0] + [0] * 30))
    q.wait_all()
    assert (shared[:16] == 1).all() and (shared[16:48] == 0).all() and (shared[48:] == 7).all()
    with pytest.raises(E.MmaEmulationError, match="outside"):
        q.cp_async(shared, np.zeros(32, int), glob, np.full(32, 64), 16)
    with pytest.raises(E.MmaEmulationError, match="aligned"):
        q.cp_async(shared, np.full(32, 8), glob, np.zeros(32, int), 16)
    with pytest.raises(E.MmaEmulationError, match="aligned"):
        q.cp_async(shared, np.zeros(32, int), glob, np.full(32, 4), 16)


def test_cp_async_writes_land_only_at_wait_group():
    glob = np.arange(3 * 512, dtype=np.int64).astype(np.uint8)
    shared = np.zeros(3 * 512, np.uint8)
    q = E.AsyncCopies()
    t = np.arange(32)
    for g in range(3):                             # three groups, one 512-byte stage each
        q.cp_async(shared, 512 * g + 16 * t, glob, 512 * g + 16 * t)
        q.commit_group()
    assert not shared.any()                        # nothing visible without a wait
    assert q.pending_mask(shared).all()
    q.wait_group(2)                                # the oldest group only
    np.testing.assert_array_equal(shared[:512], glob[:512])
    assert not shared[512:].any()
    np.testing.assert_array_equal(q.pending_mask(shared), np.arange(1536) >= 512)
    q.wait_group(2)                                # already satisfied: no change
    assert not shared[512:].any()
    q.wait_group(0)
    np.testing.assert_array_equal(shared, glob)
    assert not q.pending_mask(shared).any()


def test_cp_async_uncommitted_copies_wait_for_commit():
    glob = np.full(512, 5, np.uint8)
    shared = np.zeros(512, np.uint8)
    q = E.AsyncCopies()
    q.cp_async(shared, 16 * np.arange(32), glob, 16 * np.arange(32))
    q.wait_group(0)                                # not committed: not in any group
    assert not shared.any()
    q.commit_group()
    q.commit_group()                               # an empty group is trivially complete
    q.wait_group(1)
    assert (shared == 5).all()


def test_cp_async_reads_global_at_issue_and_batches_ctas():
    glob = np.arange(1024, dtype=np.int64).astype(np.uint8)
    shared = np.zeros((2, 512), np.uint8)
    q = E.AsyncCopies()
    offsets = np.stack([16 * np.arange(32), 512 + 16 * np.arange(32)])
    q.cp_async(shared, np.stack([16 * np.arange(32)] * 2), glob, offsets)
    glob[:] = 0                                    # later global writes do not matter
    q.wait_all()
    np.testing.assert_array_equal(shared[0], np.arange(512).astype(np.uint8))
    np.testing.assert_array_equal(shared[1], (512 + np.arange(512)).astype(np.uint8))


def test_cp_async_inactive_threads_issue_nothing_and_wait_reports_writers():
    glob = np.full(512, 9, np.uint8)
    shared = np.zeros((2, 512), np.uint8)           # per-thread addresses shared by both CTAs
    q = E.AsyncCopies()
    active = np.arange(32) % 2 == 0
    q.cp_async(shared, 16 * np.arange(32), glob, 16 * np.arange(32), active=active)
    q.commit_group()
    (mem, addr), = q.wait_group(0)
    assert addr.shape == (2, 32) and (addr[:, ~active] == -1).all()
    written = shared.reshape(2, 32, 16)
    assert (written[:, active] == 9).all() and (written[:, ~active] == 0).all()


def test_ldmatrix_broadcasts_lane_addresses_over_a_cta_batch():
    shared = np.stack([np.zeros(512, np.uint8), np.full(512, 1, np.uint8)])
    regs = E.ldmatrix(shared, 16 * np.arange(32), 4)
    assert regs.shape == (2, 32, 4)
    assert (regs[0] == 0).all() and (regs[1] == 0x01010101).all()


def test_dmma_is_a_times_b_plus_c_on_the_fragment_maps():
    """mma.m8n8k4.f64 on every warp: lane (g, t) holds A[g, t], B[t, g] and C[g, 2t:2t+2]."""
    rng = np.random.default_rng(8)
    a, b, c = rng.standard_normal((2, 8, 4)), rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 8, 8))
    regs = [E.gather_fragment("f64", op, m).reshape(64, -1) for op, m in (("a", a), ("b", b), ("c", c))]
    lane = np.arange(32)
    np.testing.assert_array_equal(regs[0][:32, 0], a[0, lane >> 2, lane % 4])
    np.testing.assert_array_equal(regs[1][:32, 0], b[0, lane % 4, lane >> 2])
    np.testing.assert_array_equal(regs[2][:32, 1], c[0, lane >> 2, 2 * (lane % 4) + 1])
    d = E.mma(*regs, "f64")
    assert d.shape == (64, 2) and d.dtype == np.float64
    want = E.gather_fragment("f64", "c", a @ b + c).reshape(64, 2)
    np.testing.assert_allclose(d, want, rtol=1e-15, atol=1e-15)
