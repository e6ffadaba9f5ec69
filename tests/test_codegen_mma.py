"""LLVM emission of ldmatrix / mma.sync / cp.async: verified IR, PTX for sm_80 and sm_90a that
nvJitLink assembles without spills, and (on a GPU) the same probe kernel against the emulator."""
import functools
import re

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
from llvmlite import ir

from tilejit.backends import emulate_mma as E
from tilejit.codegen import llvm as codegen
from tilejit.codegen import mma as CM
from tilejit.codegen import ptxas
from tilejit.passes import mma_layouts as ML

I8, I32, I64, F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
IMAGE_BYTES = 4096            # shared memory the probe fills with cp.async
OUT_WORDS = 10                # per lane: 4 A registers, 2 B registers, 4 D registers
FP8 = ("e4m3", "e5m2")
NUMPY_TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
               "e5m2": ml_dtypes.float8_e5m2}


def _sreg_tid(b: ir.IRBuilder) -> ir.Value:
    return b.call(CM._declare(b, "llvm.nvvm.read.ptx.sreg.tid.x", I32, []), [])


def _element(b: ir.IRBuilder, base: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    return b.gep(base, [b.zext(index, I64)], source_etype=ty)


def probe_module(kind: str, trans_b: bool) -> ir.Module:
    """One warp: copy a 4 KiB shared-memory image in with cp.async (the last chunk through the
    zero-fill variant), ldmatrix A (.x4) and B (.x2) from per-lane row addresses, one mma, and
    store A, B and D registers: ``probe(image, a_addr, b_addr, c_in, out)``."""
    module = ir.Module(f"probe_{kind}")
    module.triple = codegen.TRIPLE
    g = ir.PointerType(addrspace=CM.GLOBAL)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [g] * 5), "probe")
    fn.calling_convention = "ptx_kernel"
    image, a_addr, b_addr, c_in, out = fn.args
    smem = ir.GlobalVariable(module, ir.ArrayType(I8, IMAGE_BYTES), "smem", addrspace=CM.SHARED)
    smem.linkage, smem.align = "internal", 16
    smem.initializer = ir.Constant(ir.ArrayType(I8, IMAGE_BYTES), None)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    tid = _sreg_tid(b)
    steps = IMAGE_BYTES // (32 * 16)
    for step in range(steps):
        off = b.add(b.mul(tid, ir.Constant(I32, 16)), ir.Constant(I32, step * 512))
        dst = b.gep(smem, [ir.Constant(I32, 0), off])
        src = _element(b, image, off, I8)
        CM.cp_async_16(b, dst, src, ir.Constant(I32, 16) if step == steps - 1 else None)
        CM.cp_async_commit_group(b)
    CM.cp_async_wait_group(b, 0)
    b.call(CM._declare(b, "llvm.nvvm.barrier0", ir.VoidType(), []), [])
    row = [b.load(_element(b, p, tid, I32), typ=I32) for p in (a_addr, b_addr)]
    a_regs = CM.ldmatrix(b, b.gep(smem, [ir.Constant(I32, 0), row[0]]), 4)
    b_regs = CM.ldmatrix(b, b.gep(smem, [ir.Constant(I32, 0), row[1]]), 2, trans=trans_b)
    acc = I32 if kind == "s8" else F32
    lane4 = b.mul(tid, ir.Constant(I32, 4))
    c = [b.load(_element(b, c_in, b.add(lane4, ir.Constant(I32, i)), acc), typ=acc) for i in range(4)]
    d = CM.mma(b, a_regs, b_regs, c, kind, ptx_version=84 if kind in FP8 else 80)
    base = b.mul(tid, ir.Constant(I32, OUT_WORDS))
    for i, value in enumerate([*a_regs, *b_regs, *d]):
        b.store(b.bitcast(value, I32), _element(b, out, b.add(base, ir.Constant(I32, i)), I32))
    b.ret_void()
    return module


