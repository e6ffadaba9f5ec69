"""TMA stores (``passes/plan_stores.py``, ``lower_memory.tma_store``): which STOREs one thread
copies out by TMA boxes from a staging tile, the values on the emulator (ragged edges dropped,
with and without warp specialisation), the mistakes the emulator catches (a copy issued before
the threads' writes are ordered, a kernel that ends before the copy has read shared memory),
and the PTX nvJitLink assembles."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.backends import emulate
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import matmul
from tilejit.passes import plan_stores
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

from conftest import assemble_or_skip, pipeline_until

KERNEL = matmul.matmul_kernel.kernel
BF16 = ArraySpec(tj.bfloat16, 2)


@pytest.fixture(autouse=True)
def tma_stores(monkeypatch):
    monkeypatch.setattr(plan_stores, "TMA_STORES", True)


def gemm(BM=128, BN=256, BK=64, stages=4, warps=8, out=BF16, ws=False, target="sm_90a"):
    tile = KERNEL.tile_ir((BF16, BF16, out), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, target=target, warp_specialize=ws, verify=True)


def planned(kernel, specs, consts, target="sm_90a", num_warps=4):
    return pipeline_until(kernel, specs, consts, "plan_stores", num_warps, target).meta["store_plans"]


def test_a_gemm_epilogue_in_16_bits_is_copied_out_by_one_box_per_atom():
    plans = planned(KERNEL, (BF16, BF16, BF16), {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4}, num_warps=8)
    [plan] = plans.values()
    assert [c.box for c in plan.copies] == [(128, 64)] * 4 and [c.inner for c in plan.copies] == [0, 64, 128, 192]
    assert plan.nbytes == 128 * 256 * 2 and plan.describe().startswith("tma store: 4 box(es) of 128x64")
    fn = gemm()
    assert len([o for o in fn.walk() if o.op is SimtOp.TMA_STORE]) == 4
    assert not [o for o in fn.walk() if o.op is SimtOp.STORE_GLOBAL]


@pytest.mark.parametrize("why, out, target, mask", [
    ("float32 rows are whole sectors already", ArraySpec(tj.float32, 2), "sm_90a", False),
    ("no TMA before sm_90", BF16, "sm_80", False),
    ("TMA cannot describe the array", ArraySpec(tj.bfloat16, 2, True, False, False, tma=False), "sm_90a", False),
    ("a user mask", BF16, "sm_90a", True),
])
def test_other_stores_stay_with_the_threads(why, out, target, mask):
    @tj.kernel
    def masked(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        acc = tj.zeros((BM, BN), tj.float32)
        for k in range(0, a.shape[1], BK):
            acc = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)), acc)
        tj.store(c, (0, 0), acc.to(c.dtype), mask=acc > 0)
    kernel = masked if mask else KERNEL
    consts = {"BM": 64, "BN": 128, "BK": 64} if mask else {"BM": 64, "BN": 128, "BK": 64, "STAGES": 3}
    assert planned(kernel, (BF16, BF16, out), consts, target) == {}, why


def test_an_array_the_kernel_also_reads_is_stored_by_the_threads():
    @tj.kernel
    def accumulate(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        acc = tj.load(c, (0, 0), (BM, BN)).to(tj.float32)
        for k in range(0, a.shape[1], BK):
            acc = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)), acc)
        tj.store(c, (0, 0), acc.to(c.dtype))
    assert planned(accumulate, (BF16, BF16, BF16), {"BM": 64, "BN": 128, "BK": 64}) == {}


@pytest.mark.parametrize("m, n, k, BM, BN, warps, ws", [
    (200, 304, 136, 128, 256, 8, False),     # ragged M and N: the copies drop what lies past the edges
    (200, 304, 136, 128, 256, 8, True),      # the epilogue in the consumer warpgroups
    (72, 136, 64, 64, 64, 4, False),         # one atom per box row, one warpgroup
])
def test_the_emulated_gemm_with_a_tma_store_matches_float64(m, n, k, BM, BN, warps, ws):
    fn = gemm(BM, BN, 64, 3, warps, ws=ws)
    assert [o for o in fn.walk() if o.op is SimtOp.TMA_STORE]
    assert fn.meta.producer_warps == (4 if ws else 0)
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, n)).astype(tj.bfloat16.np)
    c = np.full((m, n), 7, tj.bfloat16.np)
    emulate.run(fn, (-(-m // BM), -(-n // BN)), [a, b, c])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())


def _without(fn, kind):
    for o in fn.walk():
        for r in o.regions:
            r.ops[:] = [x for x in r.ops if x.op is not kind]
    fn.body.ops[:] = [x for x in fn.body.ops if x.op is not kind]
    return fn


def _run(fn):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(tj.bfloat16.np)
    b = rng.standard_normal((64, 64)).astype(tj.bfloat16.np)
    emulate.run(fn, (1, 1), [a, b, np.zeros((64, 64), tj.bfloat16.np)])


def test_the_emulator_catches_a_copy_issued_before_the_writes_are_ordered():
    fn = gemm(64, 64, 64, 3, 4)
    _run(fn)                                           # as compiled: fine
    epilogue = fn.body.ops
    i = next(i for i, o in enumerate(epilogue) if o.op is SimtOp.TMA_STORE)
    assert epilogue[i - 1].op is SimtOp.BARRIER and epilogue[i - 2].op is SimtOp.FENCE_PROXY_ASYNC
    del epilogue[i - 1]
    with pytest.raises(emulate.EmulatorError, match="TMA_STORE reads bytes written since the last BARRIER"):
        _run(fn)


def test_the_emulator_catches_a_kernel_that_ends_while_its_copy_reads_shared_memory():
    with pytest.raises(emulate.EmulatorError, match="ends before the TMA_STORE_WAIT"):
        _run(_without(gemm(64, 64, 64, 3, 4), SimtOp.TMA_STORE_WAIT))


@pytest.mark.parametrize("ws", [False, True])
def test_the_tma_store_ptx_assembles(ws):
    ptx = compile_ptx(gemm(ws=ws), "sm_90a")
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 4
    assert "cp.async.bulk.wait_group.read 0" in ptx and "st.global" not in ptx
    assert ptx.count(".param .align 64 .b8") == 3                 # A's map, B's and C's
    out = assemble_or_skip(ptx, "sm_90a")
    assert out.spills == 0


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, config", [
    (1000, 1104, 520, dict(BM=128, BN=256, BK=64, STAGES=4, num_warps=8)),
    (129, 200, 64, dict(BM=64, BN=128, BK=64, STAGES=3, num_warps=4)),
])
def test_tj_matmul_with_tma_stores_through_the_launch_path(backend, m, n, k, config, monkeypatch, tmp_path):
    """``TILEJIT_TMA_STORE=1`` reaches the pipeline (the module default off: only the switch can
    turn it on) and the cache key; the output array, poisoned first, holds the product and
    nothing past its edges is touched."""
    monkeypatch.setattr(plan_stores, "TMA_STORES", False)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_TMA_STORE", "1")
    if backend == "emulate" and m > 200:
        m, n, k = 136, 264, 72
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, n)).astype(tj.bfloat16.np)
    c = np.full((m + 3, n), -7, tj.bfloat16.np)
    out = c[:m]
    grid = (tj.cdiv(m, config["BM"]), tj.cdiv(n, config["BN"]))
    KERNEL[grid](a, b, out, **config)
    assert "tma store" in KERNEL.inspect(a, b, out, **config).copy_engines
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())
    assert (c[m:] == -7).all()


ATT_SPECS = (ArraySpec(tj.bfloat16, 4),) * 4 + (ScalarSpec(tj.float32),)


@pytest.mark.parametrize("dim, boxes", [(64, 1), (128, 2)])
def test_attentions_4d_output_block_is_copied_out_by_4d_boxes(dim, boxes):
    """A STORE of a 2-D tile reshaped with unit dims in front (attention's (1, 1, BM, BD) block of
    a (B, H, S, D) array) is a TMA store too: 4-D boxes of one 128-byte atom, the 2-D tile staged,
    every coordinate passed to the copy."""
    from tilejit.examples import attention
    consts = {"BM": 128, "BN": 128, "BD": dim, "CAUSAL": False}
    [plan] = planned(attention.attention_kernel, ATT_SPECS, consts, num_warps=8).values()
    assert [c.box for c in plan.copies] == [(1, 1, 128, 64)] * boxes and plan.tile.type.shape == (128, dim)
    fn = compile_to_simt(attention.attention_kernel.tile_ir(ATT_SPECS, consts), num_warps=8, target="sm_90a",
                         verify=True)
    stores = [o for o in fn.walk() if o.op is SimtOp.TMA_STORE]
    assert len(stores) == boxes and all(len(o.operands) == 3 + 4 for o in stores)
    ptx = compile_ptx(fn, "sm_90a")
    assert ptx.count("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group") == boxes
    assert assemble_or_skip(ptx, "sm_90a").spills == 0


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("causal, config", [(False, (128, 128, 8)), (True, (64, 128, 4))])
def test_attention_with_a_tma_store_matches_float64(backend, causal, config, monkeypatch, tmp_path):
    """A ragged length: the last block's rows past the end are dropped by the copy (kept, they
    would land in the next head's first rows)."""
    from tilejit.examples import attention
    monkeypatch.setattr(plan_stores, "TMA_STORES", False)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_TMA_STORE", "1")
    bm, bn, warps = config
    q, k, v = attention.example_inputs(np.random.default_rng(7), batch=1, heads=4, kv_heads=2, seq=200, dim=128,
                                       dtype=tj.bfloat16.np)
    o = np.full_like(q, -7)
    args = (q, k, v, o, 128 ** -0.5)
    consts = {"BM": bm, "BN": bn, "BD": 128, "CAUSAL": causal}
    attention.attention_kernel[(tj.cdiv(200, bm), 4)](*args, **consts, num_warps=warps)
    assert "tma store" in attention.attention_kernel.inspect(*args, **consts, num_warps=warps).copy_engines
    np.testing.assert_allclose(o.astype(np.float64), attention.reference(q, k, v, causal), rtol=2e-2, atol=4e-3)
