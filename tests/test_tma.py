"""TMA-filled wgmma rings (``passes/tma.py``, ``pipeline_loads.lower_tma_for``): the boxes
match the slot layouts wgmma reads, the emulator's TMA and mbarrier model catches the
mistakes a schedule can make (a missing wait, a wrong byte count, a slot overwritten while
read), and the PTX assembles for sm_90a with the maps as grid-constant parameters."""
import ml_dtypes
import numpy as np
import pytest

from tilejit import dtypes as D
from tilejit.backends import emulate, emulate_tma
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import matmul
from tilejit.passes import mma_layouts as ML
from tilejit.passes import wgmma
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec

KERNEL = matmul.matmul_kernel.kernel


def gemm_fn(BM=64, BN=64, BK=64, stages=3, warps=4, dtype=D.bfloat16, tma=True):
    spec = ArraySpec(dtype, 2)
    tile = KERNEL.tile_ir((spec, spec, ArraySpec(D.float32, 2)), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, tma=tma)


def ops(fn, kind):
    return [o for o in fn.walk() if o.op is kind]


@pytest.mark.parametrize("span", [32, 64, 128])
def test_the_tma_swizzle_is_the_slot_layout_of_rows_of_its_span(span):
    rows, chunks = np.meshgrid(np.arange(16), np.arange(span // 16), indexing="ij")
    linear = rows * span + chunks * 16
    assert (emulate_tma.swizzle(linear, span) == ML.swizzled_offset(rows, chunks * 16, span)).all()


def test_the_tma_swizzle_of_atoms_is_wgmma_s_atom_layout():
    k_rows = 32
    rows, cols = np.meshgrid(np.arange(k_rows), np.arange(0, 256, 16), indexing="ij")   # two atoms
    atom = cols // 128
    linear = atom * k_rows * 128 + rows * 128 + cols % 128        # one dense box per atom
    assert (emulate_tma.swizzle(linear, 128) == wgmma.atom_table(rows, cols, k_rows)).all()


def test_a_box_reads_zeros_outside_the_array():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    from tilejit.abi import ParamDesc
    m = emulate_tma.EmulatedMap(emulate.GlobalArray(a, "a"), ParamDesc("tensor_map", 0, None, D.float32, (2, 4), 0))
    got = m.box((2, -2)).view(np.float32).reshape(2, 4)
    assert (got == [[0, 0, 8, 9], [0, 0, 0, 0]]).all()
    assert m.nbytes == 32


def test_mbarrier_phases():
    bars = emulate_tma.Mbarriers(64, 1)
    key = (0, 8)
    with pytest.raises(emulate_tma.TmaError, match="before MBARRIER_INIT"):
        bars.wait(key, 0)
    bars.init(key, 1)
    with pytest.raises(emulate_tma.TmaError, match="live mbarrier"):
        bars.init(key, 1)
    bars.expect_tx(key, 16)
    with pytest.raises(emulate_tma.TmaError, match="would hang.*16 transaction bytes"):
        bars.wait(key, 0)
    bars.copy(key, 0, np.arange(32, 48), 16)          # phase 0 completes
    assert bars.pending[0, 32:48].all()
    bars.wait(key, 0)
    assert not bars.pending.any()
    bars.wait(key, 0)                                 # a completed phase: returns at once
    bars.copy(key, 0, np.arange(32, 48), 16)
    with pytest.raises(emulate_tma.TmaError, match="middle of a phase"):
        bars.inval(key)


def test_gemm_loops_take_tma_where_the_arrays_allow():
    fn = gemm_fn()
    assert ops(fn, SimtOp.TMA_LOAD) and ops(fn, SimtOp.WGMMA)
    assert not ops(gemm_fn(tma=False), SimtOp.TMA_LOAD)
    assert not ops(compile_to_simt(KERNEL.tile_ir((ArraySpec(D.bfloat16, 2, True, False),) * 2
                                                  + (ArraySpec(D.float32, 2),),
                                                  {"BM": 64, "BN": 64, "BK": 64, "STAGES": 3}), 4),
                   SimtOp.TMA_LOAD)            # not 16-byte aligned: no wgmma, no TMA


def _run(fn, m=64, n=64, k=256, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    emulate.run(fn, (-(-m // 64), -(-n // 64)), [a, b, c])
    return a, b, c


def test_the_emulated_tma_gemm_matches_float64():
    a, b, c = _run(gemm_fn(), 100, 128, 200)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() < 1e-3


def _drop(fn, kind, keep=lambda o: False):
    for o in fn.walk():
        for region in o.regions:
            region.ops[:] = [x for x in region.ops if x.op is not kind or keep(x)]
    fn.body.ops[:] = [x for x in fn.body.ops if x.op is not kind or keep(x)]
    return fn


def test_emulator_catches_a_missing_mbarrier_wait():
    with pytest.raises(emulate.EmulatorError, match="TMA copy has not landed"):
        _run(_drop(gemm_fn(), SimtOp.MBARRIER_WAIT))


def test_emulator_catches_a_byte_count_that_does_not_match_the_boxes():
    fn = gemm_fn()
    for o in ops(fn, SimtOp.MBARRIER_EXPECT_TX):
        o.attrs = type(o.attrs)(o.attrs.n - 16, o.attrs.buffer)
    with pytest.raises(emulate.EmulatorError, match="would hang"):
        _run(fn)


def test_emulator_catches_a_slot_refilled_before_every_warp_is_done_with_it():
    fn = gemm_fn(stages=2, warps=4)        # the loop's barrier is all that orders reads and refills
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and ops_in(o, SimtOp.TMA_LOAD))
    loop.regions[0].ops[:] = [x for x in loop.regions[0].ops if x.op is not SimtOp.BARRIER]
    with pytest.raises(emulate.EmulatorError, match="race|in-flight WGMMA"):
        _run(fn)


def ops_in(o, kind):
    return [x for x in o.regions[0].walk() if x.op is kind]


def test_tma_gemm_ptx_assembles_with_grid_constant_maps():
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    fn = gemm_fn(128, 256, 64, 4, 8)
    ptx = compile_ptx(fn, "sm_90a")
    assert ptx.count(".param .align 64 .b8") == 2                 # A's map and B's
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx and "fence.mbarrier_init" in ptx
    out = ptxas.assemble(ptx, "sm_90a")
    assert out.spills == 0 and "serialized" not in out.log, out.log


# ------------------------------------------------------------------ warp specialisation
def ws_fn(BM=64, BN=64, BK=64, stages=3, warps=4, dtype=D.bfloat16):
    spec = ArraySpec(dtype, 2)
    tile = KERNEL.tile_ir((spec, spec, ArraySpec(D.float32, 2)), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, warp_specialize=True, verify=True)


def test_a_warp_specialised_gemm_has_a_producer_warpgroup():
    fn = ws_fn(128, 128, 64, 4, 8)
    assert fn.meta.producer_warps == 4 and fn.meta.cta_threads == 384 and fn.meta.max_registers == 168
    [split] = [o for o in fn.body.ops if o.op is SimtOp.IF]
    assert split.attrs.threads == 256
    consumer, producer = (list(r.walk()) for r in split.regions)
    assert not any(o.op is SimtOp.TMA_LOAD for o in consumer) and any(o.op is SimtOp.WGMMA for o in consumer)
    assert any(o.op is SimtOp.TMA_LOAD for o in producer) and not any(o.op is SimtOp.WGMMA for o in producer)
    assert [o.attrs for o in consumer if o.op is SimtOp.SETMAXNREG][0].n == 232
    assert [o.attrs for o in producer if o.op is SimtOp.SETMAXNREG][0].n == 40
    assert all(o.operands for o in consumer if o.op is SimtOp.BARRIER)          # named: the producer is not in them
    assert sum(o.op is SimtOp.MBARRIER_ARRIVE for o in consumer) == 1


@pytest.mark.parametrize("m, n, k, BM, BN, BK, stages, warps", [
    (100, 128, 200, 64, 128, 64, 3, 4),        # ragged M and K, two B atoms, a group in flight
    (64, 64, 40, 64, 64, 32, 5, 4),            # trip count below the ring depth
    (130, 64, 320, 128, 64, 64, 2, 8),         # two consumer warpgroups, two slots
])
def test_the_emulated_warp_specialised_gemm_matches_float64(m, n, k, BM, BN, BK, stages, warps):
    fn = ws_fn(BM, BN, BK, stages, warps)
    rng = np.random.default_rng(m + k)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    emulate.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() < 1e-3


@pytest.mark.parametrize("side, dropped, message", [
    (1, SimtOp.MBARRIER_WAIT, "refilled before its consumers released it"),   # producer ignores releases
    (0, SimtOp.MBARRIER_ARRIVE, "would hang"),                                # consumers never release
])
def test_emulator_catches_a_broken_hand_off(side, dropped, message):
    fn = ws_fn(64, 64, 64, 2, 4)
    [split] = [o for o in fn.body.ops if o.op is SimtOp.IF]
    for o in split.regions[side].walk():
        for r in o.regions:
            r.ops[:] = [x for x in r.ops if x.op is not dropped]
    with pytest.raises(emulate.EmulatorError, match=message):
        _run(fn, k=512)


def test_warp_specialised_ptx_assembles_and_leaves_setmaxnreg_to_the_driver(monkeypatch, tmp_path):
    """nvJitLink compiles relocatable code, where ptxas ignores setmaxnreg (C7504), so without
    the ptxas command the cuda backend keeps no cubin for such a kernel: the driver JIT-compiles
    its PTX whole."""
    monkeypatch.setenv("TILEJIT_PTXAS", str(tmp_path / "missing-ptxas"))
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    from tilejit.backends import cuda
    fn = ws_fn(128, 128, 64, 4, 8)
    ptx = compile_ptx(fn, "sm_90a")
    assert ".maxnreg 168" in ptx and ".maxntid 384" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx and "setmaxnreg.dec.sync.aligned.u32 40" in ptx
    assert "shfl.sync.idx" in ptx                    # the warp-uniform branch
    out = ptxas.assemble(ptx, "sm_90a")
    assert out.spills == 0 and "serialized" not in out.log, out.log
    state = {"ptx": ptx, "target": "sm_90a"}
    cuda.stage_cubin(state)
    assert "cubin" not in state


def test_by_default_attention_loops_are_specialised_and_gemm_loops_are_not():
    from tilejit.examples.attention import attention_kernel
    from tilejit.specs import ScalarSpec
    arr = ArraySpec(D.bfloat16, 4)
    tile = attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32),), {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": True})
    assert compile_to_simt(tile, num_warps=8).meta.producer_warps == 4            # two wgmma groups a trip
    assert compile_to_simt(tile, num_warps=8, warp_specialize=False).meta.producer_warps == 0
    assert gemm_fn(128, 128, 64, 4, 8).meta.producer_warps == 0                    # one group a trip
    assert ws_fn(128, 128, 64, 4, 8).meta.producer_warps == 4                      # unless asked


@pytest.mark.parametrize("shape, strides, tma", [
    ((64, 64), (64, 1), True),
    ((64, 1), (1, 1), False),          # a row stride of one element: aligned16 ignores it, TMA cannot
    ((64, 64), (-64, 1), False),       # rows read backwards
    ((0, 64), (64, 1), False),         # empty
    ((64, 64), (1, 64), False),        # transposed: the inner stride is not 1
    ((2**31, 8), (8, 1), False),       # a dim past TMA's 32-bit coordinates
])
def test_the_specialisation_says_whether_tma_can_describe_an_array(shape, strides, tma):
    from tilejit.specs import array_spec
    from tilejit.runtime.tensormap import tiled_args
    spec = array_spec(D.bfloat16, shape, strides, 1 << 12)
    assert spec.tma == tma
    assert (tiled_args(1 << 12, shape, strides, D.bfloat16, (1,) * len(shape), 0) is not None) == tma


def test_an_array_tma_cannot_describe_gets_a_kernel_without_it(monkeypatch):
    """Rows read backwards (a negative stride): the launch is specialised without TMA, and the
    cp.async kernel it gets computes the same product."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    kernel = matmul.matmul_kernel.kernel
    monkeypatch.setattr(kernel, "_cache", type(kernel._cache)())         # this test's entry alone
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)[::-1]
    b = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 64), np.float32)
    matmul.matmul_kernel.kernel[(1, 1)](a, b, c, BM=64, BN=64, BK=64, STAGES=3)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)
    [entry] = kernel._cache.values()
    kinds = {o.op for o in entry.artifact.fn.walk()}
    assert SimtOp.CP_ASYNC in kinds and SimtOp.TMA_LOAD not in kinds


def test_inspect_says_how_the_rings_are_filled():
    from tilejit.examples.attention import attention_kernel
    a = np.zeros((128, 128), ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    consts = dict(BM=64, BN=64, BK=64, STAGES=3, num_warps=4)
    got = KERNEL.inspect(a, a, c, **consts)
    assert got.copy_engines == ("tma",) and got.producer_warps == 0
    got = KERNEL.inspect(a[::-1], a, c, **consts)              # rows read backwards: no TMA
    assert got.copy_engines == ("cp.async",)
    q = np.zeros((1, 1, 128, 64), ml_dtypes.bfloat16)
    got = attention_kernel.inspect(q, q, q, q, 0.1, BM=64, BN=64, BD=64, CAUSAL=False, num_warps=4)
    assert got.copy_engines == ("tma",) and got.producer_warps == 4


def _ring(shape, tile="a", wgmma=True, spec_kwargs=None, dtype=D.bfloat16):
    """(tile function, RingPlan-like record) of a load of ``shape`` from a rank-len(shape) array."""
    from types import SimpleNamespace
    from tilejit import ir
    from tilejit.passes.plans import SharedTile
    array = ir.Value(ir.ArrayType(dtype, len(shape)), "a")
    fn = ir.Function("k", ir.Block([array], []), ["a"], {"specs": [ArraySpec(dtype, len(shape), **(spec_kwargs or {}))]})
    load = ir.Operation(ir.TileOp.LOAD, [array], [ir.TileType(tuple(shape), dtype)])
    return fn, SimpleNamespace(wgmma=wgmma, load=load, tile=SharedTile(tile))


@pytest.mark.parametrize("shape, tile, slot, want", [
    ((64, 64), "a", 8192, [((64, 64), 128, 0, 0)]),                     # 128-byte rows: one SW128 box
    ((64, 32), "a", 4096, [((64, 32), 64, 0, 0)]),                      # 64-byte rows: SW64
    ((64, 16), "b_nk", 2048, [((64, 16), 32, 0, 0)]),                   # 32-byte rows: SW32
    ((1, 1, 64, 128), "a_atoms", 16384, [((1, 1, 64, 64), 128, 0, 0),   # wide rows: one box per atom
                                         ((1, 1, 64, 64), 128, 8192, 64)]),
    ((32, 128), "b_atoms", 8192, [((32, 64), 128, 0, 0), ((32, 64), 128, 4096, 64)]),
    ((256, 64), "a", 32768, [((256, 64), 128, 0, 0)]),                  # the largest box
    ((24, 128), "a_atoms", 6144, [((24, 64), 128, 0, 0), ((24, 64), 128, 3072, 64)]),     # three 8-row groups
    ((256, 128), "a_atoms", 65536, [((256, 64), 128, 0, 0), ((256, 64), 128, 32768, 64)]),
    ((64, 24), "a", 3072, None),                                        # 48-byte rows
    ((12, 128), "a_atoms", 3072, None),                                 # atoms of a partial 8-row group
    ((64, 96), "a_atoms", 12288, None),                                 # 192-byte rows: not whole atoms
    ((512, 64), "a", 65536, None),                                      # past the 256-row box
    ((64, 64), "a", 8192 + 512, None),                                  # a slot off the swizzle period
    ((64, 64, 64), "a", 8192, None),                                    # two outer dims
    ((1, 64), "a", 128, None),                                          # no outer dim
    ((64, 1), "a", 128, None),                                          # one column
    ((1, 1, 1, 1, 64, 64), "a", 8192, None),                            # rank 6
    ((1, 1, 1, 64, 64), "a", 8192, [((1, 1, 1, 64, 64), 128, 0, 0)]),   # rank 5
])
def test_the_boxes_of_a_ring_slot(shape, tile, slot, want):
    from tilejit.passes import tma
    fn, ring = _ring(shape, tile)
    got = tma.ring_copies(fn, ring, slot)
    assert (None if got is None else [(c.box, c.swizzle, c.dst, c.inner) for c in got]) == want


@pytest.mark.parametrize("why, kwargs", [("not wgmma", {"wgmma": False}),
                                         ("no TMA descriptor", {"spec_kwargs": {"tma": False}}),
                                         ("strided rows", {"spec_kwargs": {"unit_inner_stride": False}}),
                                         ("unaligned", {"spec_kwargs": {"aligned16": False}})])
def test_rings_tma_cannot_fill(why, kwargs):
    from tilejit.passes import tma
    fn, ring = _ring((64, 64), **kwargs)
    assert tma.ring_copies(fn, ring, 8192) is None, why


def test_mbarrier_arrivals_and_later_phases():
    bars = emulate_tma.Mbarriers(64, 1)
    key = (0, 0)
    bars.init(key, 4)
    bars.arrive(key, 2)                           # half the arrivals: the phase goes on
    assert not bars.ready(key, 0)
    bars.arrive(key, 2)
    assert bars.ready(key, 0) and not bars.ready(key, 1)
    bars.wait(key, 0)
    with pytest.raises(emulate_tma.TmaError, match="would hang: phase 1"):
        bars.wait(key, 1)                         # phase 1 has no arrivals yet
    with pytest.raises(emulate_tma.TmaError, match="more arrivals"):
        bars.arrive(key, 5)


def test_a_side_that_waits_after_the_other_ended_is_told_so():
    """The baton: once one side of a warp-specialised IF has ended, a wait on the other side
    that cannot return reports the hang instead of blocking."""
    import threading
    baton = emulate_tma.Baton(emulate_tma.Mbarriers(64, 1))
    out = []

    def consumer():
        baton.acquire(0)
        out.append(baton.pause(0))                # hands over to the producer, which ends
        out.append(baton.pause(0))                # the producer is gone: False at once

    def producer():
        baton.acquire(1)
        baton.finish(1)
    workers = [threading.Thread(target=f, daemon=True) for f in (consumer, producer)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=5)
    assert out == [False, False] and not any(w.is_alive() for w in workers)


@pytest.mark.parametrize("bm, bn, dim, warps", [(128, 128, 128, 8), (256, 64, 64, 16)])
def test_the_consumers_take_no_more_registers_than_the_producer_frees(bm, bn, dim, warps):
    """A CTA holds its launch's registers a thread (``meta.max_registers``: 168 for 384 threads,
    96 for 640, not the register file's 65536), and a consumer's ``setmaxnreg.inc`` waits until
    the pool has what it asks: asking for more than the producer's decrease frees (16 warps'
    attention asked 112 against 96 + the producer's 56 spare: 8192 registers for 7168) waits
    forever on the GPU."""
    from tilejit.examples import attention
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec, ScalarSpec
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32),),
                                              {"BM": bm, "BN": bn, "BD": dim, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=warps, target="sm_90a")
    [inc] = [o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG and o.attrs.inc]
    [dec] = [o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG and not o.attrs.inc]
    consumers, producers = 32 * warps, 32 * fn.meta.producer_warps
    assert inc > fn.meta.max_registers > dec
    assert inc * consumers + dec * producers <= fn.meta.max_registers * (consumers + producers)


@pytest.mark.parametrize("bm, bn, dim, warps, wishes", [(128, 64, 64, 8, (3, 2)), (64, 128, 64, 4, (3, 2)),
                                                         (64, 128, 128, 4, ())])
def test_a_warp_specialised_kernel_wishes_for_the_ctas_its_shared_memory_fits(bm, bn, dim, warps, wishes):
    """``specialise_warps``: built for one CTA an SM, a warp-specialised kernel wishes for each
    larger count (up to ``CTAS_PER_SM``) whose CTAs' shared memory fits an SM (D128 on 64x128
    tiles, 181 KB: none); ``ctas_per_sm(fn, k)`` gives it the register file's share of one of
    k CTAs (``.maxnreg``), its consumers' increase inside that share; the emulator's values are
    the same at any count."""
    from tilejit import codegen
    from tilejit.examples import attention
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.passes.specialise_warps import ctas_per_sm
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec, ScalarSpec
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32),),
                                              {"BM": bm, "BN": bn, "BD": dim, "CAUSAL": True})
    fn = compile_to_simt(tile, num_warps=warps, target="sm_90a")
    assert fn.meta.ws_ctas_wishes == wishes
    threads = 32 * (warps + fn.meta.producer_warps)
    for ctas in wishes:
        ctas_per_sm(fn, ctas)
        counts = {o.attrs.inc: o.attrs.n for o in fn.walk() if o.op is SimtOp.SETMAXNREG}
        assert ctas * threads * fn.meta.max_registers <= 65536 < (ctas * threads * (fn.meta.max_registers + 8))
        assert counts[True] * 32 * warps + counts[False] * 32 * fn.meta.producer_warps <= fn.meta.max_registers * threads
        assert f".maxnreg {fn.meta.max_registers}" in codegen.compile_ptx(fn, "sm_90a")
    ctas_per_sm(fn, 1)
    assert fn.meta.max_registers in (0, 65536 // threads // 8 * 8)
    rng = np.random.default_rng(bm + bn)
    q, k, v = attention.example_inputs(rng, batch=1, heads=2, kv_heads=1, seq=150, dim=dim, dtype=D.bfloat16.np)
    ref = attention.reference(q, k, v, True)
    for ctas in wishes[:1] + (1,):
        ctas_per_sm(fn, ctas)
        o = np.full_like(q, np.nan)
        emulate.run(fn, (-(-150 // bm), 2), [q, k, v, o, np.float32(1 / np.sqrt(dim))])
        np.testing.assert_allclose(o.astype(np.float64), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("bm, bn, warps, ctas, spelling", [(128, 64, 8, 2, "example"), (64, 64, 4, 3, "example"),
                                                           (128, 128, 8, 1, "example"), (128, 64, 8, 2, "triton"),
                                                           (64, 64, 4, 3, "triton")])
def test_the_backend_keeps_the_first_wish_ptxas_neither_refuses_nor_spills(bm, bn, warps, ctas, spelling):
    """D64 attention: 128x64 tiles (8 warps) assemble at 2 CTAs an SM (3 are refused: too few
    registers for a wgmma), 64x64 (4 warps) at 3, and 128x128 (8 warps) at 1 (2 are refused);
    the kernel's register count is that many CTAs' share, and the wishes are spent.  The same
    for Triton's spelling (a plain ``range``, ``k.T``, 3-D arrays: ``test_rotate_products.
    plain_attention``)."""
    from tilejit.backends.cuda import assemble_hinted
    from tilejit.examples import attention
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.specs import ArraySpec, ScalarSpec
    from test_rotate_products import plain_attention
    if not ptxas.whole_program_available():
        pytest.skip("a setmaxnreg kernel is assembled whole: no ptxas command here")
    rank, kernel, consts = (4, attention.attention_kernel, {"CAUSAL": False}) if spelling == "example" else \
        (3, plain_attention, {})
    arr = ArraySpec(D.bfloat16, rank, True, True, False)
    tile = kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32, True),), {"BM": bm, "BN": bn, "BD": 64, **consts})
    fn = compile_to_simt(tile, num_warps=warps, target="sm_90a")
    assert fn.meta.ws_ctas_wishes
    asm, _, ptx = assemble_hinted(fn, "sm_90a", whole_program=True)
    threads = 32 * (warps + fn.meta.producer_warps)
    assert asm.spills == 0 and not fn.meta.ws_ctas_wishes
    assert fn.meta.max_registers == min(248, 65536 // ctas // threads // 8 * 8)
    assert f".maxnreg {fn.meta.max_registers}" in ptx


@pytest.mark.parametrize("bm, bn, warps", [(128, 64, 8), (64, 128, 4)])
def test_without_the_ptxas_command_a_wishing_kernel_stays_at_one_cta(bm, bn, warps, monkeypatch):
    """With no ``ptxas`` command (nvJitLink only, or nothing) there is no whole-program spill
    report to judge a wish by: the kernel keeps the registers of one CTA an SM (the setmaxnreg
    pair of the whole file, or none at 64x128 on 4 warps) and its wishes are spent; the PTX the
    driver will JIT-compile is that one."""
    from tilejit.backends import cuda
    from tilejit.examples import attention
    from tilejit.specs import ArraySpec, ScalarSpec
    monkeypatch.setattr(ptxas, "ptxas_command", lambda: None)
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32, True),),
                                              {"BM": bm, "BN": bn, "BD": 64, "CAUSAL": False})
    state = cuda.build(tile, warps, "sm_90a")
    fn = state["simt_fn"]
    threads = 32 * (warps + fn.meta.producer_warps)
    assert not fn.meta.ws_ctas_wishes
    assert fn.meta.max_registers in (0, min(248, 65536 // threads // 8 * 8))
    assert (f".maxnreg {fn.meta.max_registers}" in state["ptx"]) == bool(fn.meta.max_registers)
