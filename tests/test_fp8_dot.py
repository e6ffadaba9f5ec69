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
