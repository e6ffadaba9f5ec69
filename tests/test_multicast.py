"""TMA multicast over pairs of CTAs (``passes/multicast.py``): paired programs that load the
same box read it once, each CTA copying half into both; the emulator runs the pairs as clusters
(odd grids padded, grouped program order) against float64, counts the copies that were
multicast, and catches a pair whose slot releases are missing; the PTX assembles for sm_90a.
Also ``specialise_warps.ELECT_RELEASES``: one thread of each consumer warpgroup releases a slot."""
import ml_dtypes
import numpy as np
import pytest

import tilejit as tj
from tilejit import backends
from tilejit import dtypes as D
from tilejit.backends import emulate, emulate_async
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import attention, matmul
from tilejit.passes import multicast, specialise_warps
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setattr(multicast, "MULTICAST", True)


@pytest.fixture
def copies(monkeypatch):
    """{"multicast": n, "own": n}: the TMA copies the emulator runs, by kind."""
    counts = {"multicast": 0, "own": 0}
    plain = emulate_async.AsyncOps.op_TMA_LOAD

    def count(self, o, f):
        counts["multicast" if o.attrs.multicast else "own"] += len(list(self.issuers(o, f, 3)))
        return plain(self, o, f)
    monkeypatch.setattr(emulate_async.AsyncOps, "op_TMA_LOAD", count)
    return counts


def gemm_fn(BM, BN, BK, stages, warps):
    spec = ArraySpec(D.bfloat16, 2)
    tile = matmul.matmul_kernel.kernel.tile_ir((spec, spec, ArraySpec(D.float32, 2)),
                                               {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, warp_specialize=True, verify=True)


def run_gemm(fn, m, n, k, BM, BN):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    emulate.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    return np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max()


def test_off_by_default():
    fn = gemm_fn(64, 128, 64, 3, 4)
    assert not fn.meta.paired_ctas and fn.meta.cluster_ctas == 1
    assert not any(o.attrs.multicast for o in fn.walk() if o.op is SimtOp.TMA_LOAD)


@pytest.mark.parametrize("m, n, k, BM, BN, BK, stages, warps, multicast_copies, own_copies", [
    # 3 x 1 programs (padded to 4 CTAs): the first pair shares B (one box of 64 rows, halves
    # each way), the third program has no partner; 4 k-tiles
    (192, 64, 256, 64, 64, 64, 3, 4, 2 * 4, 3 * 4 + 4),
    # 4 x 2 programs in the grouped order: every pair shares its B column block (two 128-byte
    # atoms: two boxes a CTA), never A
    (256, 256, 256, 64, 128, 64, 3, 4, 8 * 4 * 2, 8 * 4),
    # ragged M and K, two consumer warpgroups, two slots
    (250, 64, 200, 128, 64, 64, 2, 8, 2 * 4, 2 * 4),
])
def test_paired_gemm_multicasts_the_shared_boxes_and_matches_float64(on, copies, m, n, k, BM, BN, BK, stages,
                                                                      warps, multicast_copies, own_copies):
    fn = gemm_fn(BM, BN, BK, stages, warps)
    assert fn.meta.paired_ctas and fn.meta.cluster_ctas == 2
    assert run_gemm(fn, m, n, k, BM, BN) < 1e-3
    assert copies == {"multicast": multicast_copies, "own": own_copies}


def test_a_pair_without_the_remote_releases_hangs(on):
    fn = gemm_fn(64, 64, 64, 2, 4)
    for o in fn.walk():
        for r in o.regions:
            r.ops[:] = [x for x in r.ops if not (x.op is SimtOp.MBARRIER_ARRIVE and len(x.operands) == 3)]
    with pytest.raises(emulate.EmulatorError, match="would hang"):
        run_gemm(fn, 128, 64, 512, 64, 64)


def test_the_partner_takes_its_own_half(on, monkeypatch):
    """Rank 1 copying the first half (the offset dropped) leaves the second half stale."""
    fn = gemm_fn(64, 64, 64, 3, 4)
    for o in fn.walk():
        if o.op is SimtOp.TMA_LOAD and o.attrs.multicast:
            o.operands[1] = o.operands[1].owner.operands[0]          # dst + rank * half -> dst
    try:
        error = run_gemm(fn, 128, 64, 256, 64, 64)
    except emulate.EmulatorError as e:
        assert "overwrites bytes" in str(e)        # both halves land on the first
    else:
        assert error > 1


def test_loops_whose_trips_depend_on_the_program_are_not_paired(on):
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    paired = {}
    for causal in (False, True):
        tile = attention.attention_kernel.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)),
                                                  {"BM": 128, "BN": 64, "BD": 64, "CAUSAL": causal})
        paired[causal] = compile_to_simt(tile, num_warps=8).meta.paired_ctas
    assert paired == {False: True, True: False}       # causal: the key loop ends at the diagonal


