"""cp.async pipelining of the loads feeding ``tj.dot`` in ``tj.range(..., stages=N)``: the ring's
structure in SIMT IR, exact results on the emulator for every stage count and short trip
counts (ragged K included), and that the emulator catches a missing wait or barrier."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit import emulator, simt
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec


@tj.kernel
def matmul(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=STAGES):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


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


def simt_fn(kernel=matmul, stages=3, bk=BK):
    tile = kernel.tile_ir((SPEC, SPEC, OUT), {"BM": BM, "BN": BN, "BK": bk, "STAGES": stages})
    return compile_to_simt(tile, num_warps=4)


def data(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)     # small integers: every sum is exact
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def launch(fn, a, b, m, n):
    c = np.full((m, n), np.nan, np.float32)
    emulator.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    return c


def ops(block, kind):
    return [o for o in block.ops if o.op is kind]


def blocks(block):
    yield block
    for o in block.ops:
        for region in o.regions:
            yield from blocks(region)


def pipelined_branch(fn):
    """The block holding the ring's prologue and its pipelined loop (no runtime twin: the
    ``aligned16`` specialisation alone proves every row stride 16-byte aligned)."""
    def is_main(o):
        return o.op is SimtOp.FOR and any(x.op is SimtOp.CP_ASYNC for x in o.regions[0].ops)
    found = [b for b in blocks(fn.body) if any(is_main(o) for o in b.ops)]
    assert found and not [o for o in fn.walk() if o.op is SimtOp.IF and
                                    any(x.op is SimtOp.CP_ASYNC for x in o.regions[1].walk())]
    return found[-1]                  # the innermost: an outer loop's body holds the prologue too


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
    assert set(ops(body, SimtOp.CP_ASYNC)) <= fn.meta["self_synced_ops"]
    prologue = ops(pipelined_branch(fn), SimtOp.CP_ASYNC)      # 2 rings x (stages - 1) slots
    assert [o in fn.meta["self_synced_ops"] for o in prologue] == [False] * 2 + [True] * 2 * (stages - 2)
    # k step 0's fragments are read before the loop and then one iteration ahead: they are
    # the loop's extra carried value, and the body's ldmatrix follows its wait and barrier
    loop = main_loop(fn)
    assert len(loop.operands) == 3 + len(loop.results) and len(loop.results) == 2
    assert len(ops(pipelined_branch(fn), SimtOp.LDMATRIX)) == 2
    kinds = [o.op for o in body.ops]
    assert kinds.index(SimtOp.BARRIER) < kinds.index(SimtOp.LDMATRIX) < kinds.index(SimtOp.MMA)


@pytest.mark.parametrize("stages", [2, 3])
def test_copies_issue_between_the_k_steps(stages):
    """With two k steps the body runs: k step 1's ldmatrix (double-buffered fragments), k step
    0's MMAs (fragments prefetched by the previous iteration), the copies of a later
    iteration, the wait and barrier, the next slot's k step 0 ldmatrix, k step 1's MMAs."""
    body = main_loop(simt_fn(stages=stages, bk=32)).regions[0]
    kinds = [o.op for o in body.ops if o.op in (SimtOp.MMA, SimtOp.CP_ASYNC, SimtOp.CP_ASYNC_COMMIT,
                                                  SimtOp.LDMATRIX, SimtOp.CP_ASYNC_WAIT, SimtOp.BARRIER)]
    assert kinds == [SimtOp.LDMATRIX] * 2 + [SimtOp.MMA] * 2 + [SimtOp.CP_ASYNC] * 2 + \
        [SimtOp.CP_ASYNC_COMMIT, SimtOp.CP_ASYNC_WAIT, SimtOp.BARRIER] + [SimtOp.LDMATRIX] * 2 + \
        [SimtOp.MMA] * 2


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


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("trips", [0, 1, 2, 5])
def test_two_k_steps_per_tile(stages, trips):
    fn = simt_fn(stages=stages, bk=32)
    for k in sorted({trips * 32, max(0, trips * 32 - 8), max(0, trips * 32 - 24)}):
        a, b, ref = data(40, 48, k, seed=trips)
        np.testing.assert_array_equal(launch(fn, a, b, 40, 48), ref)


def test_one_element_rows_take_the_synchronous_loop():
    """A (k, 1) array has a row stride of one element: its spec is not ``aligned16``."""
    from tilejit.kernel import classify_argument
    a, b, ref = data(3, 1, 40)
    assert not classify_argument("b", b)[0].aligned16
    c = np.zeros((3, 1), np.float32)
    matmul[(1, 1)](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=3)
    np.testing.assert_array_equal(c, ref)


def test_rows_past_a_single_row_copy_from_aligned_addresses(monkeypatch):
    """A (1, k) array's row stride is free (``aligned16`` exempts a dim of size 1), yet the
    zero-byte copies of the tile's rows past it still get 16-byte aligned source addresses."""
    rows = np.random.default_rng(1).integers(-3, 4, (2, 36)).astype(np.float16)
    a = rows[:1, :32]                                       # strides (72, 2) bytes
    _, b, _ = data(1, 40, 32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    seen = []
    original = emulator.Machine.op_CP_ASYNC

    def checked(self, o, f):
        seen.append(np.asarray(f[o.operands[1]]) * 2 % 16)
        return original(self, o, f)
    monkeypatch.setattr(emulator.Machine, "op_CP_ASYNC", checked)
    np.testing.assert_array_equal(launch(simt_fn(stages=3), a, b, 1, 40), ref)
    assert seen and not any(x.any() for x in seen)


# ------------------------------------------------------------------- the emulator's bookkeeping
def test_missing_wait_is_caught():
    fn = simt_fn(stages=3)
    body = main_loop(fn).regions[0]
    body.ops[:] = [o for o in body.ops if o.op is not SimtOp.CP_ASYNC_WAIT]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulator.EmulatorError, match="async copy has not landed"):
        launch(fn, a, b, 32, 32)


