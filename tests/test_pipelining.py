"""cp.async pipelining of the loads feeding ``tj.dot`` in ``tj.range(..., stages=N)``: the ring's
structure in SIMT IR, exact results on the emulator for every stage count and short trip
counts (ragged K included), and that the emulator catches a missing wait or barrier."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit import simt
from tilejit.backends import emulate
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.examples.matmul import matmul_kernel
from tilejit.specs import ArraySpec


matmul = matmul_kernel.kernel          # the example's kernel, without its tuner


@tj.kernel
def matmul_offset_loop(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr):
    """K loop that starts at BK and derives the B row from the induction variable."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(BK, a.shape[1] + BK, BK, stages=STAGES):
        kb = k - BK
        acc = tj.dot(tj.load(a, (m, kb), (BM, BK)), tj.load(b, (kb, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


BM, BN, BK = 32, 32, 16
SPEC = ArraySpec(D.float16, 2, True, True, False)
OUT = ArraySpec(D.float32, 2, True, True, False)


def simt_fn(kernel=matmul, stages=3):
    tile = kernel.tile_ir((SPEC, SPEC, OUT), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=4)


def data(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)     # small integers: every sum is exact
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def launch(fn, a, b, m, n):
    c = np.full((m, n), np.nan, np.float32)
    emulate.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    return c


def ops(block, kind):
    return [o for o in block.ops if o.op is kind]


def pipelined_branch(fn):
    """The block of the pipelined loop: the kernel's own (no run-time check of the rows'
    alignment, no synchronous copy of the loop beside it)."""
    assert not [o for o in fn.walk() if o.op is SimtOp.IF]
    blocks = [fn.body] + [r for o in fn.walk() for r in o.regions]
    return next(b for b in blocks if any(o.op is SimtOp.CP_ASYNC_COMMIT for o in b.ops))


def main_loop(fn):
    return next(o for o in pipelined_branch(fn).ops if o.op is SimtOp.FOR)


# --------------------------------------------------------------------------------- structure
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_ring_structure(stages):
    fn = simt_fn(stages=stages)
    body = main_loop(fn).regions[0]
    assert len(ops(pipelined_branch(fn), SimtOp.CP_ASYNC_COMMIT)) == stages - 1   # prologue groups
    waits = ops(body, SimtOp.CP_ASYNC_WAIT)
    assert [w.attrs.n for w in waits] == [stages - 2]
    assert len(ops(body, SimtOp.BARRIER)) == 1                           # one per iteration
    assert len(ops(body, SimtOp.CP_ASYNC)) == 2 and len(ops(body, SimtOp.CP_ASYNC_COMMIT)) == 1
    assert len(ops(body, SimtOp.LOAD_GLOBAL)) == 0                       # no synchronous loads left
    # the accumulator stays in its mma layout through the iter_args: no conversion per iteration
    assert not [o for o in body.walk() if o.op in (SimtOp.LOAD_SHARED, SimtOp.STORE_SHARED)]
    # 2x2 warps of 16x16: 1 m16 x 2 n8 x 1 k16 mmas, one ldmatrix.x4 for A and one .trans for B
    assert len(ops(body, SimtOp.MMA)) == 2 and len(ops(body, SimtOp.LDMATRIX)) == 2
    assert set(ops(body, SimtOp.CP_ASYNC)) <= fn.meta.self_synced_ops
    prologue = ops(pipelined_branch(fn), SimtOp.CP_ASYNC)      # 2 rings x (stages - 1) slots
    assert [o in fn.meta.self_synced_ops for o in prologue] == [False] * 2 + [True] * 2 * (stages - 2)


def test_stages_one_keeps_synchronous_loads():
    fn = simt_fn(stages=1)
    assert not [o for o in fn.walk() if o.op is SimtOp.CP_ASYNC]
    assert [o for o in fn.walk() if o.op is SimtOp.MMA]


# -------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("trips", [0, 1, 2, 3, 4, 5])
def test_trip_counts_and_ragged_k(stages, trips):
    fn = simt_fn(stages=stages)
    for k in sorted({trips * BK, max(0, trips * BK - 8)}):    # full and ragged last step
        a, b, ref = data(40, 48, k, seed=trips)
        np.testing.assert_array_equal(launch(fn, a, b, 40, 48), ref)


@pytest.mark.parametrize("stages", [2, 3])
def test_offsets_computed_from_the_induction_variable(stages):
    fn = simt_fn(matmul_offset_loop, stages)
    assert [o for o in fn.walk() if o.op is SimtOp.CP_ASYNC]
    a, b, ref = data(33, 40, 56)          # rows of 16-byte multiples, as SPEC says
    np.testing.assert_array_equal(launch(fn, a, b, 33, 40), ref)


def test_unaligned_rows_fall_back_to_synchronous_loads():
    a, b, ref = data(20, 20, 36)            # 72-byte rows: not 16-byte aligned
    c = np.zeros((20, 20), np.float32)
    matmul[(1, 1)](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=3)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("k", [40, 64])
def test_one_element_rows_are_not_aligned(k):
    """A (k, 1) array has a row stride of one element: not 16-byte aligned, so the kernel it
    launches is specialised without rings (and matches NumPy)."""
    from tilejit.specs import array_spec, contiguous_strides
    assert not array_spec(D.float16, (k, 1), contiguous_strides((k, 1)), 0).aligned16
    a, b, ref = data(3, 1, k)
    c = np.zeros((3, 1), np.float32)
    matmul[(1, 1)](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=3)
    np.testing.assert_array_equal(c, ref)


def test_one_row_with_an_unaligned_row_stride_takes_the_ring():
    """A (1, k) view of a matrix whose rows are 72 bytes apart counts as aligned (its one row
    is); the ring copies it with no run-time check of the strides: the zero-filled chunks of
    the rows outside read from the array's first element, so every cp.async address the
    emulator sees is 16-byte aligned."""
    fn = simt_fn(stages=3)
    assert not [o for o in fn.walk() if o.op is SimtOp.IF]
    rng = np.random.default_rng(5)
    big = rng.integers(-3, 4, (4, 36)).astype(np.float16)
    a = big[:1, :32]                       # rows 72 bytes apart; one row
    b = rng.integers(-3, 4, (32, 40)).astype(np.float16)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_array_equal(launch(fn, a, b, 1, 40), ref)


# ------------------------------------------------------------------- the emulator's bookkeeping
def test_missing_wait_is_caught():
    fn = simt_fn(stages=3)
    body = main_loop(fn).regions[0]
    body.ops[:] = [o for o in body.ops if o.op is not SimtOp.CP_ASYNC_WAIT]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulate.EmulatorError, match="async copy has not landed"):
        launch(fn, a, b, 32, 32)


def test_too_weak_wait_is_caught():
    fn = simt_fn(stages=3)
    wait = ops(main_loop(fn).regions[0], SimtOp.CP_ASYNC_WAIT)[0]
    wait.attrs = simt.WaitAttrs(2)
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulate.EmulatorError, match="async copy has not landed"):
        launch(fn, a, b, 32, 32)


def test_missing_barrier_is_a_race():
    fn = simt_fn(stages=2)
    body = main_loop(fn).regions[0]
    body.ops[:] = [o for o in body.ops if o.op is not SimtOp.BARRIER]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulate.EmulatorError, match="race"):
        launch(fn, a, b, 32, 32)


