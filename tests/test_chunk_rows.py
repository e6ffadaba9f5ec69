"""Row tiles larger than the registers are split into loops over chunks (``passes.chunk_rows``),
and the kernels give NumPy's results on emulate (which runs the compiled SIMT program)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import pipeline
from tilejit.passes import chunk_rows as chunk_rows_module
from tilejit.passes.chunk_rows import CHUNK_VALUES, chunk_rows, plan_chunks

from examples import layernorm, rmsnorm, softmax
from test_warps import softmax_rows  # noqa: E402  (several rows per program)

BF16 = tj.bfloat16.np


def tile_ir(kernel, *args, **consts) -> ir.Function:
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return pipeline.clone_function(kernel.tile_ir(specs, consts))


def widest(fn: ir.Function) -> int:
    return max((r.type.numel for o in fn.walk() for r in o.results
                if isinstance(r.type, ir.TileType)), default=0)


@tj.kernel
def row_stats(x, lo, hi, total, BLOCK: tj.constexpr):
    """min, max (keepdims=False) and an int sum of a row, with an arange-based column count."""
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK))
    cols = tj.arange(0, BLOCK)[None, :]
    tj.store(lo, (row,), tj.min(tj.where(cols < x.shape[1], t, 1000), axis=1))
    tj.store(hi, (row,), tj.max(t, axis=1))
    tj.store(total, (row,), tj.sum(tj.where(cols < x.shape[1], 1, 0), axis=1))


@pytest.fixture(autouse=True)
def one_cta_per_row(monkeypatch):
    """Rows a cluster would share (``passes.cluster_rows``, sm_90 and emulate) stay in one CTA, so
    that these tests reach the chunk loops (what sm_80 and ``TILEJIT_CLUSTER=0`` run)."""
    monkeypatch.setenv("TILEJIT_CLUSTER", "0")


@pytest.fixture
def plain_loops(monkeypatch):
    """Chunk loops without the prefetch and the online softmax (the structure the tests read)."""
    monkeypatch.setattr(chunk_rows_module, "PREFETCH", False)
    monkeypatch.setattr(chunk_rows_module, "ONLINE_SOFTMAX", False)
    monkeypatch.setattr(chunk_rows_module, "ELEMENTWISE_ACC", True)


VARIANTS = {"default": {}, "per-chunk reduce": {"ELEMENTWISE_ACC": False}, "no stash": {"STASH": False},
            "online, prefetched": {"ONLINE_SOFTMAX": True, "PREFETCH": True},
            "online, prefetched, per-chunk": {"ONLINE_SOFTMAX": True, "PREFETCH": True, "ELEMENTWISE_ACC": False},
            "two-pass variance": {"ONE_PASS_VARIANCE": False},
            "one-pass variance, stashed rows off": {"ONE_PASS_VARIANCE": True, "STASH": False}}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request, monkeypatch):
    """Each combination of the pass's switches (each must give the unsplit results)."""
    for name, value in VARIANTS[request.param].items():
        monkeypatch.setattr(chunk_rows_module, name, value)
    for kernel in (softmax.softmax_kernel, layernorm.layernorm_kernel, rmsnorm.rmsnorm_kernel, softmax_rows,
                   globals()["row_stats"]):
        k = getattr(kernel, "kernel", kernel)
        k._cache.clear()
        k._fast.clear()
    return request.param


def loops_of(fn: ir.Function) -> list:
    return [o for o in fn.body.ops if o.op is TileOp.FOR]


