"""Persistent warp-specialised kernels (``passes/specialise_warps.py``, ``PERSIST_TILES``): each
CTA loops over programs ``c, c + n, ...`` of the whole grid, its producer warpgroup filling the
next program's first ring slots while the consumers run this one's epilogue.  Slot numbers and
mbarrier phases count the CTA's k-tiles over all its programs, so the emulator (which launches
CTAs for half the programs: every CTA runs two or more) checks the hand-off across programs:
a phase restarted per program is an error.  Ragged GEMMs and attention (causal: a k-loop
length per program) give NumPy's results with their outputs poisoned; the rings keep their
shared bytes; the launch is 1-D with the grid's extents appended; the PTX assembles for sm_90a
without spills."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilejit as tj
from tilejit import backends, ir, simt
from tilejit import dtypes as D
from tilejit.backends import emulate
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import attention, matmul
from tilejit.passes import specialise_warps as SW
from tilejit.passes.pipeline import compile_to_simt
from tilejit.passes.shared_memory import ring_buffers
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

KERNEL = matmul.matmul_kernel.kernel


@pytest.fixture
def persist(monkeypatch):
    monkeypatch.setattr(SW, "PERSIST_TILES", True)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    kernels = (KERNEL, attention.attention_kernel, gemm_as_triton_users_write_it)
    for k in kernels:
        k._cache.clear()
        k._fast.clear()
    yield monkeypatch
    for k in kernels:
        k._cache.clear()
        k._fast.clear()


def gemm(BM, BN, BK, stages, warps, out=D.float32, **options):
    spec = ArraySpec(D.bfloat16, 2)
    tile = KERNEL.tile_ir((spec, spec, ArraySpec(out, 2)), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, verify=True, **options)


def sides(fn):
    [split] = [o for o in fn.body.ops if o.op is SimtOp.IF]
    return split.regions


@pytest.mark.parametrize("m, n, k, BM, BN, BK, stages, warps", [
    (100, 128, 200, 64, 128, 64, 3, 4),        # ragged M and K, one tile of N
    (192, 128, 40, 64, 64, 32, 5, 4),          # k-tiles per program (2) below the ring depth (5)
    (130, 192, 320, 128, 64, 64, 2, 8),        # two consumer warpgroups, two slots
    (320, 192, 448, 64, 64, 64, 3, 4),         # 7 k-tiles: slot numbers wrap mid-program
])
def test_the_emulated_persistent_gemm_matches_float64(persist, m, n, k, BM, BN, BK, stages, warps):
    fn = gemm(BM, BN, BK, stages, warps)
    assert fn.meta.persistent_tiles and fn.meta.producer_warps == 4
    rng = np.random.default_rng(m + k)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, np.float32)
    emulate.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() < 1e-3


def test_a_user_gemm_with_bias_relu_and_a_bfloat16_output(persist):
    """Through the kernel's own launch (``tj.kernel`` on emulate): its 1-D grid, the extents
    appended to the arguments, a smem-staged bfloat16 epilogue reused across programs."""
    rng = np.random.default_rng(7)
    m, n, k = 200, 256, 192
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    KERNEL[(tj.cdiv(m, 64), tj.cdiv(n, 64))](a, b, c, BM=64, BN=64, BK=64, STAGES=3, num_warps=4)
    info = KERNEL.inspect(a, b, c, BM=64, BN=64, BK=64, STAGES=3, num_warps=4)
    assert info.persistent_tiles and info.producer_warps == 4
    tj.testing.assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=tj.bfloat16)


@pytest.mark.parametrize("seq, dim, causal", [(150, 64, True), (100, 128, False), (200, 64, True)])
def test_the_emulated_persistent_attention_matches_float64(persist, seq, dim, causal):
    """Causal attention's k-loop is longer for later query blocks: ``base`` grows by each
    program's own trip count."""
    q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, 4, 2, seq, dim, tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    grid = (tj.cdiv(seq, 64), 4)
    attention.attention_kernel[grid](q, k, v, o, 1.0 / float(np.sqrt(dim)), BM=64, BN=64, BD=dim,
                                     CAUSAL=causal, num_warps=4)
    info = attention.attention_kernel.inspect(q, k, v, o, 1.0, BM=64, BN=64, BD=dim, CAUSAL=causal, num_warps=4)
    assert info.persistent_tiles
    tj.testing.assert_close(o, attention.reference(q, k, v, causal), dtype=tj.bfloat16)