def test_paired_attention_matches_float64(on, copies):
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)),
                                              {"BM": 128, "BN": 64, "BD": 64, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=8)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 320, 64)).astype(D.bfloat16.np) for _ in range(3))
    o = np.zeros_like(q)
    emulate.run(fn, (3, 2), [q, k, v, o, np.float32(0.125)])
    assert np.abs(o.astype(np.float64) - attention.reference(q, k, v)).max() < 4e-3
    assert copies["multicast"] > 0


def test_paired_launch_geometry():
    assert backends.launch_geometry(1, (3, 2), ["a"], paired=True) == ((4, 2), ["a", 3])
    assert backends.launch_geometry(1, (4,), [], paired=True) == ((4,), [4])


@pytest.mark.parametrize("cluster_scope", [False, True])
def test_paired_ptx_assembles_for_sm_90a(on, monkeypatch, cluster_scope):
    """Both forms of the remote release (``codegen.mma.CLUSTER_SCOPE_RELEASE``) assemble."""
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    from tilejit.codegen import mma
    monkeypatch.setattr(mma, "CLUSTER_SCOPE_RELEASE", cluster_scope)
    ptx = compile_ptx(gemm_fn(128, 256, 64, 4, 8), "sm_90a")
    sem = ".release.cluster" if cluster_scope else ""
    assert f"mbarrier.arrive{sem}.shared::cluster.b64 _, [%tj_remote]" in ptx
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert ptx.count("mbarrier.init.shared::cta.b64") == 8 and ptx.count("], 258;") == 4   # 256 + 1 a warpgroup
    assert ptx.count("barrier.cluster.arrive.release.aligned") == 2
    assert "mapa.shared::cluster.u32" in ptx
    assert "mbarrier::complete_tx::bytes.multicast::cluster" in ptx
    out = ptxas.assemble(ptx, "sm_90a", whole_program=True)
    assert out.spills == 0, out.log


@pytest.mark.parametrize("pair", [False, True])
def test_elected_releases_one_thread_a_warpgroup(monkeypatch, pair):
    monkeypatch.setattr(specialise_warps, "ELECT_RELEASES", True)
    monkeypatch.setattr(multicast, "MULTICAST", pair)
    fn = gemm_fn(128, 64, 64, 2, 8)
    inits = sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.MBARRIER_INIT)
    assert inits == [1, 1, 2 + 2 * pair, 2 + 2 * pair]          # full: the producer; empty: 2 warpgroups (x 2)
    assert run_gemm(fn, 250, 64, 200, 128, 64) < 1e-3
    if ptxas.available():
        ptxas.assemble(compile_ptx(fn, "sm_90a"), "sm_90a", whole_program=True)


def test_inspect_says_the_programs_are_paired(on, monkeypatch, tmp_path):
    import tilejit as tj
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    kernel = tj.kernel(attention.attention_kernel.fn)          # a fresh kernel: nothing compiled yet
    q = np.zeros((1, 1, 256, 64), ml_dtypes.bfloat16)
    got = kernel.inspect(q, q, q, q, 0.1, BM=128, BN=64, BD=64, CAUSAL=False, num_warps=8)
    assert got.paired_ctas is True and got.cluster_ctas == 2 and "paired_ctas=True" in repr(got)
    got = kernel.inspect(q, q, q, q, 0.1, BM=128, BN=64, BD=64, CAUSAL=True, num_warps=8)
    assert not got.paired_ctas and "paired_ctas" not in repr(got)


def test_the_cached_artifact_remembers_the_pairs():
    from tilejit.backends.cuda import CudaArtifact
    art = CudaArtifact("k", [], (), 4, 0, "// ptx", paired_ctas=True, cluster_ctas=2)
    back = CudaArtifact.from_cache(art.files(), art.meta())
    assert back.paired_ctas is True and back.cluster_ctas == 2
    assert CudaArtifact.from_cache(art.files(), {**art.meta(), "paired_ctas": False}).paired_ctas is False


def test_boxes_are_halved_by_rows_of_whole_swizzle_periods():
    from types import SimpleNamespace
    from tilejit.abi import ParamDesc, ParamKind
    fn = SimpleNamespace(meta=SimpleNamespace(params=[ParamDesc(ParamKind.TENSOR_MAP, 0, None, D.bfloat16, (), 128)]))
    tmap = SimpleNamespace(owner=SimpleNamespace(attrs=SimpleNamespace(axis=0)))

    def half(box):
        return multicast._half(fn, SimpleNamespace(attrs=SimpleNamespace(box=box), operands=[tmap]))
    assert half((64, 64)) == (0, 32, 32 * 128, (32, 64))            # rows of 128 bytes: 4 KB a half
    assert half((1, 16, 32)) == (1, 8, 8 * 64, (1, 8, 32))          # 8 rows: one swizzle period each
    assert half((8, 64)) is None and half((24, 64)) is None         # a half would cut a period
    assert half((2, 16, 64)) is None                                # two outer dims


