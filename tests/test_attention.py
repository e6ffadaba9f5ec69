"""FlashAttention (``examples/attention.py``) on the tensor-core path: the chained-DOT structure
in SIMT IR (``p`` handed to the second mma in registers, K and V through cp.async rings, ``q``
staged once before the key loop, one barrier per iteration) and float64 NumPy equivalence on
ragged lengths, causal and full, GQA group sizes 1/2/4/8, head dims 64, 128 and 256, fp16 and
bf16, on the emulator here and on the GPU under ``-m gpu``; head dim 256 also through the
warp-specialised wgmma path (128 x 64 tiles, 8 warps: the tile that fits shared memory)."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj
from tilejit import dtypes as D
from tilejit.examples import attention
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

ONLY = os.environ.get("TILEJIT_TEST_BACKEND")
BACKENDS = [b for b in ("emulate", pytest.param("cuda", marks=pytest.mark.gpu))
            if ONLY is None or getattr(b, "values", (b,))[0] == ONLY]
KERNEL = attention.attention_kernel
BM, BN, WARPS = 32, 16, 2          # 16 rows per warp: the smallest tiles that take the mma path


def simt_fn(dim=64, causal=True, dtype=D.bfloat16):
    arr = ArraySpec(dtype, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)),
                          {"BM": BM, "BN": BN, "BD": dim, "CAUSAL": causal})
    return compile_to_simt(tile, num_warps=WARPS)


def pipelined_loop(fn):
    """The pipelined version of the key loop (the then-branch of the row-alignment check): the
    loop that computes and waits on its ring, filled by cp.async, by TMA, or by TMA from a
    producer warpgroup (whose own loop only copies)."""
    def kinds(o):
        return {x.op for x in o.regions[0].walk()}
    return next(o for o in fn.walk() if o.op is SimtOp.FOR and kinds(o) & {SimtOp.CP_ASYNC_WAIT, SimtOp.MBARRIER_WAIT}
                and kinds(o) & {SimtOp.WGMMA, SimtOp.MMA})


@pytest.mark.parametrize("causal", [False, True])
def test_key_loop_keeps_p_in_registers_and_streams_k_and_v(causal):
    fn = simt_fn(causal=causal)
    loop = pipelined_loop(fn)
    body = list(loop.regions[0].walk())
    kinds = [o.op for o in body]
    assert kinds.count(SimtOp.BARRIER) == 1                  # the ring's one barrier per iteration
    assert SimtOp.STORE_SHARED not in kinds                  # no p, q or layout round trip
    assert SimtOp.LOAD_SHARED not in kinds
    assert kinds.count(SimtOp.CP_ASYNC) == 2                 # the next K and V blocks
    assert kinds.count(SimtOp.PACK) > 0                      # p packed into A fragments
    mmas = kinds.count(SimtOp.MMA)
    # per warp: S is 16 x BN (k = 64 / 16 steps of BN/8 n tiles), O is 16 x 64 (BN / 16 steps)
    assert mmas == (64 // 16) * (BN // 8) + (BN // 16) * (64 // 8)
    ldm = [o for o in body if o.op is SimtOp.LDMATRIX]
    assert {o.attrs.trans for o in ldm} == {False, True}      # K^T plain, V (k-major) transposed
    # q is written to shared memory once, before the loop
    stores = [o for o in fn.walk() if o.op is SimtOp.STORE_SHARED]
    assert stores and all(o not in body for o in stores)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    with pytest.MonkeyPatch.context() as mp:       # module scope: Hypothesis reuses it across examples
        mp.setenv("TILEJIT_BACKEND", request.param)
        yield request.param


def run(q, k, v, causal, dim):
    o = np.full_like(q, np.nan)
    grid = (tj.cdiv(q.shape[2], BM), q.shape[0] * q.shape[1])
    KERNEL[grid](q, k, v, o, 1.0 / float(np.sqrt(dim)), BM=BM, BN=BN, BD=dim, CAUSAL=causal,
                 num_warps=WARPS)
    return o


@settings(max_examples=8, deadline=None)
@given(group=st.sampled_from([1, 2, 4, 8]), seq=st.integers(1, 90), dim=st.sampled_from([64, 128, 256]),
       causal=st.booleans(), dt=st.sampled_from([tj.float16, tj.bfloat16]), seed=st.integers(0, 2**16))
def test_attention_matches_float64(backend, group, seq, dim, causal, dt, seed):
    kv_heads = 1 if group >= 4 else 2
    q, k, v = attention.example_inputs(np.random.default_rng(seed), 1, kv_heads * group, kv_heads,
                                       seq, dim, dt.np)
    out = run(q, k, v, causal, dim)
    assert not np.isnan(out.astype(np.float32)).any()        # every row written
    tj.testing.assert_close(out, attention.reference(q, k, v, causal), dtype=dt)


def test_query_and_key_lengths_that_are_not_block_multiples(backend):
    """Ragged seq on both sides of several blocks: the last K/V copies are zero-filled past the
    end and the mask (skipped on full blocks) still applies to the ragged one."""
    for seq, causal in ((BN * 3 + 5, False), (BM * 2 + 7, True)):
        q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, 2, 2, seq, 64, np.float16)
        tj.testing.assert_close(run(q, k, v, causal, 64), attention.reference(q, k, v, causal),
                                dtype=tj.float16)


# ------------------------------------------------------------------ the wgmma path (sm_90a)
def test_four_warps_of_64_rows_take_wgmma_with_p_in_registers():
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": 64, "BN": 64, "BD": 128, "CAUSAL": True})
    fn = compile_to_simt(tile, num_warps=4)
    mmas = [o for o in pipelined_loop(fn).regions[0].walk() if o.op is SimtOp.WGMMA]
    s_dot = [o for o in mmas if not o.attrs.a_regs]
    pv_dot = [o for o in mmas if o.attrs.a_regs]
    assert len(s_dot) == 128 // 16 and not s_dot[0].attrs.b_n_major       # q @ k.T: K-major k
    assert len(pv_dot) == 64 // 16 and pv_dot[0].attrs.b_n_major           # p @ v: p in registers


@pytest.mark.parametrize("seq, dim, causal, BMN, warps", [(100, 64, False, 64, 4), (150, 128, True, 64, 4),
                                                           (130, 64, True, 128, 8)])
def test_wgmma_attention_matches_float64(backend, seq, dim, causal, BMN, warps):
    q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, 4, 2, seq, dim, tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    grid = (tj.cdiv(seq, BMN), 4)
    KERNEL[grid](q, k, v, o, 1.0 / float(np.sqrt(dim)), BM=BMN, BN=64, BD=dim, CAUSAL=causal, num_warps=warps)
    tj.testing.assert_close(o, attention.reference(q, k, v, causal), dtype=tj.bfloat16)


@pytest.mark.parametrize("seq, causal, group", [(150, True, 8), (70, False, 1)])
def test_head_dim_256_on_the_warp_specialised_path_matches_float64(backend, seq, causal, group):
    """D 256 at 128 x 64 and 8 warps: two consumer warpgroups fed by a producer warpgroup's TMA
    ring (a 128 x 128 tile would need 320 KB of shared memory); GQA 8 sums nothing but must
    read each KV head for eight query heads."""
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": 128, "BN": 64, "BD": 256, "CAUSAL": causal})
    assert compile_to_simt(tile, num_warps=8, target="sm_90a").meta.producer_warps == 4
    q, k, v = attention.example_inputs(np.random.default_rng(seq), 1, group, 1, seq, 256, tj.bfloat16.np)
    o = np.full_like(q, np.nan)
    KERNEL[(tj.cdiv(seq, 128), group)](q, k, v, o, 1.0 / 16.0, BM=128, BN=64, BD=256, CAUSAL=causal, num_warps=8)
    tj.testing.assert_close(o, attention.reference(q, k, v, causal), dtype=tj.bfloat16)


def test_head_dim_256_ptx_assembles_without_spills():
    """Assembled whole, as the driver JIT-compiles a warp-specialised kernel (nvJitLink's
    relocatable code ignores setmaxnreg, so its consumers would spill at the launch's 168)."""
    from tilejit.codegen import ptxas
    from tilejit.codegen.llvm import compile_ptx
    command = ptxas.ptxas_command()
    if command is None:
        pytest.skip("no ptxas command (the CUDA toolkit)")
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": 128, "BN": 64, "BD": 256, "CAUSAL": True})
    ptx = compile_ptx(compile_to_simt(tile, num_warps=8, target="sm_90a"), "sm_90a")
    out = ptxas._assemble_with_command(command, ptx, "sm_90a", ())
    assert "wgmma.mma_async" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert out.spills == 0 and "serialized" not in out.log and "C7504" not in out.log, out.log


@pytest.mark.parametrize("toolkit", [True, False])
def test_warp_specialised_kernel_gets_a_whole_program_cubin_where_ptxas_is(toolkit, tmp_path, monkeypatch):
    """The cuda backend assembles a setmaxnreg kernel with the ptxas command, whole-program (the
    cubin is cached: no driver JIT when it is loaded); without the command the driver JIT-compiles
    the PTX (no cubin), never nvJitLink's relocatable code that ignores setmaxnreg."""
    from tilejit.codegen import ptxas
    if ptxas.ptxas_command() is None or not ptxas.available():
        pytest.skip("no ptxas command (the CUDA toolkit)")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    if not toolkit:
        monkeypatch.setenv("TILEJIT_PTXAS", str(tmp_path / "missing-ptxas"))
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    consts = {"BM": 128, "BN": 64, "BD": 128, "CAUSAL": True}
    monkeypatch.setattr(KERNEL, "_cache", {})
    entry = KERNEL.compile((arr, arr, arr, arr, ScalarSpec(D.float32)), consts, 8, "cuda")
    art = entry.artifact
    assert "setmaxnreg.inc.sync.aligned.u32" in art.ptx and art.producer_warps
    if toolkit:
        assert art.cubin.startswith(b"\x7fELF") and art.registers and art.spills == 0
        assert ptxas.cubin_report(art.cubin)[0] == art.registers
    else:
        assert art.cubin is None and not art.registers


def test_a_ptxas_command_that_rejects_the_ptx_leaves_the_kernel_to_the_driver(monkeypatch, tmp_path):
    """An old toolkit's ptxas (it does not know the PTX ISA version LLVM writes) must not break a
    warp-specialised kernel: the driver JIT-compiles its PTX as before."""
    from tilejit.backends import cuda
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    tool = tmp_path / "ptxas"
    tool.write_text("#!/bin/sh\necho 'ptxas fatal   : Unsupported .version 8.7; current version is 8.0' >&2\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("TILEJIT_PTXAS", str(tool))
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = KERNEL.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)), {"BM": 128, "BN": 64, "BD": 128, "CAUSAL": True})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    state = {"simt_fn": fn, "target": "sm_90a"}
    cuda.stage_llvm(state)
    cuda.stage_ptx(state)
    assert "setmaxnreg" in state["ptx"]
    cuda.stage_cubin(state)
    assert "cubin" not in state and "setmaxnreg" in state["ptx"]