def test_a_65536_column_softmax_becomes_three_chunk_loops(plain_loops):
    """max, sum and the store each loop over 4 chunks of 16384 columns (16 values per thread
    at 32 warps); nothing the size of the row is left, and the chosen warps are 32.  The
    reduction loops carry a chunk-shaped accumulator (no REDUCE, so no barrier, inside them)
    and reduce it once after the loop."""
    x = np.zeros((2, 65536), np.float32)
    fn = tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)
    plan = plan_chunks(fn)
    assert (plan.width, plan.chunk) == (65536, 16384)
    loops = loops_of(chunk_rows(fn))
    assert len(loops) == 3
    assert all([int(b.owner.attrs.value) for b in o.operands[:3]] == [0, 65536, 16384] for o in loops)
    assert [o.op for o in loops[-1].regions[0].ops if o.op in (TileOp.LOAD, TileOp.STORE)] == [TileOp.LOAD, TileOp.STORE]
    for loop in loops[:2]:
        assert [r.type.shape for r in loop.results] == [(1, 16384)]
        assert not any(o.op is TileOp.REDUCE for o in loop.regions[0].ops)
        after = fn.body.ops[fn.body.ops.index(loop) + 1]
        assert after.op is TileOp.REDUCE and after.operands[0] is loop.results[0]
    assert widest(fn) == 16384 and CHUNK_VALUES == 16384
    assert softmax.softmax_kernel.inspect(x, x, BLOCK=65536).num_warps == 32


def test_the_online_softmax_and_the_prefetch_shape_the_loops(monkeypatch):
    """With the running max, softmax has two loops (max and sum together, then the store);
    with the prefetch, chunk 0 is loaded before each loop and each iteration loads the next
    chunk (clamped to the last) first and carries it, in half-size chunks."""
    monkeypatch.setattr(chunk_rows_module, "PREFETCH", True)
    monkeypatch.setattr(chunk_rows_module, "ONLINE_SOFTMAX", True)
    monkeypatch.setattr(chunk_rows_module, "ELEMENTWISE_ACC", False)
    x = np.zeros((2, 65536), np.float32)
    fn = chunk_rows(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536))
    loops = loops_of(fn)
    assert len(loops) == 2 and plan_chunks(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)).chunk == 8192
    online, store = loops
    assert [r.type.shape for r in online.results] == [(1, 1), (1, 1), (1, 8192)]
    assert [o.op for o in online.regions[0].ops if o.op in (TileOp.LOAD, TileOp.REDUCE)] == [
        TileOp.LOAD, TileOp.REDUCE, TileOp.REDUCE]
    for loop in loops:
        before = fn.body.ops[fn.body.ops.index(loop) - 1]
        assert before.op is TileOp.LOAD and loop.operands[-1] is before.result
        body = loop.regions[0].ops
        assert body[-1].operands[-1] is next(o for o in body if o.op is TileOp.LOAD).result
        clamp = next(o for o in body if o.op is TileOp.MINIMUM)
        assert int(clamp.operands[1].owner.attrs.value) == 65536 - 8192


