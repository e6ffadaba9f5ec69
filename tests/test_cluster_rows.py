"""Long rows split over a thread-block cluster (``passes.cluster_rows``): the structure of the
rewritten kernel, NumPy's results on emulate (which runs each cluster's CTAs together and checks
the cluster barriers), the PTX nvJitLink assembles, and the same results on the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import codegen, ir, verifier
from tilejit.backends import emulate
from tilejit.codegen import ptxas
from tilejit.ir import TileOp
from tilejit.passes import pipeline
from tilejit.passes.chunk_rows import plan_chunks
from tilejit.passes.chunk_rows import CHUNK_VALUES
from tilejit.passes.cluster_rows import MAX_CTAS, cluster_rows, plan_cluster, supports
from tilejit.passes.warps import choose_num_warps
from tilejit.simt import SimtOp

from examples import layernorm, rmsnorm, softmax
from test_chunk_rows import row_stats, tile_ir
from test_warps import softmax_rows

BF16 = tj.bfloat16.np


@pytest.fixture
def every_long_row(monkeypatch, tmp_path):
    """Split rows of several loads and of any size too (the default splits only one-load rows of
    128 KiB, where it measured faster), so that the norms check the rewrite."""
    from tilejit.passes import cluster_rows as module
    monkeypatch.setattr(module, "ONE_LOAD", False)
    monkeypatch.setattr(module, "CLUSTER_BYTES", 0)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))      # (the disk key does not see the switches)
    _forget()
    yield
    _forget()                   # nothing compiled under the switches outlives the test


def _forget():
    for k in (softmax.softmax_kernel, layernorm.layernorm_kernel, rmsnorm.rmsnorm_kernel):
        k = getattr(k, "kernel", k)
        k._cache.clear()
        k._fast.clear()


def ops_of(fn: ir.Function, op) -> list:
    return [o for o in fn.walk() if o.op is op]


@pytest.mark.parametrize("cols,ctas", [(8192, None), (16384, None), (32768, 2), (65536, 4), (131072, 8),
                                       (262144, 8), (24576, None)])
def test_rows_chunk_rows_would_cut_are_split_over_up_to_8_ctas(cols, ctas):
    """Where a row would be cut into loops (more than CHUNK_VALUES values), the fewest CTAs whose
    parts fit; rows that are not a power of two wide are left to chunk_rows (which refuses them)."""
    x = np.zeros((2, cols), np.float32)
    fn = tile_ir(softmax.softmax_kernel, x, x, BLOCK=cols)
    plan = plan_cluster(fn)
    assert (plan[1] if plan else None) == ctas
    assert CHUNK_VALUES == 16384 and MAX_CTAS == 8


@pytest.mark.parametrize("kernel,cols,ctas", [("layernorm", 8192, None), ("layernorm", 16384, 2),
                                              ("rmsnorm", 8192, None), ("rmsnorm", 16384, 2), ("rmsnorm", 65536, 8)])
def test_rows_of_several_loads_count_them_all(kernel, cols, ctas, monkeypatch):
    """x, weight (and bias): the parts of all the row loads fit LOADS_BUDGET together; by default
    such kernels are not split at all, nor are rows under 128 KiB."""
    from tilejit.passes import cluster_rows as module
    x, w = np.zeros((2, cols), np.float32), np.zeros(cols, np.float32)
    k, args = {"layernorm": (layernorm.layernorm_kernel, (x, w, w, x, 1e-5)),
               "rmsnorm": (rmsnorm.rmsnorm_kernel, (x, w, x, 1e-5))}[kernel]
    assert plan_cluster(tile_ir(k, *args, BLOCK=cols)) is None
    monkeypatch.setattr(module, "ONE_LOAD", False)
    plan = plan_cluster(tile_ir(k, *args, BLOCK=cols))
    assert (plan[1] if plan else None) == (ctas if cols * 4 >= module.CLUSTER_BYTES else None)
    monkeypatch.setattr(module, "CLUSTER_BYTES", 0)
    plan = plan_cluster(tile_ir(k, *args, BLOCK=cols))
    assert (plan[1] if plan else None) == ctas


@pytest.mark.parametrize("rows,cols,split", [(64, 16384, True), (128, 8192, False)])
def test_the_exchanged_partial_results_stay_in_dedicated_shared_buffers(rows, cols, split):
    """A program of 128 rows would exchange 128 partial results per reduction (over
    DEDICATED_BYTES at 8 bytes each, so its buffer could be reused while another CTA reads it):
    not split."""
    x = np.zeros((rows, cols), np.float32)
    fn = tile_ir(softmax_rows, x, x, R=rows, BLOCK=cols)
    assert (plan_cluster(fn) is not None) == split


def test_the_rank_is_read_at_the_kernel_line():
    x = np.zeros((2, 65536), np.float32)
    fn = tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)
    (rank,) = ops_of(cluster_rows(fn), TileOp.CLUSTER_RANK)
    assert rank.loc == fn.meta["loc"] and rank.loc.line > 0


def test_a_bfloat16_row_of_64_kib_stays_in_one_cta():
    x = np.zeros((2, 32768), BF16)
    assert plan_cluster(tile_ir(softmax.softmax_kernel, x, x, BLOCK=32768)) is None


def test_a_65536_column_softmax_is_one_part_per_cta_with_two_cluster_reductions():
    """4 CTAs each load 16384 columns (at column rank * 16384), reduce them with their own max,
    and combine max and (float32) sum over the cluster in one exchange; no loop, nothing as wide
    as the row, 16 warps."""
    x = np.zeros((2, 65536), BF16)
    fn = cluster_rows(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536))
    assert fn.meta["cluster_ctas"] == 4
    assert not ops_of(fn, TileOp.FOR)
    assert max(r.type.numel for o in fn.walk() for r in o.results if isinstance(r.type, ir.TileType)) == 16384
    (rank,) = ops_of(fn, TileOp.CLUSTER_RANK)
    (exchange,) = ops_of(fn, TileOp.CLUSTER_SOFTMAX)        # max and sum: one exchange
    assert [r.type for r in exchange.results] == [ir.TileType((1, 1), tj.float32)] * 2
    assert len(ops_of(fn, TileOp.EXP)) == 2 and not ops_of(fn, TileOp.CLUSTER_REDUCE)   # e_r, exp(m_r - M)
    load, store = ops_of(fn, TileOp.LOAD)[0], ops_of(fn, TileOp.STORE)[0]
    for o in (load, store):
        column = o.operands[2].owner
        assert column.op is TileOp.ADD and column.operands[1].owner.operands[0] is rank.result
    assert plan_chunks(fn) is None
    assert choose_num_warps(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536), cluster=True) == 16
    assert choose_num_warps(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)) == 16     # chunk loops
    x = np.zeros((2, 65536), np.float32)
    simt = pipeline.compile_to_simt(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536), 16, verify=True)
    assert any(o.op is SimtOp.ELEMENTWISE and o.attrs.op is TileOp.EXP2 for o in simt.walk())   # fold_exp
    assert simt.meta.min_ctas_per_sm == 2                  # THREADS_PER_SM
    simt = pipeline.compile_to_simt(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536), 8, verify=True)
    assert simt.meta.min_ctas_per_sm == 0                  # 64 values a thread: no hint (it spilled)


@pytest.mark.parametrize("one_exchange", [True, False])
def test_16_bit_sums_are_exchanged_in_float32(one_exchange, monkeypatch):
    """bf16 softmax: the partial sums (and the maxima CLUSTER_SOFTMAX takes) are float32, and
    the results cast back to bfloat16 where the kernel uses them."""
    from tilejit.passes import cluster_rows as module
    monkeypatch.setattr(module, "ONE_EXCHANGE", one_exchange)
    x = np.zeros((2, 65536), BF16)
    fn = cluster_rows(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536))
    exchanged = [o for o in fn.walk() if o.op in (TileOp.CLUSTER_REDUCE, TileOp.CLUSTER_SOFTMAX)]
    kinds = [(o.attrs.kind.value if o.attrs.kind else None) for o in exchanged]
    assert kinds == ([None] if one_exchange else ["max", "sum"])
    assert [x.type.dtype for o in exchanged for x in o.operands] == (
        [tj.float32, tj.float32] if one_exchange else [tj.bfloat16, tj.float32])
    total = exchanged[-1].results[-1]
    (cast,) = [o for o in fn.walk() if total in o.operands]
    assert cast.op is TileOp.CAST and cast.result.type.dtype == tj.bfloat16
    verifier.verify(fn)


def test_a_row_wider_than_a_cluster_holds_is_then_chunked():
    x = np.zeros((2, 262144), np.float32)
    fn = pipeline.clone_function(tile_ir(softmax.softmax_kernel, x, x, BLOCK=262144))
    fn = cluster_rows(fn)
    assert fn.meta["cluster_ctas"] == 8 and plan_chunks(fn).width == 32768


def test_the_switch_the_target_and_dots_keep_the_row_in_one_cta(monkeypatch):
    x = np.zeros((2, 65536), np.float32)
    fn = tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)
    simt = pipeline.compile_to_simt(fn, 32, cluster=False, verify=True)
    assert simt.meta.cluster_ctas == 1 and not ops_of(simt, SimtOp.CLUSTER_BARRIER)
    assert pipeline.compile_to_simt(fn, 32, target="sm_80").meta.cluster_ctas == 1
    assert pipeline.compile_to_simt(fn, 8, verify=True).meta.cluster_ctas == 4
    assert supports("sm_90a") and supports("sm_100a") and supports("emulate") and supports("sm_90")
    assert not supports("sm_80") and not supports("sm_89") and not supports("interpret")
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_CLUSTER", "0")
    assert softmax.softmax_kernel.inspect(x, x, BLOCK=65536).num_warps == 32
    monkeypatch.delenv("TILEJIT_CLUSTER")
    assert softmax.softmax_kernel.inspect(x, x, BLOCK=65536).num_warps == 16


CASES = {"softmax": lambda x, rng: (softmax.run(x), softmax.reference(x), 1e-5),
         "layernorm": lambda x, rng: _norm(layernorm, x, rng, bias=True),
         "rmsnorm": lambda x, rng: _norm(rmsnorm, x, rng, bias=False)}


def _norm(module, x, rng, bias):
    w = rng.standard_normal(x.shape[1]).astype(x.dtype)
    args = (w, rng.standard_normal(x.shape[1]).astype(x.dtype)) if bias else (w,)
    return module.run(x, *args), module.reference(x, *args), 1e-4


@pytest.mark.parametrize("kernel", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [9000, 20000, 40000, 65536, 100000])
def test_clustered_row_kernels_give_numpy_results_on_emulate(kernel, dtype, cols, every_long_row, monkeypatch):
    """Ragged rows (the last CTAs of a cluster hold padding, or nothing of the row) and full ones."""
    check(kernel, dtype, cols, 3, "emulate", monkeypatch)


def check(kernel, dtype, cols, rows, backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_DEBUG", "1")            # the IR verified after every pass
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((rows, cols)) * 3).astype(BF16 if dtype == "bfloat16" else np.float32)
    got, want, tol = CASES[kernel](x, rng)
    tol = 2e-2 if dtype == "bfloat16" else tol
    tj.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_several_rows_per_program_and_unreduced_keepdims(monkeypatch):
    """(4, 16384) tiles (4 CTAs per program, 4 partial results each) and reductions to 1-D
    results (min, max and an int sum) are combined per row; at 12000 columns in a 32768-wide
    tile the second CTA holds only padding."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16384)).astype(np.float32)
    y = np.full_like(x, np.nan)
    softmax_rows[(2,)](x, y, R=4, BLOCK=16384)
    tj.testing.assert_close(y, softmax.reference(x))
    assert softmax_rows.inspect(x, y, R=4, BLOCK=16384).num_warps == 16       # (4, 4096) per CTA of 4
    x = rng.integers(-50, 50, (3, 12000)).astype(np.int32)
    lo, hi, total = (np.zeros(3, np.int32) for _ in range(3))
    row_stats[(3,)](x, lo, hi, total, BLOCK=32768)
    assert row_stats.inspect(x, lo, hi, total, BLOCK=32768).cluster_ctas == 2
    np.testing.assert_array_equal(lo, x.min(axis=1))
    np.testing.assert_array_equal(hi, x.max(axis=1))
    np.testing.assert_array_equal(total, [12000] * 3)


