"""float8 ``tj.dot``: e4m3 and e5m2 tiles run on mma.sync m16n8k32 on sm_90a (PTX ISA 8.4) with
float32 accumulation; on sm_80 the plan is FMA, and the codegen refuses float8 arithmetic there
with a CompileError at the line; the results match float64 on emulate, ragged
edges included, and the PTX assembles with nvJitLink."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilejit as tj
from tilejit.passes.plans import DotFamily

from examples import matmul
from test_plans import dot_plans_of

FP8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
CONFIG = {"BM": 64, "BN": 64, "BK": 32, "STAGES": 3}


def inputs(dtype, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_dots_are_planned_on_mma_sync_on_sm90a_and_fma_on_sm80(dtype):
    a, b = inputs(dtype, 128, 64, 128)
    c = np.zeros((128, 128), np.float32)
    kind = "e4m3" if dtype is ml_dtypes.float8_e4m3fn else "e5m2"
    [plan], text = dot_plans_of(matmul.matmul_kernel, (a, b, c), CONFIG, 4, "sm_90a")
    assert plan.family is DotFamily.MMA_SYNC and f"mma.sync {kind}" in text
    [plan], _ = dot_plans_of(matmul.matmul_kernel, (a, b, c), CONFIG, 4, "sm_80")
    assert plan.family is DotFamily.FMA


def check_gemm(backend, dtype, shape, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    a, b = inputs(dtype, *shape, seed=sum(shape))
    out = matmul.run(a, b, **CONFIG)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # products of two fp8 values are exact in float32; only the float32 sums round
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("shape", [(130, 96, 70), (64, 32, 64), (1, 200, 33)])
def test_fp8_gemm_matches_float64_on_emulate(dtype, shape, monkeypatch):
    check_gemm("emulate", dtype, shape, monkeypatch)


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_gemm_assembles_for_sm90a_without_spills(dtype):
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    a, b = inputs(dtype, 128, 64, 128)
    c = np.zeros((128, 128), np.float32)
    kernel = matmul.matmul_kernel.kernel
    specs, consts, _ = kernel.specialise(kernel.bind((a, b, c), CONFIG))
    art = kernel.compile(specs, consts, 4, "cuda").artifact
    kind = "e4m3" if dtype is ml_dtypes.float8_e4m3fn else "e5m2"
    assert f"mma.sync.aligned.m16n8k32.row.col.f32.{kind}.{kind}.f32" in art.ptx
    assert ".version 8.4" in art.ptx and art.spills == 0


@tj.kernel
def fp8_scale(x, y, s, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tj.store(y, (i,), (tj.load(x, (i,), (BLOCK,)).to(tj.float32) * s).to(y.dtype))


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_arrays_on_the_emulator(dtype, monkeypatch):
    """The emulator strides fp8 arguments as their bits (NumPy could not rebuild ml_dtypes'
    float8 from its array interface, so any fp8 argument failed on emulate)."""
    x = np.random.default_rng(1).standard_normal(100).astype(dtype)
    results = {}
    for backend in ("interpret", "emulate"):
        monkeypatch.setenv("TILEJIT_BACKEND", backend)
        y = np.zeros(100, dtype)
        fp8_scale[(4,)](x[::-1], y, 0.5, BLOCK=32)
        results[backend] = y.astype(np.float32)
    np.testing.assert_array_equal(results["emulate"], results["interpret"])
    np.testing.assert_array_equal(results["emulate"], (x[::-1].astype(np.float32) * 0.5).astype(dtype).astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("shape", [(130, 96, 70), (512, 512, 512)])
def test_fp8_gemm_on_the_gpu_matches_float64(dtype, shape, monkeypatch):
    check_gemm("cuda", dtype, shape, monkeypatch)


def test_fp8_on_sm80_is_a_compile_error_at_the_dot():
    from tilejit.codegen.llvm import compile_ptx
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.specs import ArraySpec
    from tilejit import dtypes as D
    spec, out = ArraySpec(D.float8e4m3, 2), ArraySpec(D.float32, 2)
    tile = matmul.matmul_kernel.kernel.tile_ir((spec, spec, out), CONFIG)
    with pytest.raises(tj.CompileError, match="float8e4m3 arithmetic needs sm_89") as e:
        compile_ptx(compile_to_simt(tile, num_warps=4, target="sm_80"), "sm_80")
    assert "tj.dot(" in str(e.value)


# ---------------------------------------------- float8 wgmma: both operands K-major (B stored N x K)
def fp8_wgmma_fn(dtype, b_nk=True, BM=128, BN=128, BK=128, warps=8):
    from tilejit import dtypes as D
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.specs import ArraySpec, ScalarSpec
    from examples import fp8_matmul
    spec = ArraySpec(dtype, 2)
    tile = fp8_matmul.fp8_matmul_kernel.tile_ir(
        (spec, spec, ArraySpec(D.bfloat16, 2), ScalarSpec(D.float32), ScalarSpec(D.float32)),
        {"BM": BM, "BN": BN, "BK": BK, "B_NK": b_nk})
    return compile_to_simt(tile, num_warps=warps)


@pytest.mark.parametrize("dtype", [tj.float8e4m3, tj.float8e5m2])
def test_fp8_with_k_major_weights_runs_on_wgmma_k32(dtype):
    from tilejit.simt import SimtOp
    fn = fp8_wgmma_fn(dtype)
    mmas = [o for o in fn.walk() if o.op is SimtOp.WGMMA]
    assert mmas and {o.attrs.kind for o in mmas} == {dtype.name[6:]} and len(mmas) == 128 // 32
    assert any(o.op is SimtOp.TMA_LOAD for o in fn.walk())
    # weights stored K x N (N-major) cannot reach float8 wgmma: mma.sync m16n8k32 instead
    assert not any(o.op is SimtOp.WGMMA for o in fp8_wgmma_fn(dtype, b_nk=False).walk())


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, n, k, BM, BN, BK, warps", [(200, 136, 256, 128, 128, 128, 8), (100, 64, 96, 64, 64, 64, 4)])
def test_fp8_wgmma_linear_matches_float64(backend, m, n, k, BM, BN, BK, warps, monkeypatch):
    from examples import fp8_matmul as F
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m + k)
    a, sa = F.quantize(rng.standard_normal((m, k)).astype(np.float32) * 3)
    w, sw = F.quantize(rng.standard_normal((n, k)).astype(np.float32))
    out = F.run_linear(a, w, sa, sw, BM=BM, BN=BN, BK=BK, num_warps=warps).astype(np.float64)
    ref = (a.astype(np.float64) @ w.astype(np.float64).T) * float(sa) * float(sw)
    assert np.abs(out - ref).max() <= 2**-7 * np.abs(ref).max()          # the bfloat16 output's rounding


def test_fp8_wgmma_ptx_assembles_without_spills():
    from tilejit.codegen import ptxas
    from tilejit.codegen.llvm import compile_ptx
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    ptx = compile_ptx(fp8_wgmma_fn(tj.float8e4m3, BN=256), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3" in ptx
    out = ptxas.assemble(ptx, "sm_90a")
    assert out.spills == 0 and "serialized" not in out.log, out.log


@tj.kernel
def fp8_linear_trans_spelling(a, w, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=3):
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.trans(tj.load(w, (n, k), (BN, BK))))
    tj.store(c, (m, n), acc.to(c.dtype))


def test_the_tj_trans_spelling_reaches_float8_wgmma_too():
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec
    spec = ArraySpec(tj.float8e4m3, 2)
    tile = fp8_linear_trans_spelling.tile_ir((spec, spec, ArraySpec(tj.bfloat16, 2)), {"BM": 64, "BN": 128, "BK": 64})
    kinds = [o.attrs.kind for o in compile_to_simt(tile, num_warps=4).walk() if o.op is SimtOp.WGMMA]
    assert kinds and set(kinds) == {"e4m3"}