@pytest.mark.parametrize("rows", ["all -inf", "first half -inf"])
def test_the_online_softmax_keeps_the_unsplit_results_on_infinite_rows(rows, variant, monkeypatch):
    """A row that is -inf throughout gives NaN (as exp(-inf - -inf) does unsplit); a row whose
    first chunks are all -inf gives the right softmax (the running max is -inf there)."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(5).standard_normal((2, 40000)).astype(np.float32)
    x[0, :40000 if rows == "all -inf" else 20000] = -np.inf
    with np.errstate(all="ignore"):
        want = softmax.reference(x)
    got = softmax.run(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    tj.testing.assert_close(np.nan_to_num(got), np.nan_to_num(want))


@pytest.mark.parametrize("cols,chunk", [(16384, None), (32768, 16384), (131072, 16384)])
def test_rows_within_the_registers_are_left_alone_and_longer_ones_split(cols, chunk, plain_loops):
    x = np.zeros((2, cols), np.float32)
    plan = plan_chunks(tile_ir(softmax.softmax_kernel, x, x, BLOCK=cols))
    assert (plan.chunk if plan else None) == chunk


def test_16_bit_long_rows_run_at_16_warps_with_half_the_chunk(plain_loops):
    """Long rows get 16 values per thread per chunk: float32 at 32 warps and chunks of 16384,
    bfloat16 at 16 warps and chunks of 8192 (layernorm's three loads share 16384: 4096 both)."""
    for dtype, warps, chunk, ln_chunk in [(np.float32, 32, 16384, 4096), (BF16, 16, 8192, 4096)]:
        for cols in (32768, 65536):
            x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
            plan = plan_chunks(tile_ir(softmax.softmax_kernel, x, x, BLOCK=cols))
            assert (plan.num_warps, plan.chunk) == (warps, chunk), (dtype, cols)
            plan = plan_chunks(tile_ir(layernorm.layernorm_kernel, x, w, w, x, 1e-5, BLOCK=cols))
            assert (plan.num_warps, plan.chunk) == (warps, ln_chunk), (dtype, cols)


def test_the_loads_of_a_loop_share_the_budget(plain_loops):
    """layernorm's last loop loads x, weight and bias: 3 loads, so chunks of 4096 (not 16384);
    RMSNorm's two loads get 8192."""
    x, w = np.zeros((2, 65536), np.float32), np.zeros(65536, np.float32)
    assert plan_chunks(tile_ir(layernorm.layernorm_kernel, x, w, w, x, 1e-5, BLOCK=65536)).chunk == 4096
    assert plan_chunks(tile_ir(rmsnorm.rmsnorm_kernel, x, w, x, 1e-5, BLOCK=65536)).chunk == 8192


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("cols", [65536, 40000, 20000])
def test_long_row_kernels_match_numpy_on_emulate(dtype, cols, variant, monkeypatch):
    """softmax, layernorm and RMSNorm over rows past the registers (ragged ends included: the
    last chunk is partly or wholly past the row), against float64 NumPy."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((2, cols)) * 3).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    tj.testing.assert_close(softmax.run(x), softmax.reference(x).astype(dtype))
    tj.testing.assert_close(layernorm.run(x, w, b), layernorm.reference(x, w, b).astype(dtype))
    tj.testing.assert_close(rmsnorm.run(x, w), rmsnorm.reference(x, w).astype(dtype))


@pytest.mark.parametrize("kernel,cols,dtype,stashed", [
    ("softmax", 32768, BF16, 1), ("softmax", 32768, np.float32, 1),   # 64 KiB at 16 warps, 128 at 32
    ("softmax", 65536, np.float32, 0),         # 256 KiB: past STASH_BYTES, read three times
    ("softmax", 65536, BF16, 0),               # 128 KiB would leave one of the two 16-warp CTAs an SM holds
    ("layernorm", 32768, BF16, 1),             # x (read by three loops); weight and bias once each
    ("rmsnorm", 32768, BF16, 1)])
def test_a_long_row_read_by_several_loops_is_stashed_once(kernel, cols, dtype, stashed, plain_loops):
    """The first loop that loads a row chunk STASHes it; the later loops UNSTASH it instead of
    loading it again; the SIMT program has one shared buffer of the whole row for it."""
    x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
    args = {"softmax": (x, x), "layernorm": (x, w, w, x, 1e-5), "rmsnorm": (x, w, x, 1e-5)}[kernel]
    k = {"softmax": softmax.softmax_kernel, "layernorm": layernorm.layernorm_kernel, "rmsnorm": rmsnorm.rmsnorm_kernel}[kernel]
    fn = chunk_rows(tile_ir(k, *args, BLOCK=cols))
    ops = [o.op for o in fn.walk()]
    loads = sum(1 for o in fn.walk() if o.op is TileOp.LOAD and o.operands[0] is fn.args[0])
    assert ops.count(TileOp.STASH) == stashed and loads == (1 if stashed else len(loops_of(fn)))
    assert ops.count(TileOp.UNSTASH) == (len(loops_of(fn)) - 1 if stashed else 0)
    simt = pipeline.compile_to_simt(tile_ir(k, *args, BLOCK=cols), num_warps=16, cluster=False)
    assert (simt.meta.shared_bytes >= cols * np.dtype(dtype).itemsize) == bool(stashed)
    text = ir.print_function(fn)
    assert ir.print_function(ir.parse_function(text)) == text


def test_a_strided_row_goes_through_the_stash_across_threads(monkeypatch):
    """A row with a non-unit column stride is loaded one element per thread but read back from
    the stash 16 bytes per thread: other threads' bytes, after a barrier (the emulator's race
    check would catch a missing one)."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(7)
    big = (rng.standard_normal((2, 2 * 20000)) * 3).astype(np.float32)
    x = big[:, ::2]
    tj.testing.assert_close(softmax.run(x), softmax.reference(x).astype(np.float32))