def _simt(cols=32768):
    x = np.zeros((2, cols), np.float32)
    return pipeline.compile_to_simt(tile_ir(softmax.softmax_kernel, x, x, BLOCK=cols), 8, verify=True)


def _without(fn: ir.Function, which: int) -> ir.Function:
    barriers = [o for o in fn.body.ops if o.op is SimtOp.CLUSTER_BARRIER]
    fn.body.ops.remove(barriers[which])
    return fn


@pytest.mark.parametrize("one_exchange", [True, False])
def test_the_simt_program_orders_each_exchange_and_the_exit_with_cluster_barriers(one_exchange, monkeypatch):
    """softmax's max and sum: one exchange (m and s of both CTAs after one barrier), or one each
    (ONE_EXCHANGE=False); then the barrier before the exit.  Lane r reads CTA r.  Both give
    NumPy's softmax."""
    from tilejit.passes import cluster_rows as module
    monkeypatch.setattr(module, "ONE_EXCHANGE", one_exchange)
    fn = _simt()
    ops = [o.op for o in fn.body.ops if o.op in (SimtOp.CLUSTER_BARRIER, SimtOp.LOAD_SHARED_CLUSTER)]
    bar, load = SimtOp.CLUSTER_BARRIER, SimtOp.LOAD_SHARED_CLUSTER
    assert ops == ([bar, load, load, bar] if one_exchange else [bar, load, bar, load, bar])
    lane = next(o for o in fn.walk() if o.op is SimtOp.THREAD_ID).result
    for o in fn.walk():                 # lane r < 2 reads CTA r; then butterfly and lane 0's result
        if o.op is SimtOp.LOAD_SHARED_CLUSTER:
            rank, on = (x.owner for x in o.operands[1:])
            assert rank.op is SimtOp.ELEMENTWISE and rank.attrs.op is TileOp.AND and rank.operands[0] is lane
            assert on.attrs.op is TileOp.LT and on.operands[1].owner.attrs.values == (2,)
    shuffles = [(o.op, getattr(o.attrs, "mask", None)) for o in fn.walk()
                if o.op in (SimtOp.SHUFFLE_XOR, SimtOp.SHUFFLE_IDX) and o.result.type.n == 1
                and o.operands[0].owner.op in (SimtOp.LOAD_SHARED_CLUSTER, SimtOp.ELEMENTWISE)]
    assert (SimtOp.SHUFFLE_XOR, 1) in shuffles and (SimtOp.SHUFFLE_IDX, None) in shuffles
    assert "cluster_ctas=2" in fn.meta.summary()
    x = np.random.default_rng(3).standard_normal((3, 32768)).astype(np.float32)
    x[1, 16384:] = -np.inf                          # rank 1's part of row 1 is all -inf
    x[2, :] = -np.inf                               # row 2: NaN, as unsplit
    y = np.empty_like(x)
    emulate.run(fn, (3,), [x, y])
    with np.errstate(all="ignore"):
        want = softmax.reference(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    tj.testing.assert_close(np.nan_to_num(y), np.nan_to_num(want))


@pytest.mark.parametrize("which,message", [(0, "a CLUSTER_BARRIER is missing"), (-1, "ends without a cluster barrier")])
def test_the_emulator_rejects_a_missing_cluster_barrier(which, message):
    fn = _without(_simt(), which)
    x = np.random.default_rng(0).standard_normal((2, 32768)).astype(np.float32)
    with pytest.raises(emulate.EmulatorError, match=message):
        emulate.run(fn, (2,), [x, np.empty_like(x)])


def test_the_emulator_refuses_a_rank_outside_the_cluster_and_a_barrier_in_a_branch():
    from tilejit.simt import RegType, VectorConstAttrs
    x = np.random.default_rng(0).standard_normal((2, 32768)).astype(np.float32)
    fn = _simt()
    load = next(o for o in fn.walk() if o.op is SimtOp.LOAD_SHARED_CLUSTER)
    two = ir.Operation(SimtOp.CONSTANT, [], [RegType(tj.int32, 1)], VectorConstAttrs((2,)))
    fn.body.ops.insert(fn.body.ops.index(load), two)
    load.operands[1] = two.result
    with pytest.raises(emulate.EmulatorError, match="rank 2 in clusters of 2"):
        emulate.run(fn, (2,), [x, np.empty_like(x)])
    fn = _simt()
    barrier = next(o for o in fn.body.ops if o.op is SimtOp.CLUSTER_BARRIER)
    machine = emulate.Machine(fn, (4, 1, 1), emulate.bind_params(fn, [x, np.empty_like(x)]))
    machine.block_ids = np.zeros((4, 3), np.int32)
    with pytest.raises(emulate.EmulatorError, match="only some of a cluster's CTAs"):
        machine.op_CLUSTER_BARRIER(barrier, emulate.Frame({}, np.arange(2)))


def test_the_emulator_runs_whole_clusters_and_refuses_a_grid_that_is_not():
    fn = _simt()
    x = np.random.default_rng(0).standard_normal((3, 32768)).astype(np.float32)
    y = np.empty_like(x)
    emulate.run(fn, (3,), [x, y])                     # 3 programs: 6 CTAs in clusters of 2
    tj.testing.assert_close(y, softmax.reference(x))
    with pytest.raises(emulate.EmulatorError, match="not made of clusters"):
        emulate.Machine(fn, (3, 1, 1), emulate.bind_params(fn, [x, y])).run()


def test_the_ptx_declares_the_cluster_and_nvjitlink_assembles_it():
    x = np.zeros((2, 65536), BF16)
    ptx = codegen.compile_ptx(pipeline.compile_to_simt(tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536), 8, verify=True))
    assert ".reqnctapercluster 4, 1, 1" in ptx and "mapa.shared::cluster.u32" in ptx
    assert ptx.count("barrier.cluster.arrive.release.aligned") == 2        # the exchange, the exit
    result = ptxas.assemble(ptx, "sm_90a")
    assert result.spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [9000, 40000, 65536, 100000])
