"""``passes/swap_small_dots.py``: a GEMM loop whose A tile has few rows (a decode step's tokens)
computes C^T = B^T A^T on wgmma, the weights' columns as its M (``SharedTile.A_MN_ATOMS``) and
A's rows as its N; the values are the plain spelling's on every backend, and what the pass
leaves alone."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import codegen
from tilejit.examples import matmul
from tilejit.ir import TileOp
from tilejit.passes import wgmma
from tilejit.passes.pipeline import compile_to_simt
from tilejit.passes.plans import DotFamily
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, emulated_bf16_gemm, pipeline_until

KERNEL = matmul.matmul_kernel.kernel
BF16 = ArraySpec(tj.bfloat16, 2)


@pytest.fixture(autouse=True)
def transposed_a(monkeypatch):
    monkeypatch.setattr(wgmma, "TRANSPOSED_A", True)


def until(kernel, consts, stage, num_warps=4, specs=(BF16, BF16, BF16)):
    return pipeline_until(kernel, specs, consts, stage, num_warps)


def test_a_16_row_gemm_is_computed_transposed_on_wgmma():
    fn = until(KERNEL, {"BM": 16, "BN": 64, "BK": 64, "STAGES": 4}, "plan_loops")
    [dot] = [o for o in fn.walk() if o.op is TileOp.DOT]
    assert dot.result.type.shape == (64, 16)                        # the product transposed
    assert all(x.owner.op is TileOp.TRANS for x in dot.operands[:2])          # of both loads
    loop = next(o for o in fn.walk() if o.op is TileOp.FOR)
    assert dot.operands[2] in loop.regions[0].args and loop.operands[3].owner.op is TileOp.TRANS   # carried transposed
    assert fn.meta["dot_plans"].family(dot) is DotFamily.WGMMA
    [plan] = fn.meta["loop_plans"].values()
    assert sorted(r.tile.name for r in plan.rings) == ["A_MN_ATOMS", "B_NK"] and plan.wgmma_in_flight == 1


@pytest.mark.parametrize("why, consts, warps", [
    ("64 rows fill wgmma's M", {"BM": 64, "BN": 64, "BK": 64, "STAGES": 4}, 4),
    ("BN is not one 64-row slice per warpgroup", {"BM": 16, "BN": 128, "BK": 64, "STAGES": 4}, 4),
    ("an unpipelined loop", {"BM": 16, "BN": 64, "BK": 64, "STAGES": 1}, 4),
])
def test_other_dots_are_left_alone(why, consts, warps):
    fn = until(KERNEL, consts, "swap_small_dots", warps)
    assert not [o for o in fn.walk() if o.op is TileOp.TRANS], why


def test_on_by_default_and_off_with_the_switch(monkeypatch):
    monkeypatch.undo()                              # the module's own default: on
    assert wgmma.TRANSPOSED_A
    monkeypatch.setattr(wgmma, "TRANSPOSED_A", False)
    fn = until(KERNEL, {"BM": 16, "BN": 64, "BK": 64, "STAGES": 4}, "swap_small_dots")
    assert not [o for o in fn.walk() if o.op is TileOp.TRANS]


def test_an_accumulator_read_in_the_loop_is_left_alone():
    @tj.kernel
    def clipped(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        acc = tj.zeros((BM, BN), tj.float32)
        for k in range(0, a.shape[1], BK):
            acc = tj.minimum(tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)), acc), 100.0)
        tj.store(c, (0, 0), acc.to(c.dtype))
    fn = until(clipped, {"BM": 16, "BN": 64, "BK": 64}, "swap_small_dots")
    assert not [o for o in fn.walk() if o.op is TileOp.TRANS]


@pytest.mark.parametrize("m, n, k, BM, BN, BK, warps, ws", [
    (16, 208, 304, 16, 64, 64, 4, False),
    (13, 200, 264, 16, 64, 128, 4, False),         # ragged: 13 rows, N and K past the tiles
    (40, 264, 136, 32, 128, 64, 8, True),          # two warpgroups, a producer warpgroup
])
def test_the_swapped_gemm_matches_float64_on_emulate(m, n, k, BM, BN, BK, warps, ws):
    fn = compile_to_simt(KERNEL.tile_ir((BF16, BF16, BF16), {"BM": BM, "BN": BN, "BK": BK, "STAGES": 4}),
                         num_warps=warps, target="sm_90a", warp_specialize=ws, verify=True)
    assert [o for o in fn.walk() if o.op is SimtOp.WGMMA and o.attrs.a_m_major and o.attrs.n == BM]
    emulated_bf16_gemm(fn, m, n, k, BM, BN, seed=m + k)


@pytest.mark.parametrize("ws", [False, True])
def test_the_ptx_keeps_its_wgmma_group_in_flight_unserialised(ws):
    """The accumulators are rounded to bfloat16 in pairs (``cvt.rn.bf16x2.f32``): read by scalar
    16-bit conversions, ptxas serialises every wgmma of a loop that keeps a group in flight."""
    fn = compile_to_simt(KERNEL.tile_ir((BF16, BF16, BF16), {"BM": 16, "BN": 64, "BK": 64, "STAGES": 4}),
                         num_warps=4, target="sm_90a", warp_specialize=ws)
    ptx = codegen.compile_ptx(fn, "sm_90a")
    assert "m64n16k16" in ptx and "cvt.rn.bf16.f32" not in ptx and "cvt.rn.bf16x2.f32" in ptx
    out = assemble_or_skip(ptx, "sm_90a")
    assert out.spills == 0 and "C7514" not in out.log, out.log


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_tj_matmul_at_16_rows_through_the_launch_path(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    m, n, k = (16, 1032, 2048) if backend == "cuda" else (16, 200, 136)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, n)).astype(tj.bfloat16.np)
    c = np.full((m, n), 5, tj.bfloat16.np)
    KERNEL[(1, tj.cdiv(n, 64))](a, b, c, BM=16, BN=64, BK=64, STAGES=4, num_warps=4)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())


def test_a_triton_spelled_kernel_is_swapped_alike():
    """Plain ``range``, ``+=`` and ``.T`` of a weight stored N x K: the same swapped wgmma."""
    @tj.kernel
    def linear(x, w, y, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        m = tj.program_id(0) * BM
        n = tj.program_id(1) * BN
        acc = tj.zeros((BM, BN), tj.float32)
        for k in range(0, x.shape[1], BK):
            acc += tj.dot(tj.load(x, (m, k), (BM, BK)), tj.load(w, (n, k), (BN, BK)).T)
        tj.store(y, (m, n), acc.to(y.dtype))
    fn = until(linear, {"BM": 16, "BN": 64, "BK": 64}, "plan_loops")
    [dot] = [o for o in fn.walk() if o.op is TileOp.DOT]
    assert dot.result.type.shape == (64, 16) and fn.meta["dot_plans"].family(dot) is DotFamily.WGMMA
    from tilejit.backends import emulate
    simt = compile_to_simt(linear.tile_ir((BF16, BF16, BF16), {"BM": 16, "BN": 64, "BK": 64}), num_warps=4,
                           target="sm_90a", verify=True)
    assert [o for o in simt.walk() if o.op is SimtOp.WGMMA and not o.attrs.a_m_major and o.attrs.n == 16]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((13, 200)).astype(tj.bfloat16.np)
    w = rng.standard_normal((136, 200)).astype(tj.bfloat16.np)          # N x K
    y = np.zeros((13, 136), tj.bfloat16.np)
    emulate.run(simt, (1, 3), [x, w, y])
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())