def test_several_rows_per_program_and_the_in_place_softmax(variant, monkeypatch):
    """(2, 32768) tiles split along the columns; y aliasing x is safe because each chunk is
    read before it is written."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(3).standard_normal((4, 30000)).astype(np.float32)
    want = softmax.reference(x)
    assert plan_chunks(tile_ir(softmax_rows, x, x, R=2, BLOCK=32768)).chunk == (4096 if "prefetched" in variant else 8192)
    y = np.full_like(x, np.nan)
    softmax_rows[(2,)](x, y, R=2, BLOCK=32768)
    tj.testing.assert_close(y, want)
    softmax_rows[(2,)](x, x, R=2, BLOCK=32768)
    tj.testing.assert_close(x, want)


def test_min_max_and_integer_sums_and_arange_chunks(variant, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(4).integers(-500, 500, (3, 50000)).astype(np.int32)
    lo, hi, total = (np.zeros(3, np.int32) for _ in range(3))
    assert plan_chunks(tile_ir(row_stats, x, lo, hi, total, BLOCK=65536)) is not None
    row_stats[(3,)](x, lo, hi, total, BLOCK=65536)
    np.testing.assert_array_equal(lo, x.min(axis=1))
    np.testing.assert_array_equal(hi, np.maximum(x.max(axis=1), 0))     # zeros past the row
    np.testing.assert_array_equal(total, [50000] * 3)


@tj.kernel
def store_then_reload(x, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK))
    tj.store(x, (row, 0), t * 2.0)
    tj.store(x, (row, 0), t - tj.max(t, axis=1, keepdims=True))


@tj.kernel
def column_sums(x, y, BLOCK: tj.constexpr):
    t = tj.load(x, (0, 0), (2, BLOCK))
    tj.store(y, (0,), tj.sum(t, axis=0))


@tj.kernel
def row_argmax(x, y, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    tj.store(y, (row,), tj.argmax(tj.load(x, (row, 0), (1, BLOCK)), axis=1))


def test_kernels_the_pass_cannot_split_are_left_unchanged(plain_loops):
    """A store before a chunk loop reloads its array (chunks would read the new values), a
    reduction over another axis, and argmax: no plan, and the IR is the same."""
    x, y = np.zeros((2, 65536), np.float32), np.zeros(65536, np.float32)
    for kernel, args in [(store_then_reload, (x,)), (column_sums, (x, y)), (row_argmax, (x, y[:2]))]:
        fn = tile_ir(kernel, *args, BLOCK=65536)
        before = ir.print_function(fn)
        assert plan_chunks(fn) is None
        assert ir.print_function(chunk_rows(fn)) == before


def test_the_chunked_kernels_do_not_spill():
    """On the cuda path (ptxas through nvJitLink, no GPU needed): the 65536-column softmax,
    layernorm and RMSNorm and the 16384-column norms (split for their several loads), in
    float32 and bfloat16, compile with no spill warning."""
    for dtype in (np.float32, BF16):
        for cols, kernels in [(65536, ("softmax", "layernorm", "rmsnorm")), (16384, ("layernorm", "rmsnorm"))]:
            x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
            cases = {"softmax": (softmax.softmax_kernel, (x, x)),
                     "layernorm": (layernorm.layernorm_kernel, (x, w, w, x, 1e-5)),
                     "rmsnorm": (rmsnorm.rmsnorm_kernel, (x, w, x, 1e-6))}
            with warnings.catch_warnings():
                warnings.simplefilter("error", tj.PerformanceWarning)
                for name in kernels:
                    kernel, args = cases[name]
                    kernel = getattr(kernel, "kernel", kernel)
                    specs, consts, _ = kernel.specialise(kernel.bind(args, {"BLOCK": cols}))
                    assert kernel.compile(specs, consts, None, "cuda").artifact.spills == 0, (name, cols)


def test_rows_of_several_loads_that_fit_alone_are_split_too():
    """layernorm (x, weight, bias) and RMSNorm (x, weight) of 16K columns: each load fits, all
    together do not; they are split with chunk-shaped accumulators at 16 warps, x kept in
    shared memory by the first loop.  softmax's one load of 16K and RMSNorm's two of 8K are
    left alone."""
    for dtype in (np.float32, BF16):
        x, w = np.zeros((2, 16384), dtype), np.zeros(16384, dtype)
        ln = plan_chunks(tile_ir(layernorm.layernorm_kernel, x, w, w, x, 1e-5, BLOCK=16384))
        rms = plan_chunks(tile_ir(rmsnorm.rmsnorm_kernel, x, w, x, 1e-6, BLOCK=16384))
        assert (ln.chunk, ln.elementwise, ln.prefetch, ln.num_warps) == (4096, True, False, 16)
        assert (rms.chunk, rms.num_warps) == (8192, 16)
        for plan in (ln, rms):      # x only: the weight and bias are read by the last loop alone
            (kept,) = plan.stashes.ids
            assert kept.owner.op is TileOp.LOAD and kept.owner.operands[1].owner.op is TileOp.PROGRAM_ID
        assert layernorm.layernorm_kernel.inspect(x, w, w, x, 1e-5, BLOCK=16384).num_warps == 16
        assert plan_chunks(tile_ir(softmax.softmax_kernel, x, x, BLOCK=16384)) is None
        x8, w8 = np.zeros((2, 8192), dtype), np.zeros(8192, dtype)
        assert plan_chunks(tile_ir(rmsnorm.rmsnorm_kernel, x8, w8, x8, 1e-6, BLOCK=8192)) is None


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("cols", [16384, 10000, 6000])
def test_norms_split_for_their_loads_match_numpy_on_emulate(dtype, cols, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((3, cols)) * 3).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    tj.testing.assert_close(layernorm.run(x, w, b), layernorm.reference(x, w, b).astype(dtype))
    tj.testing.assert_close(rmsnorm.run(x, w), rmsnorm.reference(x, w).astype(dtype))


@tj.kernel
def softmax_1d(x, y, BLOCK: tj.constexpr):
    """Triton's tutorial spelling: the row as a 1-D tile, reductions to scalars, no keepdims."""
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf).reshape((BLOCK,))
    e = tj.exp(t - tj.max(t, axis=0))
    tj.store(y, (row, 0), (e / tj.sum(e, axis=0)).reshape((1, BLOCK)))