def test_too_weak_wait_is_caught():
    fn = simt_fn(stages=3)
    wait = ops(main_loop(fn).regions[0], SimtOp.CP_ASYNC_WAIT)[0]
    wait.attrs = simt.WaitAttrs(2)
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulator.EmulatorError, match="async copy has not landed"):
        launch(fn, a, b, 32, 32)


def test_missing_barrier_is_a_race():
    fn = simt_fn(stages=2)
    body = main_loop(fn).regions[0]
    body.ops[:] = [o for o in body.ops if o.op is not SimtOp.BARRIER]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulator.EmulatorError, match="race"):
        launch(fn, a, b, 32, 32)


def test_missing_barrier_in_the_synchronous_loop_is_a_race():
    fn = simt_fn(stages=1)
    for o in fn.walk():
        for region in o.regions:
            region.ops[:] = [x for x in region.ops if x.op is not SimtOp.BARRIER]
    a, b, _ = data(32, 32, 64)
    with pytest.raises(emulator.EmulatorError, match="race"):
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
    emulator.run(fn, (2,), [a, b, c])
    np.testing.assert_array_equal(c, ref.astype(np.float16))
    del branch.ops[barriers[0]]
    with pytest.raises(emulator.EmulatorError, match="race"):
        emulator.run(fn, (2,), [a, b, c])


@tj.kernel
def nested_rings(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr):
    """A pipelined loop inside another whose DOT comes after it: the inner loop must hand the
    outer loop's pending copies and prefetch back."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for j in tj.range(0, 2 * BK, BK, stages=STAGES):
        for k in tj.range(2 * BK, a.shape[1], BK, stages=STAGES):
            acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
        acc = tj.dot(tj.load(a, (m, j), (BM, BK)), tj.load(b, (j, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_loop_inside_a_pipelined_loop(stages):
    fn = simt_fn(nested_rings, stages)
    loops = [o for o in fn.walk() if o.op is SimtOp.FOR]
    assert len(loops) == 2 and all(len(o.results) == 2 for o in loops)   # acc and fragments each
    a, b, _ = data(40, 48, 72)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64[:, :2 * BK] @ b64[:2 * BK] + 2 * (a64[:, 2 * BK:] @ b64[2 * BK:])
    np.testing.assert_array_equal(launch(fn, a, b, 40, 48), ref)