@functools.cache
def _fp8_machine():
    codegen._init_llvm()
    return llvm.Target.from_triple(codegen.TRIPLE).create_target_machine(
        cpu="sm_90a", features="+ptx84", opt=3)


def probe_ptx(kind: str, target: str, trans_b: bool = False) -> str:
    text = str(probe_module(kind, trans_b))
    if kind not in FP8:
        return codegen.ptx_from_llvm(text, target)
    module = llvm.parse_assembly(text)        # fp8 mma needs PTX ISA 8.4 (see codegen/mma.py)
    module.verify()
    return _fp8_machine().emit_assembly(module)


MMA_PTX = {"bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
           "f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
           "tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
           "s8": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
           "e4m3": "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
           "e5m2": "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32"}
CPU_CASES = [(k, t) for k in MMA_PTX for t in ("sm_80", "sm_90a") if not (k in FP8 and t == "sm_80")]


@pytest.mark.parametrize("kind, target", CPU_CASES)
def test_probe_kernel_compiles_and_assembles(kind, target):
    ptx = probe_ptx(kind, target, trans_b=kind in ("bf16", "f16"))
    assert MMA_PTX[kind] in ptx
    assert ML.MMA_KINDS[kind].ptx in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert f"ldmatrix.sync.aligned.m8n8.x2{'.trans' if kind in ('bf16', 'f16') else ''}.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.commit_group" in ptx
    assert "cp.async.wait_group" in ptx
    assembled = ptxas.assemble(ptx, target)
    assert assembled.spills == 0 and assembled.registers > 0


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_every_ldmatrix_variant_and_zero_fill_copy(target):
    module = ir.Module("variants")
    module.triple = codegen.TRIPLE
    g = ir.PointerType(addrspace=CM.GLOBAL)
    s = ir.PointerType(addrspace=CM.SHARED)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [g, s, I32]), "k")
    fn.calling_convention = "ptx_kernel"
    out, shared, size = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    words = []
    for num in (1, 2, 4):
        for trans in (False, True):
            words += CM.ldmatrix(b, shared, num, trans)
    assert len(words) == 14 and all(w.type == I32 for w in words)
    total = words[0]
    for w in words[1:]:
        total = b.xor(total, w)
    b.store(total, out)
    CM.cp_async_16(b, shared, out, size)
    CM.cp_async_wait_all(b)
    CM.cp_async_wait_group(b, 3)
    tf32 = CM.f32_to_tf32(b, ir.Constant(F32, 1.1))
    b.store(tf32, b.gep(out, [ir.Constant(I64, 4)], source_etype=I8))
    b.ret_void()
    ptx = codegen.ptx_from_llvm(str(module), target)
    for num in ("x1", "x2", "x4"):
        assert f"ldmatrix.sync.aligned.m8n8.{num}.shared.b16" in ptx
        assert f"ldmatrix.sync.aligned.m8n8.{num}.trans.shared.b16" in ptx
    copy = [line for line in ptx.splitlines() if "cp.async.cg.shared.global" in line]
    assert len(copy) == 1 and copy[0].rstrip(";").count(",") == 3      # [dst], [src], 16, size
    assert "cp.async.wait_all" in ptx and re.search(r"cp\.async\.wait_group\s+3;", ptx)
    assert "cvt.rna.tf32.f32" in ptx
    assert ptxas.assemble(ptx, target).spills == 0


