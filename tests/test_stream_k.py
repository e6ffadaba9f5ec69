"""Stream-K (``passes/stream_k.py``, ``STREAM_K``, on top of ``specialise_warps.PERSIST_TILES``):
the last waves of a persistent GEMM's output tiles are shared out by k-iterations.  The emulator
runs the kernel over chosen CTA counts, so that tiles are split in two or three pieces, a CTA
holds a middle piece, data-parallel waves come first, a CTA gets no k-iterations, and the CTAs
divide the tiles (no stream-K at all); every result matches float64 with the output poisoned, and
every arrival counter is back at zero.  A loop whose carried values are not zero-started wgmma
sums (attention's running max and sum, a GEMM that starts from a bias) is never split."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilejit as tj
from tilejit import abi, backends
from tilejit import dtypes as D
from tilejit.abi import ParamKind
from tilejit.backends import emulate
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import attention, matmul
from tilejit.passes import specialise_warps as SW
from tilejit.passes import stream_k as SK
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

from test_persist_tiles import gemm_as_triton_users_write_it, persist
from test_persist_tiles import test_another_spelling_reaches_the_persistent_path as persistent_spelling
from test_persist_tiles import test_a_user_gemm_with_bias_relu_and_a_bfloat16_output as persistent_bf16_gemm

_FIXTURES = (persist,)                  # test_persist_tiles' set-up, which ``stream`` builds on

KERNEL = matmul.matmul_kernel.kernel


@pytest.fixture
def stream(request, tmp_path):
    """``test_persist_tiles``' persistent set-up (emulate, kernels' caches cleared) with stream-K
    on and a cache of its own (the cache key does not see the switches)."""
    patch = request.getfixturevalue("persist")
    patch.setattr(SK, "STREAM_K", True)
    patch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    gemm_from_a_bias._cache.clear()
    gemm_from_a_bias._fast.clear()
    yield patch


def gemm(BM, BN, BK, stages, warps, out=D.float32):
    spec = ArraySpec(D.bfloat16, 2)
    tile = KERNEL.tile_ir((spec, spec, ArraySpec(out, 2)), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, verify=True)


def run(fn, grid, ctas, args):
    """Launch ``fn`` on ``ctas`` CTAs; the workspace, checked to be all zero counters after."""
    _, args = backends.launch_geometry(1, grid, args, ctas, tiles=True, workspace=emulate.workspace(fn))
    used = min(ctas, grid[0] * grid[1] * backends.STREAM_K_SPLIT)
    emulate.Machine(fn, (used, 1, 1), emulate.bind_params(fn, args)).run()
    workspace = args[-1]
    assert workspace.size == abi.workspace_words(fn.meta.stream_k, used)
    assert not workspace[:2 * used].any(), "arrival counters left set"
    return workspace


@pytest.mark.parametrize("m, n, k, cfg, ctas", [
    (128, 128, 512, (64, 64, 64, 3, 4), 5),      # 4 tiles of 8 k-tiles on 5 CTAs: 6.4 each, middle pieces
    (128, 128, 512, (64, 64, 64, 3, 4), 7),      # three pieces to some tiles
    (192, 128, 200, (64, 64, 64, 3, 4), 4),      # 6 tiles on 4: all stream-K; a ragged last k-tile
    (320, 192, 448, (64, 64, 64, 3, 4), 4),      # 15 tiles on 4: two data-parallel waves, then 7 shared
    (130, 192, 320, (128, 64, 64, 2, 8), 4),     # two consumer warpgroups, ragged M
    (128, 256, 64, (64, 64, 64, 3, 4), 5),       # one k-tile a tile: 8 tiles on 5 CTAs, whole pieces
    (256, 128, 256, (64, 64, 64, 3, 4), 4),      # 8 tiles on 4 CTAs: no stream-K
])
def test_the_emulated_stream_k_gemm_matches_float64(stream, m, n, k, cfg, ctas):
    BM, BN, BK, stages, warps = cfg
    fn = gemm(BM, BN, BK, stages, warps)
    assert fn.meta.persistent_tiles and fn.meta.stream_k
    rng = np.random.default_rng(m + n + k + ctas)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, np.float32)
    run(fn, (-(-m // BM), -(-n // BN)), ctas, [a, b, c])
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() < 1e-3


def test_an_empty_k_loop_leaves_no_tile_unwritten(stream):
    """K = 0: nothing to share out, so every tile is data-parallel, and 6 tiles on 4 CTAs are
    ragged over them (two CTAs take two): each still stores its zeros."""
    fn = gemm(64, 64, 64, 3, 4)
    a, b = np.zeros((192, 0), ml_dtypes.bfloat16), np.zeros((0, 128), ml_dtypes.bfloat16)
    c = np.full((192, 128), np.nan, np.float32)
    run(fn, (3, 2), 4, [a, b, c])
    np.testing.assert_array_equal(c, 0)


def test_a_user_gemm_with_a_bfloat16_epilogue_through_the_launch(stream):
    """``tj.kernel`` on emulate (``test_persist_tiles``' bfloat16 GEMM, NumPy's result): the launch
    appends the extents and the workspace (CTAs for half the tiles and one more, so the tiles do
    not divide) and checks the counters after."""
    persistent_bf16_gemm(stream)
    x = np.zeros((64, 64), ml_dtypes.bfloat16)
    info = KERNEL.inspect(x, x, x, BM=64, BN=64, BK=64, STAGES=3, num_warps=4)
    assert info.persistent_tiles and info.stream_k


@pytest.mark.parametrize("warps, BM", [(4, 64), (8, 128)])
def test_a_gemm_spelled_as_triton_users_write_it_is_split_too(stream, warps, BM):
    """A plain ``range`` loop with ``acc +=``, weights stored (N, K) and read ``.T``, N along grid
    axis 0 (``test_persist_tiles``' ragged case, NumPy's result): the same stream-K path."""
    persistent_spelling(stream, warps, BM)
    a, w = np.zeros((8, 64), ml_dtypes.bfloat16), np.zeros((8, 64), ml_dtypes.bfloat16)
    info = gemm_as_triton_users_write_it.inspect(a, w, np.zeros((8, 8), ml_dtypes.bfloat16), BM=BM, BN=64, BK=64,
                                                 num_warps=warps)
    assert info.persistent_tiles and info.stream_k


def test_a_lost_piece_is_caught(stream, monkeypatch):
    """Without the pieces' sum (each completing piece keeps only its own k-range) the result is
    wrong: the test above can fail."""
    fn = gemm(64, 64, 64, 3, 4)
    [split] = [o for o in fn.body.ops if o.op is SimtOp.IF]
    sums = [o for o in split.regions[0].walk() if o.op is SimtOp.FOR and o.results
            and o.results[0].type.dtype == D.float32 and not o.attrs]
    assert len(sums) == 1
    sums[0].operands[1] = sums[0].operands[0]                  # the loop over the pieces' slots runs not
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 128)).astype(ml_dtypes.bfloat16)
    c = np.full((128, 128), np.nan, np.float32)
    run(fn, (2, 2), 5, [a, b, c])
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() > 1


def test_the_workspace_is_the_last_parameter_and_the_switch_turns_it_off(stream):
    fn = gemm(128, 256, 64, 3, 8, out=D.bfloat16)
    ws = fn.meta.params[-1]
    assert ws.kind is ParamKind.WORKSPACE and ws.arg == len(fn.arg_names) + 3
    assert fn.meta.stream_k == 128 * 256                      # 128 accumulator registers of 256 consumers
    assert "stream_k=32768" in fn.meta.summary()
    stream.setattr(SK, "STREAM_K", False)
    fn = gemm(128, 256, 64, 3, 8, out=D.bfloat16)
    assert fn.meta.persistent_tiles and not fn.meta.stream_k
    assert ParamKind.WORKSPACE not in {p.kind for p in fn.meta.params}


def test_off_by_default():
    assert SK.STREAM_K is False
    assert not gemm(64, 64, 64, 3, 4).meta.stream_k


def test_the_launch_appends_a_workspace_for_its_ctas():
    made = []
    grid, args = backends.launch_geometry(1, (3, 5), ["a"], 4, tiles=True, workspace=lambda n: made.append(n) or "ws")
    assert grid == (4, 1, 1) and args == ["a", 3, 5, 1, "ws"] and made == [4]
    assert abi.workspace_words(100, 4) == 8 * 101


@tj.kernel
def gemm_from_a_bias(a, b, bias, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """The accumulator starts from the bias: a k-range of the loop is not a part of the sum."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32) + tj.load(bias, (n,), (BN,))[None, :]
    for k in range(0, a.shape[1], BK):
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)))
    tj.store(c, (m, n), acc)