def test_the_1d_tutorial_spelling_is_split_alike_and_matches_numpy(monkeypatch):
    """The same softmax spelled with a 1-D row and scalar reductions gets the same plan (chunk
    and warps) as the example and NumPy's result on emulate."""
    x = np.zeros((2, 65536), np.float32)
    want = plan_chunks(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536))
    got = plan_chunks(tile_ir(softmax_1d, x, x, BLOCK=65536))
    assert (got.chunk, got.num_warps, got.elementwise) == (want.chunk, want.num_warps, want.elementwise)
    x32 = np.zeros((2, 32768), np.float32)          # a row that fits the stash: kept in both spellings
    for kernel in (softmax.softmax_kernel, softmax_1d):
        stashed = plan_chunks(tile_ir(kernel, x32, x32, BLOCK=32768)).stashes
        assert stashed is not None and len(stashed.ids) == 1, kernel
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(7).standard_normal((2, 50000)).astype(np.float32)
    y = np.full_like(x, np.nan)
    softmax_1d[(2,)](x, y, BLOCK=65536)
    tj.testing.assert_close(y, softmax.reference(x))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("cols", [65536, 40000])
@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_the_variance_is_summed_in_the_mean_s_pass(dtype, cols, offset, monkeypatch, plain_loops):
    """With ``ONE_PASS_VARIANCE`` a layernorm's sum((x - mean)**2) is accumulated by the loop of
    sum(x) (deviations from chunk 0's values, combined once the mean exists): two chunk loops,
    not three, and the rows match the three-loop kernel's within float32 rounding (also far
    from zero, where a plain sum of squares would cancel), and NumPy."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((3, cols)) * 3 + offset).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    k = layernorm.layernorm_kernel
    runs = {}
    for one_pass in (False, True):
        monkeypatch.setattr(chunk_rows_module, "ONE_PASS_VARIANCE", one_pass)
        k._cache.clear()
        k._fast.clear()
        fn = chunk_rows(tile_ir(k, x, w, b, x, 1e-5, BLOCK=65536))
        assert len(loops_of(fn)) == (2 if one_pass else 3)
        runs[one_pass] = layernorm.run(x, w, b).astype(np.float64)
    k._cache.clear()
    k._fast.clear()
    scale = np.abs(runs[False]).max()
    assert np.abs(runs[True] - runs[False]).max() <= (2e-6 if dtype == np.float32 else 2e-2) * scale
    want = layernorm.reference(x, w, b)
    assert np.abs(runs[True] - want).max() <= np.abs(runs[False] - want).max() * 1.5 + 1e-6 * scale


def test_only_a_sum_of_squared_deviations_from_a_row_value_joins_the_sum_s_loop(monkeypatch, plain_loops):
    """RMSNorm's sum(x * x) is no deviation (two loops stay); the mean's sum keeps its loop."""
    monkeypatch.setattr(chunk_rows_module, "ONE_PASS_VARIANCE", True)
    x, w = np.zeros((2, 65536), np.float32), np.zeros(65536, np.float32)
    assert len(loops_of(chunk_rows(tile_ir(rmsnorm.rmsnorm_kernel, x, w, x, 1e-5, BLOCK=65536)))) == 2
    assert len(loops_of(chunk_rows(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)))) == 3


@tj.kernel
def layernorm_1d(x, w, b, y, eps, BLOCK: tj.constexpr):
    """The Triton tutorial's spelling: a 1-D row, a column mask, scalar statistics, ``** 2``."""
    row = tj.program_id(0)
    n = x.shape[1]
    cols = tj.arange(0, BLOCK)
    t = tj.load(x, (row, 0), (1, BLOCK)).reshape((BLOCK,)).to(tj.float32)
    mean = tj.sum(t, axis=0) / n
    xc = tj.where(cols < n, t - mean, 0.0)
    var = tj.sum(xc ** 2, axis=0) / n
    out = xc * tj.rsqrt(var + eps) * tj.load(w, (0,), (BLOCK,)).to(tj.float32) \
        + tj.load(b, (0,), (BLOCK,)).to(tj.float32)
    tj.store(y, (row, 0), out.to(y.dtype).reshape((1, BLOCK)))