def test_clustered_row_kernels_on_the_gpu(kernel, dtype, cols, every_long_row, monkeypatch):
    check(kernel, dtype, cols, 67, "cuda", monkeypatch)


def test_a_cluster_kernel_launches_c_ctas_per_program_and_keeps_that_in_the_cache(monkeypatch):
    """The CUDA backend's launch paths (no GPU: the loaded kernel is a stand-in) multiply grid axis
    0 by the CTAs per cluster and pass the arguments unchanged; the disk cache's entry keeps the
    cluster (an entry written before clusters reads as 1)."""
    from types import SimpleNamespace

    from tilejit import dtypes as D
    from tilejit.abi import ParamDesc, ParamKind
    from tilejit.backends import launch_geometry
    from tilejit.backends.cuda import CudaArtifact, CudaBackend
    assert launch_geometry(1, (3, 2, 1), ["x"], cluster=4) == ((12, 2, 1), ["x"])
    params = [ParamDesc(ParamKind.PTR, 0, None, D.float32)]
    art = CudaArtifact("k", params, (0,), 16, 0, ".version 8.4", None, "", "", 64, 0, cluster_ctas=4)
    back = CudaArtifact.from_cache(art.files(), art.meta())
    assert back.cluster_ctas == 4 and back.cta_threads == 512
    meta = art.meta()
    del meta["cluster_ctas"]
    assert CudaArtifact.from_cache(art.files(), meta).cluster_ctas == 1
    launched = []
    fake = SimpleNamespace(launch=lambda grid, threads, views, params, stream: launched.append((grid, threads)))
    art.kernel_for_device = lambda device: fake
    view = SimpleNamespace(device=0, stream=None)
    CudaBackend().fast_launcher(art)((5, 1, 1), [view], None)
    assert launched == [((20, 1, 1), 512)]
    captured = {}

    def launch_arrays(kernel_for_device, grid, threads, args, params, writes, stream, geometry):
        captured["geometry"] = geometry(fake, grid, ["view"])
    from tilejit.runtime import launch
    monkeypatch.setattr(launch, "launch_arrays", launch_arrays)
    CudaBackend().launch(art, (5, 2, 1), ["array"], None)            # the full path
    assert captured["geometry"] == ((20, 2, 1), ["view"])