def test_loops_that_are_not_zero_started_sums_are_not_split(stream):
    rng = np.random.default_rng(2)
    m, n, k = 192, 128, 256
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    gemm_from_a_bias[(3, 2)](a, b, bias, c, BM=64, BN=64, BK=64, num_warps=4)
    info = gemm_from_a_bias.inspect(a, b, bias, c, BM=64, BN=64, BK=64, num_warps=4)
    assert info.persistent_tiles and not info.stream_k
    assert np.abs(c - (a.astype(np.float64) @ b.astype(np.float64) + bias)).max() < 1e-3
    arr = ArraySpec(D.bfloat16, 4)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32),),
                                              {"BM": 64, "BN": 64, "BD": 64, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=4)
    assert fn.meta.persistent_tiles and not fn.meta.stream_k


def test_the_stream_k_ptx_assembles_without_spills(stream):
    """Whole-program (as a GPU host assembles a setmaxnreg kernel: the consumers' 232 registers)
    with the toolkit's ptxas, else through nvJitLink (168 registers: a few spills are allowed
    there, in the pieces' sum only)."""
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    whole = ptxas.whole_program_available()
    for BM, BN, stages, out in ((128, 256, 3, D.bfloat16), (128, 128, 4, D.float32)):
        fn = gemm(BM, BN, 64, stages, 8, out=out)
        assert fn.meta.stream_k
        result = ptxas.assemble(compile_ptx(fn, "sm_90a"), "sm_90a", whole_program=whole)
        assert "serialized" not in result.log, result.log
        assert result.spills <= (0 if whole else 64), result.log


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, cfg", [(1000, 1104, 904, (128, 256, 64, 3, 8)), (128, 8192, 1024, (64, 128, 64, 4, 4)),
                                          (4096, 4096, 512, (128, 256, 64, 3, 8))])