def test_helpers_reject_bad_operands():
    module = ir.Module("bad")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(addrspace=CM.GLOBAL)]), "k")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with pytest.raises(TypeError, match="addrspace\\(3\\)"):
        CM.ldmatrix(b, fn.args[0], 4)
    with pytest.raises(ValueError):
        CM.ldmatrix(b, ir.Constant(ir.PointerType(addrspace=CM.SHARED), None), 3)
    with pytest.raises(TypeError, match="addrspace\\(1\\)"):
        CM.cp_async_16(b, ir.Constant(ir.PointerType(addrspace=CM.SHARED), None),
                       ir.Constant(ir.PointerType(addrspace=CM.SHARED), None))
    with pytest.raises(ValueError):
        CM.cp_async_wait_group(b, -1)
    zero_i, zero_f = ir.Constant(I32, 0), ir.Constant(F32, 0.0)
    with pytest.raises(ValueError, match="4 \\+ 2 \\+ 4"):
        CM.mma(b, [zero_i] * 2, [zero_i] * 2, [zero_f] * 4, "bf16")
    with pytest.raises(ValueError, match=r"PTX ISA 8\.4 \(\+ptx84\); the target has 8\.0$"):   # LLVM would abort
        CM.mma(b, [zero_i] * 4, [zero_i] * 2, [zero_f] * 4, "e4m3")
    with pytest.raises(ValueError, match=r"the target has 7\.0$"):
        CM.mma(b, [zero_i] * 4, [zero_i] * 2, [zero_f] * 4, "e5m2", ptx_version=70)
    assert len(CM.mma(b, [zero_i] * 4, [zero_i] * 2, [zero_f] * 4, "e4m3", ptx_version=84)) == 4
    assert len(CM.mma(b, [zero_i] * 4, [zero_i] * 2, [zero_f] * 4, "e5m2", ptx_version=87)) == 4   # newer ISAs too
    with pytest.raises(ValueError, match="4 \\+ 2 \\+ 4 registers, got 6 \\+ 2 \\+ 4"):
        CM.mma(b, [zero_i] * 6, [zero_i] * 2, [zero_f] * 4, "bf16")
    desc = ir.Constant(ir.IntType(64), 0)
    for acc, kind, message in [(63, "bf16", "needs 64 f32 accumulators, got 63"),
                               (65, "f16", "needs 64 f32 accumulators, got 65"),
                               (64, "tf32", "needs 64 f32 accumulators, got 64")]:
        with pytest.raises(ValueError, match=f"wgmma m64n128k16 .{kind}: {message}"):
            CM.wgmma(b, [zero_f] * acc, desc, desc, kind, 128, False)
    assert len(CM.wgmma(b, [zero_f] * 64, desc, desc, "bf16", 128, False)) == 64
    assert len(CM.wgmma(b, [zero_f] * 64, desc, desc, "e4m3", 128, False)) == 64
    with pytest.raises(ValueError, match="e5m2 reads both operands K-major"):
        CM.wgmma(b, [zero_f] * 64, desc, desc, "e5m2", 128, True)
    assert "asm sideeffect" in str(module)     # never moved across the wgmma fences and commits


# ------------------------------------------------------------------------------ GPU cross-check
def probe_inputs(kind: str, seed: int):
    """A shared-memory image holding swizzled A (16 x K, row-major) and B (K x N row-major for
    the 16-bit kinds, read with .trans; N x K otherwise), every lane's ldmatrix row addresses,
    C, and the NumPy A and B (tf32 values are left un-rounded to test the truncation model)."""
    rng = np.random.default_rng(seed)
    info = ML.MMA_KINDS[kind]
    if kind == "s8":
        a = rng.integers(-128, 128, (16, info.k)).astype(np.int8)
        b = rng.integers(-128, 128, (info.k, 8)).astype(np.int8)
        c = rng.integers(-1000, 1000, (16, 8)).astype(np.int32)
    else:
        storage = np.float32 if kind == "tf32" else NUMPY_TYPES[kind]
        a = rng.standard_normal((16, info.k)).astype(np.float32).astype(storage)
        b = rng.standard_normal((info.k, 8)).astype(np.float32).astype(storage)
        c = rng.standard_normal((16, 8)).astype(np.float32)
    trans_b = info.bits == 16
    image = np.zeros(IMAGE_BYTES, np.uint8)
    tiles = {"a": (a, 0), "b": (b if trans_b else b.T, 2048)}
    row_bytes = {}
    for name, (tile, base) in tiles.items():
        raw = np.ascontiguousarray(tile).view(np.uint8).reshape(tile.shape[0], -1)
        row_bytes[name] = raw.shape[1]
        for r in range(raw.shape[0]):
            for col in range(0, raw.shape[1], 16):
                off = base + ML.swizzled_offset(r, col, raw.shape[1])
                image[off:off + 16] = raw[r, col:col + 16]
    rows_a = ML.ldmatrix_rows("a", 4)
    rows_b = ML.ldmatrix_rows("b_kn" if trans_b else "b_nk", 2)
    a_addr = ML.swizzled_offset(rows_a[:, 0], rows_a[:, 1], row_bytes["a"]).astype(np.int32)
    b_addr = (2048 + ML.swizzled_offset(rows_b[:, 0], rows_b[:, 1], row_bytes["b"])).astype(np.int32)
    return image, a_addr, b_addr, c, a, b, trans_b


