"""FlashAttention backward in the language (``examples/attention_backward.py``): dQ, dK and dV
against NumPy's float64 gradients on interpret and emulate (full and causal, ragged lengths,
GQA groups 1 and 2, head dims 16 and 32), float16 within tolerance, the torch op against
PyTorch's own SDPA gradients (float64, the CPU backends), through ``torch.compile`` with no graph
break, and on the GPU (``-m gpu``) against SDPA in float16."""
from __future__ import annotations

import numpy as np
import pytest
import tilejit as tj

from examples import attention_backward as ab

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads,seq,dim", [(2, 2, 37, 16), (4, 2, 45, 32)])
def test_gradients_match_numpy_in_float64(backend, causal, heads, kv_heads, seq, dim, monkeypatch):
    if backend == "emulate" and dim == 32:
        pytest.skip("the emulator takes 10-17 s for it; the float16 test covers GQA there")
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v, do = ab.example_inputs(np.random.default_rng(seq), heads=heads, kv_heads=kv_heads, seq=seq, dim=dim,
                                    dtype=np.float64)
    o, lse = ab.forward(q, k, v, causal, BM=16, BN=16)
    got = (o, *ab.backward(q, k, v, o, lse, do, causal, BM=16, BN=16, num_warps=None, dq_config=None))
    for name, g, want in zip(("o", "dq", "dk", "dv"), got, ab.gradients(q, k, v, do, causal)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("base2", [True, False], ids=["exp2", "exp"])
@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_float16_gradients_within_tolerance_with_keys_longer_than_queries(backend, base2, monkeypatch):
    """Also with P recomputed as exp(s - lse) (``BASE2 = False``, what the base-2 form is timed
    against)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setattr(ab, "BASE2", base2)
    rng = np.random.default_rng(3)
    q, k, v, do = ab.example_inputs(rng, heads=2, kv_heads=1, seq=40, dim=32, dtype=np.float16)
    k, v = (np.concatenate([t, t[:, :, :9]], axis=2) for t in (k, v))          # 49 keys, 40 queries
    o, lse = ab.forward(q, k, v, False, BM=16, BN=32)
    got = (o, *ab.backward(q, k, v, o, lse, do, False, BM=16, BN=32, num_warps=None, dq_config=None))
    for name, g, want in zip(("o", "dq", "dk", "dv"), got, ab.gradients(q, k, v, do)):
        scale = np.abs(want).max()
        assert np.abs(g.astype(np.float64) - want).max() <= 2e-2 * scale, name


def test_the_torch_op_has_sdpas_gradients_and_compiles_without_a_graph_break(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    attention = ab.torch_attention()
    inputs = ab.example_inputs(np.random.default_rng(5), heads=4, kv_heads=2, seq=29, dim=16, dtype=np.float64)
    q, k, v, do = (torch.tensor(t, requires_grad=True) for t in inputs)
    for causal in (False, True):
        out = attention(q, k, v, causal)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        torch.testing.assert_close(out, ref)
        for g, want in zip(torch.autograd.grad(out, (q, k, v), do), torch.autograd.grad(ref, (q, k, v), do)):
            torch.testing.assert_close(g, want)
    loss = lambda q, k, v: attention(q, k, v, True).sum()  # noqa: E731
    assert torch._dynamo.explain(loss)(q, k, v).graph_break_count == 0
    q.grad = None
    torch.compile(loss, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    want = torch.autograd.grad(loss(q, k, v), q)[0]
    torch.testing.assert_close(q.grad, want)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_torch_op_on_the_gpu_against_sdpa(causal):
    torch = pytest.importorskip("torch")
    attention = ab.torch_attention()
    q, k, v = (torch.randn(2, h, 300, 64, device="cuda", dtype=torch.float16, requires_grad=True)
               for h in (8, 2, 2))
    do = torch.randn(2, 8, 300, 64, device="cuda", dtype=torch.float16)
    out = attention(q, k, v, causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                           enable_gqa=True)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    got = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(ref, (q, k, v), do.float())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), rtol=3e-2, atol=3e-2 * float(w.abs().max()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_atomic_dq_matches_numpy(backend, causal, monkeypatch):
    """``dq_config="atomic"``: the dK/dV kernel adds dQ into a float32 buffer the delta kernel
    zeroed (GQA: each query head's rows from its group's key blocks; ragged: 45 rows)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v, do = ab.example_inputs(np.random.default_rng(7), heads=4, kv_heads=2, seq=45, dim=16, dtype=np.float64)
    o, lse = ab.forward(q, k, v, causal, BM=16, BN=16)
    got = ab.backward(q, k, v, o, lse, do, causal, BM=16, BN=16, num_warps=None, dq_config="atomic")
    _, dq_ref, dk_ref, dv_ref = ab.gradients(q, k, v, do, causal)
    np.testing.assert_allclose(got[1], dk_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[2], dv_ref, rtol=1e-10, atol=1e-10)
    assert np.abs(got[0] - dq_ref).max() <= 1e-5 * np.abs(dq_ref).max()        # float32 sums


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_atomic_dq_on_wgmma_matches_float64(backend, monkeypatch):
    """At BN = BD = 64 with 4 warps all five DOTs (dQᵀ = Kᵀ dSᵀ among them) take wgmma."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v, do = ab.example_inputs(np.random.default_rng(8), 1, 4, 2, 100, 64, np.float16)
    o, lse = ab.forward(q, k, v, True, BM=64, BN=64)
    got = ab.backward(q, k, v, o, lse, do, True, BM=64, BN=64, num_warps=4, dq_config="atomic")
    for g, want in zip(got, ab.gradients(q, k, v, do, True)[1:]):
        assert np.abs(g.astype(np.float64) - want).max() <= 2e-2 * np.abs(want).max()


@pytest.mark.parametrize("dim", [64, 128])
def test_the_torch_ops_tiles_keep_every_dot_on_wgmma_without_spills(dim):
    """``backward_tiles``: the larger D64 tiles (dK/dV 64 x 128, dQ 128 x 128) and the D128 ones
    compile for sm_90a with every DOT on wgmma from TMA rings and, where ptxas is here, no
    spills (64 x 128 spills at D128, which is why D128 keeps 32 x 128)."""
    from tilejit.backends.cuda import assemble_hinted
    from tilejit.codegen import ptxas
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    tiles = ab.backward_tiles(dim)
    assert (tiles["BM"], tiles["dq_config"][1]) == ((64, 128) if dim == 64 else (32, 64))
    q = np.zeros((2, 4, 512, dim), tj.bfloat16.np)
    lse = np.zeros((2, 4, 512), np.float32)
    for kernel, args, consts, warps in (
            (ab.dkdv_kernel, (q, q, q, q, lse, lse, q, q, None, dim ** -0.5),
             dict(BM=tiles["BM"], BN=tiles["BN"]), tiles["num_warps"]),
            (ab.dq_kernel, (q, q, q, q, lse, lse, q, dim ** -0.5),
             dict(BM=tiles["dq_config"][0], BN=tiles["dq_config"][1]), tiles["dq_config"][2])):
        k = getattr(kernel, "kernel", kernel)
        specs, consts, _ = k.specialise(k.bind(args, dict(consts, BD=dim, CAUSAL=True)))
        fn = compile_to_simt(k.tile_ir(specs, consts), warps, "sm_90a")
        assert sum(o.op is SimtOp.WGMMA_COMMIT for o in fn.walk()) >= 3 and fn.meta.producer_warps
        assert not any(o.op is SimtOp.MMA for o in fn.walk())
        if ptxas.whole_program_available():
            assert assemble_hinted(fn, "sm_90a", whole_program=True)[0].spills == 0


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_torch_ops_d64_tiles_match_float64(backend, causal, monkeypatch):
    """``backward_tiles(64)`` (dK/dV 64 x 128, 8 warps; dQ 128 x 128, 8 warps) on wgmma from TMA
    rings: GQA 4 / 2, 150 rows (a ragged last block of each kernel), bfloat16."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v, do = ab.example_inputs(np.random.default_rng(11), heads=4, kv_heads=2, seq=150, dim=64,
                                    dtype=tj.bfloat16.np)
    o, lse = ab.forward(q, k, v, causal, BM=128, BN=128, num_warps=8)
    got = ab.backward(q, k, v, o, lse, do, causal, **ab.backward_tiles(64))
    for name, g, want in zip(("dq", "dk", "dv"), got, ab.gradients(q, k, v, do, causal)[1:]):
        assert np.abs(g.astype(np.float64) - want).max() <= 2e-2 * np.abs(want).max(), name
