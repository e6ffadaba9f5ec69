"""Tensor-core DOT: warp tiling and layouts, SIMT ops in the emulator, matmuls through the public
API on the ``emulate`` backend against float64 NumPy (ragged shapes, fp16/bf16/tf32/int8,
epilogues, transposed and strided inputs), and the GPU code (PTX contents, ptxas report)."""
import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj
from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.backends import emulate as emulator
from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML
from tilejit.passes.mma_tiling import (DotConfig, choose_warps, ldmatrix_a_layout, ldmatrix_b_layout)
from tilejit.passes.pipeline import compile_to_simt
from tilejit.examples.matmul import matmul_kernel
from tilejit.specs import ArraySpec

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8, "float32": np.float32}


@pytest.fixture(autouse=True)
def emulate(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")


matmul = matmul_kernel.kernel          # the example's kernel, without its tuner


@tj.kernel
def matmul_int8(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr = 1):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.int32)
    for k in tj.range(0, a.shape[1], BK, stages=STAGES):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc)


@tj.kernel
def matmul_tf32(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=2):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc, allow_tf32=True)
    tj.store(c, (m, n), acc)


@tj.kernel
def linear_relu(a, b, bias, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=3):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    acc = acc + tj.load(bias, (n,), (BN,))[None, :].to(tj.float32)
    tj.store(c, (m, n), tj.maximum(acc, 0.0).to(c.dtype))


def run(kernel, a, b, out_dtype, BM=32, BN=32, BK=32, num_warps=4, **kw):
    c = np.zeros((a.shape[0], b.shape[1]), out_dtype)
    kernel[(tj.cdiv(a.shape[0], BM), tj.cdiv(b.shape[1], BN))](a, b, c, BM=BM, BN=BN, BK=BK,
                                                               num_warps=num_warps, **kw)
    return c


def check_float_dot(out, a, b, k, unit=2**-23):
    """fp32 accumulation of exact products: error at most ~k ulps of sum |a||b|."""
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    err = np.abs(out.astype(np.float64) - ref)
    assert (err <= 1e-6 + (k + 2) * unit * scale).all(), err.max()


def inputs(dtype, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(NP[dtype]), rng.standard_normal((k, n)).astype(NP[dtype]))


# ------------------------------------------------------------------------------ tiling, layouts
def test_warp_tiling_prefers_square_tall_warp_tiles():
    bf16 = ML.MMA_KINDS["bf16"]
    assert choose_warps(128, 128, 8, bf16) == (2, 4)       # 64x32 per warp
    assert choose_warps(128, 128, 4, bf16) == (2, 2)
    assert choose_warps(64, 256, 8, bf16) == (1, 8)
    assert choose_warps(16, 8, 2, bf16) is None             # no m16n8 tile per warp


def test_accumulator_layout_covers_the_tile_once():
    cfg = DotConfig(ML.MMA_KINDS["bf16"], 128, 128, 32, (2, 4), D.bfloat16, D.float32)
    table = cfg.acc_layout.table().reshape(-1, 2)
    ids = table[:, 0] * 128 + table[:, 1]
    assert sorted(ids.tolist()) == list(range(128 * 128))
    assert cfg.acc_layout.n == 64                           # 64x32 warp tile / 32 lanes


@pytest.mark.parametrize("dtype", ["bf16", "s8", "tf32"])
def test_ldmatrix_address_layouts_match_the_ptx_row_maps(dtype):
    kind = ML.MMA_KINDS[dtype]
    ab = {"bf16": D.bfloat16, "s8": D.int8, "tf32": D.float32}[dtype]
    cfg = DotConfig(kind, 64, 64, 2 * kind.k, (2, 2), ab, D.float32)
    lane = np.arange(32)
    rows = ML.ldmatrix_rows("a", 4)
    a = ldmatrix_a_layout(cfg).table()                     # (threads, regs, 2)
    assert (a[:32, 0, 0] == rows[lane, 0]).all()
    assert (a[:32, 0, 1] * ab.itemsize == rows[lane, 1]).all()
    assert (a[32:64, 0, 0] == rows[lane, 0] + cfg.warp_tile[0]).all()     # warp 1: next rows
    assert (a[:32, 1, 0] == rows[lane, 0] + 16).all()                      # next m16 tile
    if kind.bits == 16:
        b = ldmatrix_b_layout(cfg).table()
        rows_b = ML.ldmatrix_rows("b_kn", 4)
        assert (b[:32, 0, 0] == rows_b[lane, 0]).all()
        assert (b[:32, 0, 1] * 2 == rows_b[lane, 1]).all()
        assert (b[64:96, 0, 1] == b[:32, 0, 1] + cfg.warp_tile[1]).all()   # warp 2: next cols