def test_paired_attention_backward_matches_unpaired_bit_for_bit(monkeypatch, copies):
    """dK/dV's pairs of key blocks share every q and dO box, dQ's pairs of query blocks every K
    and V box: the gradients are the same bits with the pairs as without."""
    import tilejit as tj
    from tilejit.examples import attention_backward as ab
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(0)
    q, k, v, do = ab.example_inputs(rng, batch=1, heads=2, kv_heads=1, seq=256, dim=64, dtype=tj.bfloat16.np)
    got = {}
    for pair in (False, True):
        monkeypatch.setattr(multicast, "MULTICAST", pair)
        dkdv, dq = tj.kernel(ab.dkdv_kernel.fn), tj.kernel(ab.dq_kernel.fn)      # fresh: nothing cached
        monkeypatch.setattr(ab, "dkdv_kernel", dkdv)
        monkeypatch.setattr(ab, "dq_kernel", dq)
        o, lse = ab.forward(q, k, v, False, BM=64, BN=64, num_warps=4)
        got[pair] = ab.backward(q, k, v, o, lse, do, False, BM=64, BN=128, num_warps=8, dq_config=(128, 64, 8))
        assert [e.artifact.paired_ctas for kern in (dkdv, dq) for e in kern._cache.values()] == [pair, pair]
    assert copies["multicast"] > 0
    for a, b, want in zip(got[False], got[True], ab.gradients(q, k, v, do)[1:]):
        assert np.array_equal(a, b) and np.abs(a.astype(np.float64) - want).max() < 4e-3


@tj.kernel
def triton_style_matmul(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, GROUP: tj.constexpr):
    """A 1-D grid walked in groups of GROUP row blocks by hand, a plain ``range`` loop."""
    pid = tj.program_id(0)
    num_m = tj.cdiv(a.shape[0], BM)
    width = GROUP * tj.cdiv(b.shape[1], BN)
    first = pid // width * GROUP
    rows = tj.minimum(num_m - first, GROUP)
    pid_m = first + pid % width % rows
    pid_n = pid % width // rows
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (pid_m * BM, k), (BM, BK)), tj.load(b, (k, pid_n * BN), (BK, BN)), acc)
    tj.store(c, (pid_m * BM, pid_n * BN), acc)


def test_a_triton_style_grouped_gemm_is_paired_too(on, copies):
    """Programs paired along the 1-D grid share B wherever the hand-written grouping gives them
    the same column block (a group of 3 row blocks: some pairs straddle two columns)."""
    spec = ArraySpec(D.bfloat16, 2)
    tile = triton_style_matmul.tile_ir((spec, spec, ArraySpec(D.float32, 2)), {"BM": 64, "BN": 64, "BK": 64, "GROUP": 3})
    fn = compile_to_simt(tile, num_warps=4, warp_specialize=True, verify=True)
    assert fn.meta.paired_ctas
    m, n, k = 64 * 5, 64 * 3, 128
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    emulate.run(fn, (5 * 3,), [a, b, c])
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() < 1e-3
    # 15 programs (16 CTAs), (row, column) blocks: 0-8 (0,0) (1,0) (2,0) (0,1) (1,1) (2,1) (0,2) (1,2)
    # (2,2), 9-14 (3,0) (4,0) (3,1) (4,1) (3,2) (4,2): pairs 0-1, 4-5 and 6-7 share their B block
    # (one box, 2 k-tiles, a half from each CTA); every A, and B of the other 9 programs, is their own
    assert copies == {"multicast": 3 * 2 * 2, "own": 15 * 2 + 9 * 2}


def test_pairs_without_multicast_copies_copy_whole_boxes_and_stay_correct(on, copies, monkeypatch):
    """``MULTICAST_COPIES=False`` (a probe of what pairing costs by itself): the same pairs and
    releases, every fill its own whole box."""
    monkeypatch.setattr(multicast, "MULTICAST_COPIES", False)
    fn = gemm_fn(64, 128, 64, 3, 4)
    assert fn.meta.paired_ctas and fn.meta.cluster_ctas == 2
    assert run_gemm(fn, 256, 256, 256, 64, 128) < 1e-3
    assert copies["multicast"] == 0 and copies["own"] > 0