def test_each_side_loops_over_programs_carrying_its_k_tiles(persist):
    fn = gemm(128, 128, 64, 4, 8)
    extents = fn.meta.params[-3:]
    assert [p.arg for p in extents] == [len(fn.arg_names) + a for a in range(3)]
    for side in sides(fn):
        [loop] = [o for o in side.ops if o.op is SimtOp.FOR]
        assert [r.type.dtype for r in loop.results] == [D.int32]          # base
        assert loop.regions[0].ops[-1].op is SimtOp.YIELD
        assert not [o for o in side.ops if o.op in (SimtOp.TMA_LOAD, SimtOp.WGMMA)]   # all in the loop
    consumer, producer = sides(fn)
    assert consumer.ops[0].op is SimtOp.SETMAXNREG
    # the consumers end each program with their named barrier; the producer waits before every fill
    [loop] = [o for o in consumer.ops if o.op is SimtOp.FOR]
    ops = loop.regions[0].ops
    last = max(i for i, o in enumerate(ops) if o.op is SimtOp.BARRIER)
    assert ops[last].operands and {o.op for o in ops[last + 1:]} <= {SimtOp.ELEMENTWISE, SimtOp.CONSTANT, SimtOp.YIELD}
    fills = [o for o in producer.walk() if o.op is SimtOp.MBARRIER_EXPECT_TX]
    waits = [o for o in producer.walk() if o.op is SimtOp.MBARRIER_WAIT]
    assert len(fills) == len(waits) == 1


def test_rings_keep_their_bytes_or_the_kernel_stays_per_program(persist):
    fn = gemm(128, 256, 64, 3, 8, out=D.bfloat16)           # 144 KiB of ring + a 64 KiB epilogue
    assert fn.meta.persistent_tiles
    rings = {b: fn.meta.shared_buffers[b] for b in ring_buffers(fn)}
    others = {b: s for b, s in fn.meta.shared_buffers.items() if b not in rings}
    assert all(ro + rs <= oo or oo + os_ <= ro for ro, rs in rings.values() for oo, os_ in others.values())
    fn = gemm(128, 256, 64, 4, 8, out=D.bfloat16)           # 192 KiB of ring: the epilogue must reuse it
    assert not fn.meta.persistent_tiles and fn.meta.producer_warps == 4


def test_off_by_default_and_with_the_switch_off():
    assert not SW.PERSIST_TILES
    fn = gemm(128, 128, 64, 4, 8, warp_specialize=True)
    assert fn.meta.producer_warps == 4 and not fn.meta.persistent_tiles
    assert gemm(128, 128, 64, 4, 8).meta.producer_warps == 0


def test_the_launch_is_one_dimensional_with_the_grid_appended():
    assert backends.launch_geometry(1, (3, 5), ["a"], 4, tiles=True) == ((4, 1, 1), ["a", 3, 5, 1])
    assert backends.launch_geometry(1, (3, 5, 2), [], 1000, tiles=True) == ((30, 1, 1), [3, 5, 2])
    assert backends.launch_geometry(1, (7,), [], 132, tiles=True) == ((7, 1, 1), [7, 1, 1])


def test_a_phase_restarted_per_program_is_caught(persist):
    """The consumers' k-tile count without ``base``: from the second program on they wait on
    phases the producer has not reached, or on slots it refilled; the emulator says so."""
    fn = gemm(64, 64, 64, 3, 4)
    consumer, _ = sides(fn)
    [loop] = [o for o in consumer.ops if o.op is SimtOp.FOR]
    base = loop.regions[0].args[1]
    zero = ir.Operation(SimtOp.CONSTANT, [], [base.type], simt.VectorConstAttrs((0,)))
    loop.regions[0].ops.insert(0, zero)
    for o in loop.regions[0].walk():
        if o is not loop.regions[0].ops[-1]:
            o.operands = [zero.result if x is base else x for x in o.operands]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 320)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((320, 128)).astype(ml_dtypes.bfloat16)
    with pytest.raises(emulate.EmulatorError):
        emulate.run(fn, (4, 2), [a, b, np.zeros((256, 128), np.float32)])


