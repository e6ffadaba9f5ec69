"""wgmma's transposed A (M-major, ``imm-trans-a``): a DOT whose A is ``tj.trans`` of a loaded
(K x M) tile, as a kernel computing ``C^T = B^T A^T`` spells it, reads its ring slots as 64-row
atoms instead of falling back to mma.sync; the values on every backend, the PTX, and float8
(which has no transposed form) staying off the path."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import codegen
from tilejit.passes.pipeline import compile_to_simt
from tilejit.passes.plans import DotFamily
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, emulated_bf16_gemm, pipeline_until

BF16 = ArraySpec(tj.bfloat16, 2)


@pytest.fixture(autouse=True)
def transposed_a(monkeypatch):
    from tilejit.passes import wgmma
    monkeypatch.setattr(wgmma, "TRANSPOSED_A", True)


@tj.kernel
def transposed(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """C = A @ B computed as C^T = B^T A^T: the weights' BN columns are the product's rows."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BN, BM), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.dot(tj.trans(tj.load(b, (k, n), (BK, BN))), tj.trans(tj.load(a, (m, k), (BM, BK))), acc)
    tj.store(c, (m, n), tj.trans(acc).to(c.dtype))


def planned(specs, consts, num_warps):
    return pipeline_until(transposed, specs, consts, "plan_loops", num_warps)


def test_a_transposed_a_runs_on_wgmma_from_m_major_atoms():
    fn = planned((BF16, BF16, BF16), {"BM": 16, "BN": 64, "BK": 128}, 4)
    [dot] = [o for o in fn.walk() if o in fn.meta["dot_plans"]]
    assert fn.meta["dot_plans"].family(dot) is DotFamily.WGMMA
    [plan] = fn.meta["loop_plans"].values()
    assert sorted(r.tile.name for r in plan.rings) == ["A_MN_ATOMS", "B_NK_ATOMS"]


def test_with_the_switch_off_a_transposed_a_stays_on_mma_sync(monkeypatch):
    from tilejit.passes import wgmma
    monkeypatch.setattr(wgmma, "TRANSPOSED_A", False)
    fn = planned((BF16, BF16, BF16), {"BM": 16, "BN": 64, "BK": 128}, 4)
    [dot] = [o for o in fn.walk() if o in fn.meta["dot_plans"]]
    assert fn.meta["dot_plans"].family(dot) is DotFamily.MMA_SYNC


def test_float8_keeps_its_k_major_operands():
    f8 = ArraySpec(tj.float8e4m3, 2)
    fn = planned((f8, f8, ArraySpec(tj.float32, 2)), {"BM": 16, "BN": 64, "BK": 128}, 4)
    [dot] = [o for o in fn.walk() if o in fn.meta["dot_plans"]]
    assert fn.meta["dot_plans"].family(dot) is not DotFamily.WGMMA


@pytest.mark.parametrize("BM, BN, BK, warps, m, n, k, tma, ws", [
    (16, 64, 128, 4, 16, 208, 304, True, False),     # decode-like: 16 rows are wgmma's n16
    (32, 128, 64, 8, 40, 200, 136, True, False),     # two warpgroups, ragged M, N and K
    (16, 64, 64, 4, 16, 208, 304, False, False),     # cp.async rings (TMA off)
    (16, 128, 64, 8, 16, 208, 304, True, True),      # a producer warpgroup
])
def test_the_emulated_transposed_gemm_matches_float64(BM, BN, BK, warps, m, n, k, tma, ws):
    tile = transposed.tile_ir((BF16, BF16, BF16), {"BM": BM, "BN": BN, "BK": BK})
    fn = compile_to_simt(tile, num_warps=warps, target="sm_90a", tma=tma, warp_specialize=ws, verify=True)
    wg = [o for o in fn.walk() if o.op is SimtOp.WGMMA]
    assert wg and all(o.attrs.a_m_major for o in wg) and fn.meta.producer_warps == (4 if ws else 0)
    emulated_bf16_gemm(fn, m, n, k, BM, BN, seed=k)


def test_the_ptx_transposes_a_and_assembles():
    tile = transposed.tile_ir((BF16, BF16, BF16), {"BM": 16, "BN": 128, "BK": 64})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", warp_specialize=True)
    ptx = codegen.compile_ptx(fn, "sm_90a")
    wg = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    assert wg and all("m64n16k16" in x and x.rstrip().endswith("p, 1, 1, 1, 0;") for x in wg)
    out = assemble_or_skip(ptx, "sm_90a")
    assert out.spills == 0 and "C7514" not in out.log


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, BM, BN, BK, warps", [(16, 520, 1000, 16, 64, 128, 4), (70, 300, 264, 32, 128, 64, 8)])
def test_the_transposed_spelling_computes_the_product(backend, m, n, k, BM, BN, BK, warps, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    if backend != "cuda":
        n, k = min(n, 136), min(k, 200)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, n)).astype(tj.bfloat16.np)
    c = np.full((m, n), 3, tj.bfloat16.np)
    transposed[(tj.cdiv(m, BM), tj.cdiv(n, BN))](a, b, c, BM=BM, BN=BN, BK=BK, num_warps=warps)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())