def test_swizzled_ldmatrix_reads_are_conflict_free():
    cfg = DotConfig(ML.MMA_KINDS["bf16"], 128, 128, 32, (2, 4), D.bfloat16, D.float32)
    from tilejit.passes.plans import SharedTile
    for layout, operand in ((ldmatrix_a_layout(cfg), SharedTile.A), (ldmatrix_b_layout(cfg), SharedTile.B)):
        t = layout.table()
        offs = ML.swizzled_offset(t[..., 0], t[..., 1] * 2, cfg.row_bytes(operand))
        for warp in range(8):
            for r in range(layout.n):
                assert ML.ldmatrix_phase_wavefronts(offs[32 * warp:32 * warp + 32, r]) == [1] * 4


# ------------------------------------------------------------------------- emulated matmuls
@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(0, 80),
       dtype=st.sampled_from(["float16", "bfloat16"]), stages=st.sampled_from([1, 3]))
def test_half_matmul_ragged(m, n, k, dtype, stages):
    a, b = inputs(dtype, m, n, k, seed=m * 1000 + n)
    out = run(matmul, a, b, np.float32, STAGES=stages)
    check_float_dot(out, a, b, k)


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 80), n8=st.integers(1, 9), k8=st.integers(0, 12), stages=st.integers(2, 4))
def test_bf16_matmul_on_the_cp_async_path(m, n8, k8, stages):
    """Rows of whole 16-byte chunks (n, k multiples of 8): the pipelined loop runs."""
    a, b = inputs("bfloat16", m, 8 * n8, 8 * k8, seed=m)
    out = run(matmul, a, b, np.float32, BK=16, STAGES=stages)
    check_float_dot(out, a, b, 8 * k8)