@tj.kernel
def layernorm_flat_stats(x, w, y, eps, BLOCK: tj.constexpr):
    """2-D rows, statistics without keepdims, ``mean[:, None]``, no mask (the padding is 0)."""
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK)).to(tj.float32)
    mean = tj.sum(t, axis=1) / BLOCK
    xc = t - mean[:, None]
    var = tj.sum(xc * xc, axis=1) / BLOCK
    out = xc * tj.rsqrt(var + eps)[:, None] * tj.load(w, (0,), (BLOCK,)).to(tj.float32)[None, :]
    tj.store(y, (row, 0), out.to(y.dtype))


@tj.kernel
def layernorm_two_rows(x, y, eps, BLOCK: tj.constexpr):
    """Two rows per program: (2, BLOCK) tiles and (2, 1) statistics."""
    r = tj.program_id(0) * 2
    t = tj.load(x, (r, 0), (2, BLOCK)).to(tj.float32)
    xc = t - tj.sum(t, axis=1, keepdims=True) / BLOCK
    var = tj.sum(xc * xc, axis=1, keepdims=True) / BLOCK
    tj.store(y, (r, 0), (xc * tj.rsqrt(var + eps)).to(y.dtype))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_other_spellings_of_the_variance_join_the_sum_s_loop(dtype, monkeypatch, plain_loops):
    """The tutorial's 1-D spelling (scalar statistics, a column mask, ``** 2``), 2-D statistics
    without keepdims (``mean[:, None]``, no mask) and two rows per program take the one-pass
    variance too, and match NumPy."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setattr(chunk_rows_module, "ONE_PASS_VARIANCE", True)
    rng = np.random.default_rng(3)
    cols = 60000
    x = (rng.standard_normal((2, cols)) * 2 + 5).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    y = np.full_like(x, np.nan)
    assert len(loops_of(chunk_rows(tile_ir(layernorm_1d, x, w, b, y, 1e-5, BLOCK=65536)))) == 2
    layernorm_1d[(2,)](x, w, b, y, 1e-5, BLOCK=65536)
    tight = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {}        # (as examples/layernorm.py)
    tj.testing.assert_close(y, layernorm.reference(x, w, b).astype(dtype), **tight)
    full = (rng.standard_normal((2, 65536)) * 2 + 5).astype(dtype)
    w = rng.standard_normal(65536).astype(dtype)
    y = np.full_like(full, np.nan)
    assert len(loops_of(chunk_rows(tile_ir(layernorm_flat_stats, full, w, y, 1e-5, BLOCK=65536)))) == 2
    layernorm_flat_stats[(2,)](full, w, y, 1e-5, BLOCK=65536)
    tj.testing.assert_close(y, layernorm.reference(full, w, np.zeros_like(w)).astype(dtype), **tight)
    rows = np.concatenate([full, full[::-1] * 3])
    y = np.full_like(rows, np.nan)
    assert len(loops_of(chunk_rows(tile_ir(layernorm_two_rows, rows, y, 1e-5, BLOCK=65536)))) == 2
    layernorm_two_rows[(2,)](rows, y, 1e-5, BLOCK=65536)
    ones = np.ones(65536, dtype)
    tj.testing.assert_close(y, layernorm.reference(rows, ones, np.zeros_like(ones)).astype(dtype), **tight)


@tj.kernel
def layernorm_flat(x, w, b, y, n, eps, BLOCK: tj.constexpr):
    """The Triton tutorial's spelling whole: flat arrays, a row offset, ``mask=`` on every load
    and on the store."""
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    inside = cols < n
    t = tj.load(x, (row * n,), (BLOCK,), mask=inside).to(tj.float32)
    mean = tj.sum(t, axis=0) / n
    xc = tj.where(inside, t - mean, 0.0)
    var = tj.sum(xc * xc, axis=0) / n
    out = xc * tj.rsqrt(var + eps) * tj.load(w, (0,), (BLOCK,), mask=inside).to(tj.float32) \
        + tj.load(b, (0,), (BLOCK,), mask=inside).to(tj.float32)
    tj.store(y, (row * n,), out.to(y.dtype), mask=inside)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("cols", [65536, 50000])
def test_a_masked_store_is_split_with_its_mask(dtype, cols, monkeypatch, plain_loops):
    """A store with ``mask=`` becomes a loop storing chunk by chunk with the mask's chunks (left
    whole, the bf16 kernel spilled 9,492 bytes at 32 warps): the rows match NumPy, and nothing
    past the last row's end is written."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((3, cols)) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    y = np.full(3 * cols + 8, 7.0, dtype)
    fn = chunk_rows(tile_ir(layernorm_flat, x.ravel(), w, b, y, cols, 1e-5, BLOCK=65536))
    stores = [o for loop in loops_of(fn) for o in loop.regions[0].ops if o.op is TileOp.STORE]
    assert len(stores) == 1 and ir.store_mask(stores[0]) is not None
    layernorm_flat[(3,)](x.ravel(), w, b, y, cols, 1e-5, BLOCK=65536)
    tight = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {}
    tj.testing.assert_close(y[:3 * cols].reshape(3, cols), layernorm.reference(x, w, b).astype(dtype), **tight)
    assert (y[3 * cols:].astype(np.float32) == 7).all()