@pytest.mark.parametrize("kind", sorted(MMA_PTX))
def test_probe_inputs_emulate_to_the_matmul(kind):
    image, a_addr, b_addr, c, a, b, trans_b = probe_inputs(kind, 0)
    regs = emulate_probe(kind, image, a_addr, b_addr, c, trans_b)
    d = E.scatter_fragment(kind, "c", regs[:, 6:].view(c.dtype))
    if kind == "tf32":
        a, b = E.tf32_truncate(a.view(np.uint32)), E.tf32_truncate(b.view(np.uint32))
    np.testing.assert_array_equal(d, (a.astype(np.float64) @ b.astype(np.float64) + c).astype(c.dtype))


def emulate_probe(kind, image, a_addr, b_addr, c, trans_b):
    shared = np.zeros(IMAGE_BYTES, np.uint8)
    q = E.AsyncCopies()
    for step in range(IMAGE_BYTES // 512):
        q.cp_async(shared, step * 512 + 16 * np.arange(32), image, step * 512 + 16 * np.arange(32))
        q.commit_group()
    q.wait_group(0)
    a_regs = E.ldmatrix(shared, a_addr, 4)
    b_regs = E.ldmatrix(shared, b_addr, 2, trans=trans_b)
    d = E.mma(a_regs, b_regs, E.gather_fragment(kind, "c", c), kind)
    return np.concatenate([a_regs, b_regs, d.view(np.uint32)], axis=1)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(MMA_PTX))
def test_probe_on_gpu_matches_emulator(kind):
    from tilejit import dtypes as D
    from tilejit.runtime import arrays as RA, launch as RL
    from tilejit.simt import ParamDesc
    image, a_addr, b_addr, c, _, _, trans_b = probe_inputs(kind, 1)
    ptx = probe_ptx(kind, "sm_90a", trans_b)
    kernel = RL.load(ptx.encode(), "probe", 0, device=0)
    c_lanes = E.gather_fragment(kind, "c", c)
    out = RA.empty((32 * OUT_WORDS,), D.uint32)
    args = [RA.to_device(x) for x in (image, a_addr, b_addr, np.ascontiguousarray(c_lanes))] + [out]
    params = [ParamDesc("ptr", i, None, D.uint8) for i in range(5)]
    kernel.launch((1, 1, 1), 32, args, params)
    got = out.numpy().reshape(32, OUT_WORDS)
    want = emulate_probe(kind, image, a_addr, b_addr, c, trans_b)
    np.testing.assert_array_equal(got[:, :6], want[:, :6])             # ldmatrix: bit-exact
    if kind == "s8":
        np.testing.assert_array_equal(got[:, 6:], want[:, 6:])
    else:   # PTX leaves the f32 adder tree unspecified: allow a few ulps of the sum's magnitude
        np.testing.assert_allclose(got[:, 6:].view(np.float32), want[:, 6:].view(np.float32),
                                   rtol=1e-5, atol=1e-4)