def test_the_1d_tutorial_spelling_is_split_alike_and_matches_numpy(monkeypatch):
    """Triton's spelling (the row reshaped to 1-D, scalar max and sum) gets the same cluster and
    warps as the example and NumPy's result on emulate.  Its max and sum take two exchanges
    (softmax_pairs matches keepdims reductions only): measured as fast as one on the H200."""
    from test_chunk_rows import softmax_1d
    x = np.zeros((2, 65536), np.float32)
    assert plan_cluster(tile_ir(softmax_1d, x, x, BLOCK=65536)) == plan_cluster(
        tile_ir(softmax.softmax_kernel, x, x, BLOCK=65536)) == (65536, 4)
    fn = cluster_rows(tile_ir(softmax_1d, x, x, BLOCK=65536))
    assert [o.attrs.kind.value for o in ops_of(fn, TileOp.CLUSTER_REDUCE)] == ["max", "sum"]
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    k = getattr(softmax_1d, "kernel", softmax_1d)
    assert k.inspect(x, x, BLOCK=65536).cluster_ctas == 4
    assert k.inspect(x, x, BLOCK=65536).num_warps == softmax.softmax_kernel.inspect(x, x, BLOCK=65536).num_warps
    x = np.random.default_rng(7).standard_normal((2, 50000)).astype(np.float32)
    y = np.full_like(x, np.nan)
    softmax_1d[(2,)](x, y, BLOCK=65536)
    tj.testing.assert_close(y, softmax.reference(x))


@tj.kernel
def row_max_int8(x, out, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    tj.store(out, (row,), tj.max(tj.load(x, (row, 0), (1, BLOCK)), axis=1))


def test_one_byte_partials_cross_the_cluster(monkeypatch):
    """int8 maxima of 128 KiB rows: 8 CTAs, the 1-byte exchange assembles (in 16-bit registers)
    and gives NumPy's maxima on emulate."""
    x = np.random.default_rng(4).integers(-100, 100, (3, 131072)).astype(np.int8)
    out = np.zeros(3, np.int8)
    fn = pipeline.compile_to_simt(tile_ir(row_max_int8, x, out, BLOCK=131072), 16, verify=True)
    assert fn.meta.cluster_ctas == 8
    assert ptxas.assemble(codegen.compile_ptx(fn), "sm_90a").spills == 0
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    row_max_int8[(3,)](x, out, BLOCK=131072)
    np.testing.assert_array_equal(out, x.max(axis=1))