@tj.kernel
def matmul_bt(a, bt, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """C = A @ Bt.T with Bt stored N x K (the q @ k.T of attention)."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=2):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.trans(tj.load(bt, (n, k), (BN, BK))), acc)
    tj.store(c, (m, n), acc)


def test_transposed_operand_in_the_kernel():
    a, b = inputs("float16", 40, 24, 48, seed=5)
    bt = np.ascontiguousarray(b.T)
    c = np.zeros((40, 24), np.float32)
    matmul_bt[(2, 1)](a, bt, c, BM=32, BN=32, BK=16)
    check_float_dot(c, a, b, 48)
    assert "mma" in matmul_bt.inspect(a, bt, c, BM=32, BN=32, BK=16).simt_ir


@pytest.mark.parametrize("num_warps,tile", [(1, (16, 16, 16)), (2, (32, 16, 32)), (8, (64, 64, 32))])
def test_matmul_warp_counts(num_warps, tile):
    a, b = inputs("float16", 70, 45, 72)
    BM, BN, BK = tile
    out = run(matmul, a, b, np.float32, BM=BM, BN=BN, BK=BK, num_warps=num_warps, STAGES=2)
    check_float_dot(out, a, b, 72)


def test_bf16_output_and_tensor_core_ops_in_the_simt_ir():
    a, b = inputs("bfloat16", 64, 48, 64)
    c = np.zeros((64, 48), ml_dtypes.bfloat16)
    matmul[(2, 2)](a, b, c, BM=32, BN=32, BK=32, STAGES=2)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tj.testing.assert_close(c, ref.astype(ml_dtypes.bfloat16).astype(np.float64), dtype=tj.bfloat16)
    text = matmul.inspect(a, b, c, BM=32, BN=32, BK=32, STAGES=2).simt_ir
    assert "mma" in text and "ldmatrix" in text and "cp_async" in text


def test_int8_matmul_is_exact():
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (50, 96)).astype(np.int8)
    b = rng.integers(-128, 128, (96, 48)).astype(np.int8)     # 16-byte rows: the cp.async ring
    for stages in (1, 2):
        out = run(matmul_int8, a, b, np.int32, BK=32, STAGES=stages)
        np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def test_tf32_matmul():
    a, b = inputs("float32", 40, 36, 56)
    out = run(matmul_tf32, a, b, np.float32, BK=16)
    check_float_dot(out, a, b, 56, unit=2**-9)             # inputs keep 10 mantissa bits
    text = matmul_tf32.inspect(a, b, out, BM=32, BN=32, BK=16).simt_ir
    assert "tf32" in text


def test_bias_relu_epilogue():
    a, b = inputs("float16", 45, 70, 64)
    bias = np.random.default_rng(2).standard_normal(70).astype(np.float16)
    c = np.zeros((45, 70), np.float16)
    linear_relu[(2, 3)](a, b, bias, c, BM=32, BN=32, BK=32)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0)
    tj.testing.assert_close(c, ref, dtype=tj.float16)


def test_transposed_and_strided_inputs():
    """Non-unit inner strides: no vector loads and no cp.async, still tensor cores."""
    a, b = inputs("float16", 40, 48, 64, seed=3)
    at = np.ascontiguousarray(a.T).T                    # column-major A
    wide = np.zeros((64, 96), np.float16)
    wide[:, ::2] = b
    bs = wide[:, ::2]                                   # inner stride 2
    out = run(matmul, at, bs, np.float32, STAGES=3)
    check_float_dot(out, a, b, 64)


def test_float32_without_tf32_keeps_the_exact_fallback():
    a, b = inputs("float32", 20, 24, 40)
    out = run(matmul, a, b, np.float32)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert "mma" not in matmul.inspect(a, b, out, BM=32, BN=32, BK=32).simt_ir


# -------------------------------------------------------------------------- SIMT op semantics
def test_pack_puts_the_lower_element_in_the_low_bits():
    x = ir.Value(simt.RegType(D.int8, 4))
    op = ir.Operation(simt.SimtOp.PACK, [x], [simt.RegType(D.int32, 1)])
    fn = ir.Function("t", ir.Block([], [op]), [], simt.SimtMeta("t", [], 1))
    machine = emulator.Machine(fn, (1, 1, 1), [])
    values = np.broadcast_to(np.array([1, -1, 2, 3], np.int8), (1, 32, 4))
    packed = machine.op_PACK(op, emulator.Frame({x: values}, np.arange(1)))
    assert (packed.view(np.uint32) == 0x0302FF01).all()


# ---------------------------------------------------------------------------------- GPU code
def _gemm_ptx(target, dtype=D.bfloat16, stages=3):
    """The mma.sync GEMM (sm_90a would take wgmma for this tile: ``test_wgmma`` covers that)."""
    from tilejit import codegen
    spec = ArraySpec(dtype, 2, True, True, False)
    tile = matmul.tile_ir((spec, spec, spec), {"BM": 128, "BN": 128, "BK": 32, "STAGES": stages})
    fn = compile_to_simt(tile, num_warps=8, target=target, wgmma=False)
    return fn, codegen.compile_ptx(fn, target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_gemm_ptx_uses_tensor_cores_and_async_copies(target):
    fn, ptx = _gemm_ptx(target)
    # one copy of the K loop (cp.async pipelined: the spec promises aligned rows), doing
    # 4 m16 x 4 n8 x 2 k16 mmas per iteration
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", ptx)) == 32
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", ptx)) == 8      # A: 4 m16 x 2 k16
    assert len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16", ptx)) == 4  # B: 2 n16 x 2 k16
    # 2 prologue stages + 1 per iteration, 2 copies of 16 bytes per thread for A and for B
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)) == 3 * 4
    assert "ld.local" not in ptx and "st.local" not in ptx
    assert fn.meta.shared_bytes <= 3 * (128 * 32 + 32 * 128) * 2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_gemm_assembles_without_spills(target):
    from tilejit.codegen import ptxas
    _, ptx = _gemm_ptx(target)
    try:
        res = ptxas.assemble(ptx, target)
    except ptxas.PtxAssemblyError as e:
        if "not available" in str(e) or "could not start" in str(e):
            pytest.skip(str(e))
        raise
    assert res.spills == 0
    assert res.registers <= 255


@tj.kernel
def tagged_blocks(a, out):
    """Each program writes a (tiny) tensor-core product plus its program ids into its block."""
    p0, p1 = tj.program_id(0), tj.program_id(1)
    t = tj.load(a, (0, 0), (16, 16))
    acc = tj.dot(t, t, tj.zeros((16, 16), tj.float32))
    tj.store(out, (p0 * 16, p1 * 16), acc + (p0 * 1000 + p1).to(tj.float32))


@pytest.mark.parametrize("grid", [(13, 3), (5, 2), (20, 1), (1, 7)])
def test_grouped_program_order_is_a_permutation_of_the_grid(grid):
    a = np.eye(16, dtype=np.float16)
    out = np.full((16 * grid[0], 16 * grid[1]), np.nan, np.float32)
    tagged_blocks[grid](a, out)
    blocks = out.reshape(grid[0], 16, grid[1], 16) - np.eye(16)[None, :, None, :]
    ids = np.arange(grid[0])[:, None] * 1000 + np.arange(grid[1])[None, :]
    np.testing.assert_array_equal(blocks, np.broadcast_to(ids[:, None, :, None], blocks.shape))


@pytest.mark.parametrize("kernel,dtype,mma", [
    (matmul_int8, D.int8, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
    (matmul_tf32, D.float32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    (matmul, D.float16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")])
def test_other_mma_kinds_assemble(kernel, dtype, mma):
    from tilejit import codegen
    from tilejit.codegen import ptxas
    spec = ArraySpec(dtype, 2, True, True, False)
    out = ArraySpec(D.int32 if dtype == D.int8 else D.float32, 2, True, True, False)
    consts = {"BM": 64, "BN": 64, "BK": 32} | ({} if kernel is matmul_tf32 else {"STAGES": 3})
    fn = compile_to_simt(kernel.tile_ir((spec, spec, out), consts), num_warps=4, target="sm_80")
    ptx = codegen.compile_ptx(fn, "sm_80")
    assert mma in ptx and "cp.async.cg.shared.global" in ptx and "ldmatrix" in ptx
    try:
        assert ptxas.assemble(ptx, "sm_80").spills == 0
    except ptxas.PtxAssemblyError as e:
        if "not available" in str(e) or "could not start" in str(e):
            pytest.skip(str(e))
        raise


@tj.kernel
def dot_of_broadcasts(a, x, y, out, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """Both operand kinds built by broadcasting a loaded vector (a row of B, a column of A)."""
    bt = tj.broadcast_to(tj.load(x, (0,), (BN,))[None, :], (BK, BN))
    at = tj.broadcast_to(tj.load(y, (0,), (BM,))[:, None], (BM, BK))
    tj.store(out, (0, 0), tj.dot(tj.load(a, (0, 0), (BM, BK)), bt) + tj.dot(at, bt))


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_broadcast_tiles_as_dot_operands(backend, monkeypatch):
    """A broadcast feeding a DOT keeps its own layout (it used to be pinned to the DOT's
    accumulator layout, a tile of another shape: misaligned shared stores on the emulator)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(7)
    BM, BN, BK = 32, 32, 16
    a = rng.standard_normal((BM, BK)).astype(np.float16)
    x, y = rng.standard_normal(BN).astype(np.float16), rng.standard_normal(BM).astype(np.float16)
    out = np.full((BM, BN), np.nan, np.float32)
    dot_of_broadcasts[(1,)](a, x, y, out, BM=BM, BN=BN, BK=BK)
    bt = np.broadcast_to(x[None, :].astype(np.float64), (BK, BN))
    at = np.broadcast_to(y[:, None].astype(np.float64), (BM, BK))
    np.testing.assert_allclose(out, a.astype(np.float64) @ bt + at @ bt, rtol=1e-5, atol=1e-5)