def test_missing_barrier_in_the_synchronous_loop_is_a_race():
    fn = simt_fn(stages=1)
    for o in fn.walk():
        for region in o.regions:
            region.ops[:] = [x for x in region.ops if x.op is not SimtOp.BARRIER]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulate.EmulatorError, match="race"):
        launch(fn, a, b, 32, 32)


@pytest.mark.parametrize("shape", [(128, 32), (32, 128), (64, 64)])
def test_async_copies_write_shared_memory_without_bank_conflicts(shape):
    """Each 8-lane phase of a warp's 16-byte copies covers all 32 banks once."""
    from tilejit.passes import layouts as L
    from tilejit.passes import mma_layouts as ML
    from tilejit.passes.assign_layouts import memory_layout
    copy = memory_layout(shape, SPEC, 8)
    table = copy.table()[:, ::8]                               # first element of each chunk
    offsets = ML.swizzled_offset(table[..., 0], table[..., 1] * 2, shape[1] * 2)
    for warp in range(8):
        for r in range(offsets.shape[1]):
            lanes = offsets[32 * warp:32 * warp + 32, r]
            assert [ML.wavefronts(lanes[p:p + 8], 16) for p in range(0, 32, 8)] == [1] * 4
    assert L.contiguous_run(copy) >= 8


@tj.kernel
def two_products(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr):
    """An outer loop around the pipelined one: the ring is refilled after the epilogue's
    shared-memory conversion (a float16 store) reused its bytes."""
    m = tj.program_id(0) * BM
    for r in range(2):
        n = r * BN
        acc = tj.zeros((BM, BN), tj.float32)
        for k in tj.range(0, a.shape[1], BK, stages=STAGES):
            acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
        tj.store(c, (m, n), acc.to(tj.float16))


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_loop_inside_another_loop(stages):
    a, b, ref = data(40, 64, 48)
    c = np.zeros((40, 64), np.float16)
    two_products[(2,)](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages)
    np.testing.assert_array_equal(c, ref.astype(np.float16))


