"""``passes.split_dot_loads``: a tile loaded once and read by two DOTs of a pipelined loop is
loaded once per DOT, so each read gets a ring and the DOTs can take wgmma; the IR before and
after, the cases it leaves alone, NumPy equivalence on the CPU backends, and FlashAttention's
dK/dV loop (``examples/attention_backward.py``) on wgmma from TMA rings."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.ir import TileOp
from tilejit.passes import pipeline, sink_transposes as sink_module, split_dot_loads as split_module
from tilejit.passes.plans import CopyEngine, DotFamily
from tilejit.passes.split_dot_loads import split_dot_loads
from tilejit.specs import ArraySpec, NoneSpec

from examples import attention_backward as ab
from test_sink_transposes import dkdv_plan, until


@tj.kernel
def gram_kernel(w, x, out, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """out = W Xᵀ X over row blocks of x: each block of x is read by two DOTs (as Bᵀ, then B)."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    for m in range(0, x.shape[0], BM):
        xt = tj.load(x, (m, 0), (BM, BD))
        s = tj.dot(wt, xt.T)
        acc += tj.dot(s.to(xt.dtype), xt)
    tj.store(out, (0, 0), acc)


@tj.kernel
def gram_transposed_kernel(w, x, out, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """The same product spelled with the first DOT's result transposed in registers."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    for m in range(0, x.shape[0], BM):
        xt = tj.load(x, (m, 0), (BM, BD))
        s = tj.dot(xt, wt.T)
        acc += tj.dot(s.T.to(xt.dtype), xt)
    tj.store(out, (0, 0), acc)


@tj.kernel
def gram_scaled_kernel(w, x, out, BN: tj.constexpr, BM: tj.constexpr, BD: tj.constexpr):
    """The block of x is also used by arithmetic: it stays one load."""
    acc = tj.zeros((BN, BD), tj.float32)
    wt = tj.load(w, (0, 0), (BN, BD))
    for m in range(0, x.shape[0], BM):
        xt = tj.load(x, (m, 0), (BM, BD))
        s = tj.dot(wt, xt.T)
        acc += tj.dot(s.to(xt.dtype), xt * 2.0)
    tj.store(out, (0, 0), acc)


ARR = ArraySpec(D.bfloat16, 2, True, True, False)
OUT = ArraySpec(D.float32, 2, True, True, False)


def tile_fn_before_split(kernel, BN=64, BM=64, BD=64):
    """The kernel's tile IR as the pipeline has it just before ``split_dot_loads``."""
    fn = pipeline.clone_function(kernel.tile_ir((ARR, ARR, OUT), {"BN": BN, "BM": BM, "BD": BD}))
    opts = pipeline.Options(4, "sm_90a")
    for stage in pipeline.PIPELINE:
        if stage.name == "split_dot_loads":
            return fn
        fn = stage.run(fn, opts)
    raise AssertionError("no split_dot_loads stage")


def loop_body(fn):
    return next(o for o in fn.walk() if o.op is TileOp.FOR).regions[0]


def loads_of_x(fn):
    """The loads of ``x`` (the function's second argument) in the loop body, and their readers."""
    body = loop_body(fn)
    loads = [o for o in body.ops if o.op is TileOp.LOAD and o.operands[0] is fn.args[1]]
    return loads, [[r for r in body.ops if o.result in r.operands] for o in loads]


def test_a_load_read_by_two_dots_becomes_one_load_per_dot():
    fn = tile_fn_before_split(gram_kernel)
    assert len(loads_of_x(fn)[0]) == 1
    split_dot_loads(fn, "sm_90a")
    loads, readers = loads_of_x(fn)
    assert len(loads) == 2
    assert all(len(r) == 1 for r in readers)                 # each load read once
    dots = [o for o in loop_body(fn).ops if o.op is TileOp.DOT]
    reached = set()
    for load in loads:              # each load reaches a different DOT (one through the transpose)
        v = load.result
        while True:
            user = next(o for o in loop_body(fn).ops if v in o.operands)
            if user.op is TileOp.DOT:
                reached.add(user)
                break
            v = user.result
    assert reached == set(dots)
    assert fn.meta is not None and "split_dot_loads" in [s.name for s in pipeline.PIPELINE]


@pytest.mark.parametrize("kernel", [gram_transposed_kernel, gram_scaled_kernel])
def test_loads_it_leaves_alone(kernel, monkeypatch):
    """A DOT that reads a transpose computed in registers (mma.sync through a layout
    conversion: more rings only spill; ``sink_transposes``, off here, removes such transposes
    where it can), and a tile that arithmetic reads too."""
    monkeypatch.setattr(sink_module, "SINK_TRANSPOSES", False)
    fn = tile_fn_before_split(kernel)
    split_dot_loads(fn, "sm_90a")
    assert len(loads_of_x(fn)[0]) == 1


def test_nothing_split_when_the_copies_would_not_fit_two_slots_each():
    fn = tile_fn_before_split(gram_kernel, BN=64, BM=256, BD=256)     # x blocks of 128 KB
    split_dot_loads(fn, "sm_90a")
    assert len(loads_of_x(fn)[0]) == 1


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(split_module, "SPLIT_DOT_LOADS", False)
    fn = tile_fn_before_split(gram_kernel)
    split_dot_loads(fn, "sm_90a")
    assert len(loads_of_x(fn)[0]) == 1


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("rows", [64, 150])
def test_the_split_kernel_matches_numpy(backend, rows, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(rows)
    w = (rng.standard_normal((64, 64)) / 8).astype(tj.bfloat16.np)
    x = (rng.standard_normal((rows, 64)) / 8).astype(tj.bfloat16.np)
    out = np.full((64, 64), np.nan, np.float32)
    gram_kernel[(1,)](w, x, out, BN=64, BM=32, BD=64, num_warps=4)
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    want = np.zeros((64, 64))
    for m in range(0, rows, 32):              # s is rounded to bfloat16 per block, as the kernel does
        xb = x64[m:m + 32]
        want += (w64 @ xb.T).astype(np.float32).astype(tj.bfloat16.np).astype(np.float64) @ xb
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


# --- FlashAttention's dK/dV loop ---------------------------------------------------------------
A4, S3 = ArraySpec(D.bfloat16, 4, True, True, False), ArraySpec(D.float32, 3, True, True, False)


def dkdv_simt(BM, BN, warps, dim=128, causal=False):
    tile = ab.dkdv_kernel.tile_ir((A4,) * 4 + (S3, S3, A4, A4, NoneSpec()),
                                  {"scale": dim ** -0.5, "BM": BM, "BN": BN, "BD": dim, "CAUSAL": causal})
    seen = {}
    simt_fn = pipeline.compile_to_simt(tile, warps, "sm_90a", dump=seen.__setitem__)
    return simt_fn, seen


@pytest.mark.parametrize("causal", [False, True])
def test_the_dkdv_loop_runs_its_four_dots_on_wgmma_from_tma_rings(causal):
    """q and dO each ringed twice (test_sink_transposes checks the plan of both spellings)."""
    from tilejit.simt import SimtOp
    plan, families = dkdv_plan(ab.dkdv_kernel, causal)
    assert families == [DotFamily.WGMMA] * 4 and len(plan.rings) == 4 and plan.engine is CopyEngine.TMA
    arrays = [r.load.operands[0] for r in plan.rings]
    assert all(arrays.count(a) == 2 for a in arrays)            # two rings of each array
    simt_fn, _ = dkdv_simt(32, 64, 4, causal=causal)
    assert sum(o.op is SimtOp.WGMMA for o in simt_fn.walk()) > 0


def test_the_dkdv_kernel_assembles_without_spills():
    """Assembled whole by ptxas (as the driver JIT-compiles a warp-specialised kernel)."""
    from tilejit.codegen import ptxas
    from tilejit.codegen.llvm import compile_ptx
    command = ptxas.ptxas_command()
    if command is None:
        pytest.skip("no ptxas command (the CUDA toolkit)")
    for BM, BN, warps in ((32, 64, 4), (32, 128, 8)):
        ptx = compile_ptx(dkdv_simt(BM, BN, warps)[0], "sm_90a")
        out = ptxas._assemble_with_command(command, ptx, "sm_90a", ())
        assert "wgmma.mma_async" in ptx and out.spills == 0 and "serialized" not in out.log, (BM, BN, out.log)


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("tiles", [(32, 64, 4), (32, 128, 8)], ids=["32x64x4", "32x128x8"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_dkdv_kernel_on_wgmma_matches_float64(causal, tiles, backend, monkeypatch):
    """D 128, GQA 2, a ragged length: the wgmma / TMA path (with a producer warpgroup at 8
    warps) against float64, on the emulator here and on the GPU under ``-m gpu``."""
    BM, BN, warps = tiles
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v, do = ab.example_inputs(np.random.default_rng(1), 1, 4, 2, 100, 128, tj.bfloat16.np)
    o, lse = ab.forward(q, k, v, causal, BM=64, BN=64)
    delta = np.empty(lse.shape, np.float32)
    ab.delta_kernel[(tj.cdiv(100, 64), 4)](o, do, delta, None, BM=64, BD=128)
    dk, dv = np.full_like(k, np.nan), np.full_like(v, np.nan)
    ab.dkdv_kernel[(tj.cdiv(100, BN), 2)](q, k, v, do, lse, delta, dk, dv, None, 128 ** -0.5, BM=BM, BN=BN, BD=128,
                                          CAUSAL=causal, num_warps=warps)
    _, _, dk_ref, dv_ref = ab.gradients(q, k, v, do, causal)
    for got, want in ((dk, dk_ref), (dv, dv_ref)):
        assert np.abs(got.astype(np.float64) - want).max() <= 1e-2 * np.abs(want).max()


def test_the_dq_loop_reads_k_from_two_rings_on_wgmma(monkeypatch):
    """dQ reads each K block in S = Q Kᵀ and in dQ += dS K: split, both DOTs (and dP = dO Vᵀ)
    run on wgmma from three TMA rings at 64 x 64, 4 warps; the result matches float64 on the
    emulator."""
    fn = until(ab.dq_kernel, (A4,) * 4 + (S3, S3, A4),
               {"scale": 128 ** -0.5, "BM": 64, "BN": 64, "BD": 128, "CAUSAL": True}, "plan_loops")
    loop = next(o for o in fn.walk() if o.op is TileOp.FOR)
    dots = [o for o in loop.regions[0].ops if o.op is TileOp.DOT]
    assert [fn.meta["dot_plans"].family(d) for d in dots] == [DotFamily.WGMMA] * 3
    plan = fn.meta["loop_plans"][loop]
    assert len(plan.rings) == 3 and plan.engine is CopyEngine.TMA
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    q, k, v, do = ab.example_inputs(np.random.default_rng(2), 1, 4, 2, 100, 128, tj.bfloat16.np)
    o, lse = ab.forward(q, k, v, True, BM=64, BN=64)
    delta = np.empty(lse.shape, np.float32)
    ab.delta_kernel[(tj.cdiv(100, 64), 4)](o, do, delta, None, BM=64, BD=128)
    dq = np.full_like(q, np.nan)
    ab.dq_kernel[(tj.cdiv(100, 64), 4)](q, k, v, do, lse, delta, dq, 128 ** -0.5, BM=64, BN=64, BD=128,
                                        CAUSAL=True, num_warps=4)
    want = ab.gradients(q, k, v, do, True)[1]
    assert np.abs(dq.astype(np.float64) - want).max() <= 1e-2 * np.abs(want).max()