def test_the_stream_k_gemm_on_the_gpu(monkeypatch, tmp_path, m, n, k, cfg):
    monkeypatch.setattr(SW, "PERSIST_TILES", True)
    monkeypatch.setattr(SK, "STREAM_K", True)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))       # the cache key does not see the switch
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    KERNEL._cache.clear()
    KERNEL._fast.clear()
    BM, BN, BK, stages, warps = cfg
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    for _ in range(3):                              # a fresh launch and re-launches (the counters reset)
        c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
        KERNEL[(tj.cdiv(m, BM), tj.cdiv(n, BN))](a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
        tj.testing.assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype=tj.bfloat16)
    info = KERNEL.inspect(a, b, c, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
    assert info.persistent_tiles and info.stream_k
    KERNEL._cache.clear()
    KERNEL._fast.clear()


def test_the_cuda_artifact_keeps_stream_k_and_both_launch_paths_pass_a_workspace(monkeypatch):
    """No GPU: the loaded kernel is a stand-in and the workspace maker is replaced.  The disk
    cache's entry keeps the slot size (an entry written before stream-K reads as none); the fast
    re-launch and the full path both append the extents and a workspace for their CTA count."""
    from types import SimpleNamespace

    from tilejit.abi import ParamDesc
    from tilejit.backends.cuda import CudaArtifact, CudaBackend
    from tilejit.runtime import launch
    params = [ParamDesc(ParamKind.PTR, 0, None, D.float32)]
    art = CudaArtifact("k", params, (0,), 8, 0, ".version 8.4", None, "", "", 64, 0, cta_threads=384,
                       producer_warps=4, persistent_tiles=True, stream_k=32768)
    assert CudaArtifact.from_cache(art.files(), art.meta()).stream_k == 32768
    meta = art.meta()
    del meta["stream_k"]
    assert CudaArtifact.from_cache(art.files(), meta).stream_k == 0
    assert CudaArtifact("k", params, (0,), 8, 0, "", None, "", "").workspace(0) is None
    made = []
    monkeypatch.setattr(CudaArtifact, "workspace",
                        lambda self, device: (lambda ctas: made.append((device, ctas)) or f"ws{ctas}"))
    launched = []
    fake = SimpleNamespace(device=0, resident_ctas=lambda threads: 132,
                           launch=lambda grid, threads, views, params, stream: launched.append((grid, views)))
    art.kernel_for_device = lambda device: fake
    view = SimpleNamespace(device=0, stream=None)
    CudaBackend().fast_launcher(art)((32, 16, 1), [view], None)
    assert launched == [((132, 1, 1), [view, 32, 16, 1, "ws132"])] and made == [(0, 132)]
    captured = {}

    def launch_arrays(kernel_for_device, grid, threads, args, params, writes, stream, geometry):
        captured["geometry"] = geometry(fake, grid, ["view"])
    monkeypatch.setattr(launch, "launch_arrays", launch_arrays)
    CudaBackend().launch(art, (20, 1, 1), ["array"], None)            # 20 tiles: 4 CTAs a tile at most
    assert captured["geometry"] == ((80, 1, 1), ["view", 20, 1, 1, "ws80"])