def test_refilling_a_ring_whose_bytes_were_reused_needs_the_barrier_placed_before_it():
    f16 = ArraySpec(D.float16, 2, True, True, False)
    tile = two_products.tile_ir((SPEC, SPEC, f16), {"BM": BM, "BN": BN, "BK": BK, "STAGES": 3})
    fn = compile_to_simt(tile, num_warps=4)
    branch = pipelined_branch(fn)
    first_copy = next(i for i, o in enumerate(branch.ops) if o.op is SimtOp.CP_ASYNC)
    barriers = [i for i, o in enumerate(branch.ops[:first_copy]) if o.op is SimtOp.BARRIER]
    assert len(barriers) == 1
    a, b, ref = data(40, 64, 48)
    c = np.zeros((40, 64), np.float16)
    emulate.run(fn, (2,), [a, b, c])
    np.testing.assert_array_equal(c, ref.astype(np.float16))
    del branch.ops[barriers[0]]
    with pytest.raises(emulate.EmulatorError, match="race"):
        emulate.run(fn, (2,), [a, b, c])


@tj.kernel
def int8_matmul(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.int32)
    for k in tj.range(0, a.shape[1], BK, stages=3):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


def test_a_pipelined_int8_gemm_copies_one_byte_elements_in_16_byte_chunks(monkeypatch):
    """One-byte elements: 16 per cp.async chunk (the ring's chunk layout takes every 16th
    register), on the s8 mma path."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(3)
    a = rng.integers(-100, 100, (128, 256)).astype(np.int8)
    b = rng.integers(-100, 100, (256, 128)).astype(np.int8)
    c = np.zeros((128, 128), np.int32)
    int8_matmul[(2, 2)](a, b, c, BM=64, BN=64, BK=64, num_warps=4)       # 32 bytes of A per thread
    specs, consts, _ = int8_matmul.specialise(int8_matmul.bind((a, b, c), {"BM": 64, "BN": 64, "BK": 64}))
    fn = compile_to_simt(int8_matmul.tile_ir(specs, consts), num_warps=4)
    assert any(o.op is SimtOp.CP_ASYNC for o in fn.walk()) and any(o.op is SimtOp.MMA for o in fn.walk())
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("bm, bn, bk, warps", [(32, 16, 16, 4), (16, 32, 32, 4), (32, 32, 16, 8)])
def test_small_tiles_copy_each_byte_from_one_thread(bm, bn, bk, warps):
    """A tile with fewer 16-byte chunks than threads leaves replicas in the copy layout: they
    must not issue the same cp.async (compute-sanitizer's racecheck reported a write-write race
    on the H200 for 32x16x16 at 4 warps); the emulator refuses such a copy."""
    tile = matmul.tile_ir((SPEC, SPEC, OUT), {"BM": bm, "BN": bn, "BK": bk, "STAGES": 3})
    fn = compile_to_simt(tile, num_warps=warps)
    copies = [o for o in fn.walk() if o.op is SimtOp.CP_ASYNC]
    assert copies and any(len(o.operands) == 5 for o in copies)   # the replicated ones get a flag
    a, b, ref = data(45, 40, 56)             # ragged M; rows of 16-byte multiples, as SPEC says
    c = np.full((45, 40), np.nan, np.float32)
    emulate.run(fn, (-(-45 // bm), -(-40 // bn)), [a, b, c])
    np.testing.assert_array_equal(c, ref)
    from tilejit import codegen
    from conftest import assemble_or_skip
    ptx = codegen.compile_ptx(fn, "sm_80")
    assert ptx.count("cp.async.cg.shared.global") >= 3
    assemble_or_skip(ptx, "sm_80")


def test_emulator_refuses_two_threads_copying_into_the_same_bytes():
    fn = compile_to_simt(matmul.tile_ir((SPEC, SPEC, OUT), {"BM": 32, "BN": 16, "BK": 16, "STAGES": 3}),
                         num_warps=4)
    for o in fn.walk():
        if o.op is SimtOp.CP_ASYNC:
            o.operands = o.operands[:4]          # every replica issues its copy again
    a, b, _ = data(32, 16, 32)
    with pytest.raises(emulate.EmulatorError, match="two threads of one CP_ASYNC"):
        emulate.run(fn, (1, 1), [a, b, np.zeros((32, 16), np.float32)])
