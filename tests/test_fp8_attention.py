"""float8 attention (``examples/fp8_attention.py``): e4m3 q, k and transposed v with per-tensor
scales, a float32 softmax and e4m3 probabilities, against float64 attention of the dequantised
inputs: ragged lengths, GQA 1/2/4, head dims 64 and 128, causal and full, on interpret, emulate
and the GPU (``-m gpu``); on sm_90a both products take float8 tensor cores and the PTX
assembles without spills."""
import numpy as np
import pytest

from tilejit.examples import fp8_attention as ex

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads, kv_heads, seq, dim, causal", [
    (4, 2, 200, 64, False), (4, 4, 77, 128, True), (4, 1, 130, 64, True), (2, 2, 64, 64, False)])
def test_fp8_attention_is_within_a_few_percent_of_float64(backend, monkeypatch, heads, kv_heads, seq, dim, causal):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    inputs = ex.example_inputs(np.random.default_rng(seq + dim), 1, heads, kv_heads, seq, dim)
    out = ex.run(*inputs, causal=causal).astype(np.float64)
    assert np.isfinite(out).all()
    ref = ex.reference(*inputs, causal=causal)
    # e4m3 carries 3 mantissa bits: the probabilities' rounding (up to 2**-4 each) dominates
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 5e-2
    assert np.abs(out - ref).max() < 0.25 * np.abs(ref).max()


def test_both_products_take_float8_tensor_cores_and_assemble():
    """The default launch (64 x 64, 8 warps) on sm_90a: float8 mma for both products, no spills."""
    import tilejit as tj
    from tilejit.codegen import ptxas
    from tilejit.codegen.llvm import compile_ptx
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    q8, k8, vt8, *_ = ex.example_inputs(np.random.default_rng(0), 1, 4, 2, 1024, 128)
    kernel = ex.fp8_attention_kernel
    specs, consts, _ = kernel.specialise(kernel.bind((q8, k8, vt8, np.zeros(q8.shape, tj.bfloat16.np), 0.1, 0.1),
                                                     {"BM": 64, "BN": 64, "BD": 128, "CAUSAL": True}))
    fn = compile_to_simt(kernel.tile_ir(specs, consts), num_warps=8)
    dots = [o for o in fn.walk() if o.op in (SimtOp.MMA, SimtOp.WGMMA)]
    assert dots and all("e4m3" in str(o.attrs) for o in dots)
    assert any(o.op is SimtOp.CP_ASYNC for o in fn.walk())             # k and v stream through rings
    if ptxas.available():
        out = ptxas.assemble(compile_ptx(fn, "sm_90a"), "sm_90a")
        assert out.spills == 0, out.log


@pytest.mark.parametrize("BM, BN, warps", [(64, 64, 4), (128, 128, 8), (128, 64, 8)])
def test_tiles_whose_scores_take_wgmma_compile_for_sm_90a(BM, BN, warps):
    """16 rows a warp put q k^T on float8 wgmma; the unaligned twin of the loop (no TMA ring for
    k) then computes k^T's tile in registers, which ``wgmma.COMPUTED_B`` would stage N-major --
    a layout float8 wgmma cannot read (the PTX failed to build: "wgmma .e4m3 reads both operands
    K-major").  There the product takes float8 mma.sync; every wgmma left reads B K-major."""
    import tilejit as tj
    from tilejit.codegen.llvm import compile_ptx
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    q8, k8, vt8, *_ = ex.example_inputs(np.random.default_rng(0), 1, 4, 2, 1024, 128)
    kernel = ex.fp8_attention_kernel
    specs, consts, _ = kernel.specialise(kernel.bind((q8, k8, vt8, np.zeros(q8.shape, tj.bfloat16.np), 0.1, 0.1),
                                                     {"BM": BM, "BN": BN, "BD": 128, "CAUSAL": False}))
    fn = compile_to_simt(kernel.tile_ir(specs, consts), num_warps=warps, target="sm_90a")
    wgmmas = [o for o in fn.walk() if o.op is SimtOp.WGMMA]
    assert wgmmas and not any(o.attrs.b_n_major or o.attrs.a_regs for o in wgmmas)
    assert any(o.op is SimtOp.MMA and "e4m3" in str(o.attrs) for o in fn.walk())
    assert "wgmma.mma_async" in compile_ptx(fn, "sm_90a")


@pytest.mark.parametrize("BM, BN, warps", [(64, 64, 4), (128, 64, 8)])
def test_wgmma_tiles_with_unaligned_rows_match_float64_on_the_emulator(BM, BN, warps, monkeypatch):
    """16 rows a warp (q k^T on float8 wgmma) with 100 keys: the transposed values' rows are 100
    bytes, not 16-byte multiples, so the loop runs its unaligned twin, where k^T is computed in
    registers and the product takes float8 mma.sync."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    inputs = ex.example_inputs(np.random.default_rng(5), 1, 2, 1, 100, 128)
    out = ex.run(*inputs, BM=BM, BN=BN, num_warps=warps).astype(np.float64)
    ref = ex.reference(*inputs)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 5e-2