def test_the_persistent_ptx_assembles_without_spills(persist):
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    for BM, BN, stages, out in ((128, 256, 3, D.bfloat16), (128, 128, 4, D.float32)):
        fn = gemm(BM, BN, 64, stages, 8, out=out)
        assert fn.meta.persistent_tiles
        ptx = compile_ptx(fn, "sm_90a")
        result = ptxas.assemble(ptx, "sm_90a")
        assert result.spills == 0 and "serialized" not in result.log, result.log


def test_by_default_attention_is_specialised_and_not_persistent():
    arr = ArraySpec(D.bfloat16, 4)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32),),
                                              {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": True})
    fn = compile_to_simt(tile, num_warps=8)
    assert fn.meta.producer_warps == 4 and not fn.meta.persistent_tiles


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, cfg", [(1000, 1104, 904, (128, 256, 64, 3, 8)), (777, 640, 1024, (128, 128, 64, 4, 8)),
                                          (4096, 4096, 512, (128, 256, 64, 3, 8))])
def test_the_persistent_gemm_on_the_gpu(monkeypatch, tmp_path, m, n, k, cfg):
    monkeypatch.setattr(SW, "PERSIST_TILES", True)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))       # the cache key does not see the switch
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    KERNEL._cache.clear()
    KERNEL._fast.clear()
    BM, BN, BK, stages, warps = cfg               # (rows of 16-byte multiples: TMA can read them)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    for _ in range(2):                              # a fresh launch and a re-launch (fast path)
        c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
        KERNEL[(tj.cdiv(m, BM), tj.cdiv(n, BN))](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
        tj.testing.assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=tj.bfloat16)
    info = KERNEL.inspect(a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
    assert info.persistent_tiles
    KERNEL._cache.clear()
    KERNEL._fast.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_the_persistent_attention_on_the_gpu(monkeypatch, tmp_path, causal):
    monkeypatch.setattr(SW, "PERSIST_TILES", True)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    attention.attention_kernel._cache.clear()
    attention.attention_kernel._fast.clear()
    q, k, v = attention.example_inputs(np.random.default_rng(3), 2, 8, 2, 1000, 128, tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    attention.attention_kernel[(tj.cdiv(1000, 128), 16)](q, k, v, o, 1.0 / float(np.sqrt(128)), BM=128, BN=128,
                                                          BD=128, CAUSAL=causal, num_warps=8)
    tj.testing.assert_close(o, attention.reference(q, k, v, causal), dtype=tj.bfloat16)
    attention.attention_kernel._cache.clear()
    attention.attention_kernel._fast.clear()


@tj.kernel
def gemm_as_triton_users_write_it(a, w, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """A plain ``range`` loop, ``acc +=``, weights stored (N, K) and read ``.T``, N along axis 0."""
    n = tj.program_id(0) * BN
    m = tj.program_id(1) * BM
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(w, (n, k), (BN, BK)).T)
    tj.store(c, (m, n), acc.to(c.dtype))


@pytest.mark.parametrize("warps, BM", [(4, 64), (8, 128)])
def test_another_spelling_reaches_the_persistent_path(persist, warps, BM):
    rng = np.random.default_rng(warps)
    m, n, k = 3 * BM + 5, 200, 320
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    grid = (tj.cdiv(n, 64), tj.cdiv(m, BM))
    gemm_as_triton_users_write_it[grid](a, w, c, BM=BM, BN=64, BK=64, num_warps=warps)
    info = gemm_as_triton_users_write_it.inspect(a, w, c, BM=BM, BN=64, BK=64, num_warps=warps)
    assert info.persistent_tiles and info.producer_warps == 4
    tj.testing.assert_close(c, a.astype(np.float64) @ w.astype(np.float64).T, dtype=tj.bfloat16)
