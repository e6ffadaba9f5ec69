"""LLVM emission from hand-built SIMT kernels: verified LLVM IR, PTX for sm_80 and sm_90a, the
instructions we expect in it, assembly by nvJitLink without spills, and the IR shapes of
NumPy's tricky integer/float semantics.  At the end the elementwise LLVM itself is run on the
host CPU (MCJIT; the three NVVM approximations swapped for the exact operations they
approximate) and compared with NumPy, which checks range reduction, polynomials, special
values and integer semantics without a GPU."""
from __future__ import annotations

import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from tilejit.codegen import llvm as codegen
from tilejit import dtypes as D
from tilejit.codegen.host import host_eval
from tilejit.errors import CompileError
from tilejit.ir import AxisAttrs, Block, Builder, Function, TileOp, Value
from tilejit.codegen.ptxas import assemble
from tilejit.simt import (EwAttrs, GlobalAttrs, IndicesAttrs, MaskAttrs, ParamDesc, PtrType, RegType, SimtMeta,
                          SharedAttrs, SimtOp, VectorConstAttrs)

TARGETS = ("sm_80", "sm_90a")
f32, i32, i64, b1 = D.float32, D.int32, D.int64, D.bool_


class Kernel:
    """Builds a SIMT kernel op by op: ``k.ew(TileOp.ADD, a, b)``, ``k.param("ptr", f32)``..."""

    def __init__(self, name: str = "k", num_warps: int = 4, shared_bytes: int = 0):
        self.body = Block()
        self.blocks = [self.body]
        self.params: list[ParamDesc] = []
        self.meta = SimtMeta(name, self.params, num_warps, shared_bytes=shared_bytes)

    def op(self, op, operands=(), result=None, attrs=None, regions=None):
        types = result if isinstance(result, list) else [result] if result else []
        o = Builder(self.blocks[-1]).create(op, operands, types, attrs, regions)
        if isinstance(result, list):
            return o.results
        return o.result if result else o

    def param(self, kind: str, dtype: D.DType, axis=None):
        self.params.append(ParamDesc(kind, len(self.params), axis, dtype))
        ty = PtrType(dtype) if kind == "ptr" else RegType(i32 if kind == "dim" else dtype)
        return self.op(SimtOp.PARAM, (), ty, AxisAttrs(len(self.params) - 1))

    def const(self, dtype, *values):
        return self.op(SimtOp.CONSTANT, (), RegType(dtype, len(values)), VectorConstAttrs(tuple(values)))

    def ew(self, tile_op, *xs, dtype=None):
        n = max(x.type.n for x in xs)
        if dtype is None:
            dtype = b1 if tile_op in (TileOp.EQ, TileOp.NE, TileOp.LT, TileOp.LE, TileOp.GT, TileOp.GE) \
                else xs[-1].type.dtype
        return self.op(SimtOp.ELEMENTWISE, xs, RegType(dtype, n), EwAttrs(tile_op))

    def splat(self, x, n):
        return self.op(SimtOp.SPLAT, (x,), RegType(x.type.dtype, n))

    def region(self, *arg_types):
        block = Block(args=[Value(t) for t in arg_types])
        self.blocks.append(block)
        return block

    def end_region(self, *yields):
        self.op(SimtOp.YIELD, yields)
        return self.blocks.pop()

    def function(self) -> Function:
        return Function(self.meta.name, self.body, [], self.meta)


def contiguous_offsets(k: Kernel, per_thread: int):
    """Element offsets (block*threads + tid)*per_thread + [0..per_thread) and their mask < n."""
    n = k.param("dim", i32, 0)
    tid, bid = k.op(SimtOp.THREAD_ID, (), RegType(i32)), k.op(SimtOp.BLOCK_ID, (), RegType(i32), AxisAttrs(0))
    first = k.ew(TileOp.ADD, k.ew(TileOp.MUL, bid, k.const(i32, 128)), tid)
    first = k.ew(TileOp.MUL, first, k.const(i32, per_thread))
    offs = k.ew(TileOp.ADD, k.splat(first, per_thread), k.const(i32, *range(per_thread)))
    return offs, k.ew(TileOp.LT, offs, k.splat(n, per_thread))


def ptx_and_report(fn, target):
    ptx = codegen.compile_ptx(fn, target)
    return ptx, assemble(ptx, target)


def exp_kernel(dtype=f32, vec=4):
    k = Kernel("vexp")
    x, y = k.param("ptr", dtype), k.param("ptr", dtype)
    offs, mask = contiguous_offsets(k, vec)
    v = k.op(SimtOp.LOAD_GLOBAL, (x, offs, mask), RegType(dtype, vec), GlobalAttrs(vec=vec, other=float("-inf")))
    k.op(SimtOp.STORE_GLOBAL, (y, offs, k.ew(TileOp.EXP, v), mask), attrs=GlobalAttrs(vec=vec))
    return k.function()


# ------------------------------------------------------------------------------ kernels end to end
@pytest.mark.parametrize("target", TARGETS)
def test_vectorised_masked_exp_kernel(target):
    fn = exp_kernel()
    text = codegen.emit_llvm(fn, target)
    assert "load <4 x float>, ptr addrspace(1)" in text and "align 16" in text
    assert '"nvvm.maxntid"="128"' in text
    ptx, rep = ptx_and_report(fn, target)
    assert re.search(r"ld\.global\.v4\.(b32|f32)", ptx) and re.search(r"st\.global\.v4\.(b32|f32)", ptx)
    assert "ex2.approx" not in ptx and "fma.rn.f32" in ptx and ".maxntid 128" in ptx and f".target {target}" in ptx
    assert rep.spills == 0 and 0 < rep.registers < 64 and len(rep.cubin) > 0


@pytest.mark.parametrize("dtype,vec,pattern", [(D.bfloat16, 8, r"ld\.global\.v4\.b32"),
                                               (D.float16, 4, r"ld\.global\.(v4\.b16|v2\.b32)"),
                                               (D.int8, 4, r"ld\.global\.b32")])
def test_narrow_dtypes_vectorise(dtype, vec, pattern):
    ptx, rep = ptx_and_report(exp_kernel(dtype, vec) if dtype.is_float else int_copy(dtype, vec), "sm_90a")
    assert re.search(pattern, ptx), ptx
    assert rep.spills == 0


def test_lanes_with_the_same_operands_share_one_instruction():
    """A row index broadcast along a row (the registers of a tile that repeat) is one add and one
    compare in the LLVM IR, not one a register; lanes that differ keep their own instructions,
    and equal constants of one vector are one value."""
    k = Kernel("rows")
    out, n = k.param("ptr", f32), k.param("dim", i32, 0)
    row = k.ew(TileOp.ADD, k.op(SimtOp.THREAD_ID, (), RegType(i32)), k.const(i32, 1000))
    rows = k.ew(TileOp.ADD, k.splat(row, 8), k.const(i32, 5, 5, 5, 5, 9, 9, 9, 9))   # two distinct lanes
    mask = k.ew(TileOp.LT, rows, k.splat(n, 8))
    k.op(SimtOp.STORE_GLOBAL, (out, rows, k.ew(TileOp.ADD, k.splat(k.const(f32, 1.0), 8),
                                                 k.const(f32, *[0.5] * 8)), mask), attrs=GlobalAttrs())
    text = codegen.emit_llvm(k.function(), "sm_90a")
    assert len(re.findall(r"= add i32 %\S+, 5\b", text)) == 1 and len(re.findall(r"= add i32 %\S+, 9\b", text)) == 1
    assert len(re.findall(r"= icmp slt i32", text)) == 2
    assert len(re.findall(r"= fadd float", text)) <= 1, text


@pytest.mark.parametrize("dtype,vec", [(f32, 4), (D.bfloat16, 8)])
def test_a_masked_vector_groups_elements_are_constant_steps_from_its_first(dtype, vec):
    """The element-by-element path of a masked vector load or store addresses element j as the
    group's first pointer + j (one GEP from an offset a group, the rest constant steps), so the
    PTX reads and writes them as ``[%rd+j*size]``, with no address arithmetic of their own."""
    fn = exp_kernel(dtype, vec)
    text = codegen.emit_llvm(fn, "sm_90a")
    mem = "float" if dtype == f32 else "bfloat"
    steps = re.findall(rf"getelementptr {mem}, ptr addrspace\(1\) %\S+, i32 (\d+)", text)
    assert sorted(set(map(int, steps))) == list(range(1, vec)), steps
    assert len(re.findall(rf"getelementptr {mem}, ptr addrspace\(1\) %\S+, i32 %", text)) == 2   # x and y
    ptx = codegen.compile_ptx(fn, "sm_90a")
    size = dtype.itemsize
    for j in range(1, vec - 1):        # (the last one is out of bounds whenever the others are in)
        assert re.search(rf"ld\.global\.b{8 * size}\s+%\w+, \[%rd\d+\+{j * size}\]", ptx), (j, ptx)
        assert re.search(rf"st\.global\.b{8 * size}\s+\[%rd\d+\+{j * size}\]", ptx), (j, ptx)


def int_copy(dtype, vec):
    k = Kernel("copy")
    x, y = k.param("ptr", dtype), k.param("ptr", dtype)
    offs, mask = contiguous_offsets(k, vec)
    v = k.op(SimtOp.LOAD_GLOBAL, (x, offs, mask), RegType(dtype, vec), GlobalAttrs(vec=vec))
    k.op(SimtOp.STORE_GLOBAL, (y, offs, v, mask), attrs=GlobalAttrs(vec=vec))
    return k.function()


@pytest.mark.parametrize("target", TARGETS)
def test_shuffles_of_every_width(target):
    k = Kernel("shfl")
    lane = k.const(i32, 3)
    for dtype in (f32, D.float16, D.bfloat16, i64, D.int8, b1, D.uint32):
        out = k.param("ptr", dtype)
        x = k.op(SimtOp.LOAD_GLOBAL, (out, k.const(i32, 0, 1)), RegType(dtype, 2), GlobalAttrs())
        x = k.op(SimtOp.SHUFFLE_XOR, (x,), RegType(dtype, 2), MaskAttrs(16))
        x = k.op(SimtOp.SHUFFLE_IDX, (x, lane), RegType(dtype, 2))
        k.op(SimtOp.STORE_GLOBAL, (out, k.const(i32, 0, 1), x), attrs=GlobalAttrs())
    ptx, rep = ptx_and_report(k.function(), target)
    assert "shfl.sync.bfly.b32" in ptx and "shfl.sync.idx.b32" in ptx
    # 6 dtypes x 2 registers x 2 kinds, and int64 in two 32-bit halves
    assert ptx.count("shfl.sync") == 6 * 2 * 2 + 2 * 2 * 2
    assert rep.spills == 0


@pytest.mark.parametrize("target", TARGETS)
def test_shared_memory_and_barrier(target):
    k = Kernel("smem", shared_bytes=2048)
    out = k.param("ptr", f32)
    tid = k.op(SimtOp.THREAD_ID, (), RegType(i32))
    addr = k.ew(TileOp.MUL, tid, k.const(i32, 16))
    addrs = k.ew(TileOp.ADD, k.splat(addr, 4), k.const(i32, 0, 4, 8, 12))
    vals = k.op(SimtOp.LOAD_GLOBAL, (out, k.const(i32, 0, 1, 2, 3)), RegType(f32, 4), GlobalAttrs(vec=4))
    k.op(SimtOp.STORE_SHARED, (addrs, vals), attrs=SharedAttrs(vec=4))
    k.op(SimtOp.BARRIER)
    back = k.op(SimtOp.LOAD_SHARED, (addrs,), RegType(f32, 4), SharedAttrs(vec=4))
    picked = k.op(SimtOp.GATHER, (back,), RegType(f32, 2), IndicesAttrs((3, 0)))
    both = k.op(SimtOp.CONCAT, (picked, picked), RegType(f32, 4))
    k.op(SimtOp.STORE_GLOBAL, (out, k.const(i32, 0, 1, 2, 3), both), attrs=GlobalAttrs(vec=4))
    ptx, rep = ptx_and_report(k.function(), target)
    assert ".extern .shared .align 1024 .b8 tj_smem[]" in ptx       # wgmma swizzle atoms
    assert re.search(r"st\.shared\.v4\.(b32|f32)", ptx) and re.search(r"ld\.shared\.v4\.(b32|f32)", ptx)
    assert "bar.sync" in ptx and rep.spills == 0


def test_tile_kernels_through_the_pass_pipeline():
    """softmax and a strided add from Python source: tile IR -> passes -> SIMT -> PTX -> cubin."""
    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.specs import ArraySpec, ScalarSpec

    def softmax(x, y, BLOCK: tj.constexpr):
        row = tj.program_id(0)
        t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf)
        t = tj.exp(t - tj.max(t, axis=1, keepdims=True))
        tj.store(y, (row, 0), t / tj.sum(t, axis=1, keepdims=True))

    def axpy(x, y, a, BLOCK: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)) * a + tj.load(y, (i,), (BLOCK,)))

    cases = [(softmax, [ArraySpec(D.bfloat16, 2)] * 2, ("shfl.sync.bfly", "bar.sync", "ex2.approx")),
             (axpy, [ArraySpec(f32, 1)] * 2 + [ScalarSpec(f32)], ())]
    for pyfn, specs, expected in cases:
        fn = compile_to_simt(compile_tile_ir(pyfn, specs, {"BLOCK": 1024}), num_warps=4, persist=False)
        for target in TARGETS:
            ptx, rep = ptx_and_report(fn, target)
            assert re.search(r"ld\.global\.v4\.b32", ptx) and re.search(r"st\.global\.v4\.b32", ptx)
            assert all(s in ptx for s in expected) and rep.spills == 0


# ---------------------------------------------------------------------------------- control flow
def loop_kernel(step: int | None, iv_dtype=i32):
    k = Kernel("loop")
    out = k.param("ptr", f32)
    ub = k.param("scalar", iv_dtype)
    step_v = k.param("scalar", iv_dtype) if step is None else k.const(iv_dtype, step)
    acc0 = k.const(f32, 0.0, 1.0)
    body = k.region(RegType(iv_dtype), RegType(f32, 2))
    iv, acc = body.args
    ivf = k.splat(k.ew(TileOp.CAST, iv, dtype=f32), 2)
    odd = k.ew(TileOp.NE, k.ew(TileOp.AND, iv, k.const(iv_dtype, 1)), k.const(iv_dtype, 0))
    then = k.region()
    k.end_region(k.ew(TileOp.ADD, acc, ivf))
    other = k.region()
    k.end_region(k.ew(TileOp.SUB, acc, ivf))
    picked = k.op(SimtOp.IF, (odd,), RegType(f32, 2), regions=[then, other])
    body = k.end_region(picked)
    lb = k.const(iv_dtype, 0)
    res = k.op(SimtOp.FOR, (lb, ub, step_v, acc0), RegType(f32, 2), regions=[body])
    k.op(SimtOp.STORE_GLOBAL, (out, k.const(i32, 0, 1), res), attrs=GlobalAttrs())
    return k.function()


@pytest.mark.parametrize("step,iv_dtype", [(1, i32), (-2, i32), (None, i32), (3, i64), (None, i64)])
def test_for_and_if(step, iv_dtype):
    fn = loop_kernel(step, iv_dtype)
    text = codegen.emit_llvm(fn)
    assert "phi" in text
    head = text.split("for.head:")[1].split("for.body:")[0]
    if step is None:                               # runtime step: its sign picks the comparison
        assert "select" in head and "icmp slt" in head and "icmp sgt" in head
    else:
        assert ("icmp slt" if step > 0 else "icmp sgt") in head and "select" not in head
    for target in TARGETS:
        assert ptx_and_report(fn, target)[1].spills == 0


def test_while_is_do_while():
    k = Kernel("collatz")
    out = k.param("ptr", i32)
    start = k.param("scalar", i32)
    body = k.region(RegType(i32), RegType(i32))
    x, steps = body.args
    even = k.ew(TileOp.EQ, k.ew(TileOp.MOD, x, k.const(i32, 2)), k.const(i32, 0))
    half = k.ew(TileOp.FLOORDIV, x, k.const(i32, 2))
    triple = k.ew(TileOp.ADD, k.ew(TileOp.MUL, x, k.const(i32, 3)), k.const(i32, 1))
    nxt = k.ew(TileOp.WHERE, even, half, triple)
    more = k.ew(TileOp.NE, nxt, k.const(i32, 1))
    body = k.end_region(more, nxt, k.ew(TileOp.ADD, steps, k.const(i32, 1)))
    _, res = k.op(SimtOp.WHILE, (start, k.const(i32, 0)), [RegType(i32)] * 2, regions=[body])
    k.op(SimtOp.STORE_GLOBAL, (out, k.const(i32, 0), res), attrs=GlobalAttrs())
    text = codegen.emit_llvm(k.function())
    body_text = text.split("while.body:")[1]
    assert "br i1" in body_text and "label %\"while.body\"" in body_text
    assert ptx_and_report(k.function(), "sm_80")[1].spills == 0


# ------------------------------------------------------------------------- every elementwise op
FLOATS, INTS = (f32, D.float16, D.bfloat16), (D.int8, D.int16, i32, i64, D.uint8, D.uint32)
COMPARES = (TileOp.EQ, TileOp.NE, TileOp.LT, TileOp.LE, TileOp.GT, TileOp.GE)
FLOAT_UNARY = (TileOp.NEG, TileOp.ABS, TileOp.EXP, TileOp.EXP2, TileOp.LOG, TileOp.LOG2, TileOp.SQRT,
               TileOp.RSQRT, TileOp.SIN, TileOp.COS, TileOp.TANH, TileOp.SIGMOID, TileOp.ERF, TileOp.FLOOR,
               TileOp.CEIL, TileOp.TRUNC, TileOp.ROUND)
FLOAT_BINARY = (TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.TRUEDIV, TileOp.FLOORDIV, TileOp.MOD,
                TileOp.POW, TileOp.MAXIMUM, TileOp.MINIMUM)
INT_BINARY = (TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.FLOORDIV, TileOp.MOD, TileOp.POW, TileOp.AND,
              TileOp.OR, TileOp.XOR, TileOp.SHL, TileOp.SHR, TileOp.MAXIMUM, TileOp.MINIMUM)


def ops_kernel(dtype, casts_to=FLOATS + INTS + (b1,)):
    """Loads two 2-register inputs of ``dtype`` and stores every op defined on it."""
    k = Kernel(f"ops_{dtype.name}")
    src = k.param("ptr", dtype)
    offs = k.const(i32, 0, 1)
    a = k.op(SimtOp.LOAD_GLOBAL, (src, offs), RegType(dtype, 2), GlobalAttrs(vec=2))
    b = k.op(SimtOp.LOAD_GLOBAL, (src, k.const(i32, 2, 3)), RegType(dtype, 2), GlobalAttrs(vec=2))
    results = [k.ew(op, a, b) for op in COMPARES]
    results += [k.ew(TileOp.WHERE, results[0], a, b), k.ew(TileOp.CAST, a, dtype=dtype)]
    results += [k.ew(TileOp.CAST, a, dtype=d) for d in casts_to]
    if dtype.is_float:
        results += [k.ew(op, a, b) for op in FLOAT_BINARY] + [k.ew(op, a) for op in FLOAT_UNARY]
        results.append(k.ew(TileOp.FMA, a, b, a))
    elif dtype.is_int:
        results += [k.ew(op, a, b) for op in INT_BINARY]
        results += [k.ew(op, a) for op in (TileOp.NEG, TileOp.INVERT, TileOp.ABS)]
        results += [k.ew(TileOp.TRUEDIV, a, b, dtype=f32), k.ew(TileOp.EXP, a, dtype=f32)]
        results.append(k.ew(TileOp.FMA, a, b, a))
    else:
        results += [k.ew(op, a, b) for op in (TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.ADD, TileOp.MUL)]
        results.append(k.ew(TileOp.INVERT, a))
    for r in results:
        out = k.param("ptr", r.type.dtype)
        k.op(SimtOp.STORE_GLOBAL, (out, offs, r), attrs=GlobalAttrs())
    return k.function()


@pytest.mark.parametrize("dtype", FLOATS + INTS + (b1,), ids=str)
def test_every_elementwise_op_assembles(dtype):
    fn = ops_kernel(dtype)
    for target in TARGETS:
        ptx, rep = ptx_and_report(fn, target)
        assert rep.spills == 0


def test_float8_casts_need_sm90():
    fp8 = (D.float8e4m3, D.float8e5m2)
    fn = ops_kernel(f32, casts_to=fp8)
    with pytest.raises(CompileError, match="sm_89"):
        codegen.compile_ptx(fn, "sm_80")
    ptx, rep = ptx_and_report(fn, "sm_90a")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rn.satfinite.e5m2x2.f32" in ptx
    for dtype in fp8:                                    # fp8 arithmetic goes through f32
        assert ptx_and_report(ops_kernel(dtype, casts_to=(f32, i32)), "sm_90a")[1].spills == 0


def one_op(tile_op, dtype, out=None, nargs=2):
    k = Kernel("one")
    src = k.param("ptr", dtype)
    xs = [k.op(SimtOp.LOAD_GLOBAL, (src, k.const(i32, i)), RegType(dtype), GlobalAttrs()) for i in range(nargs)]
    r = k.ew(tile_op, *xs, dtype=out)
    k.op(SimtOp.STORE_GLOBAL, (k.param("ptr", r.type.dtype), k.const(i32, 0), r), attrs=GlobalAttrs())
    fn = k.function()
    return codegen.emit_llvm(fn, "sm_90a"), codegen.compile_ptx(fn, "sm_90a")


@pytest.mark.parametrize("tile_op,dtype,out,nargs,in_llvm,not_in_llvm,in_ptx", [
    (TileOp.FLOORDIV, i32, None, 2, ["sdiv", "srem", "xor"], ["udiv"], []),     # floor, not trunc
    (TileOp.MOD, D.uint32, None, 2, ["urem"], ["srem"], []),
    (TileOp.SHL, i32, None, 2, ["icmp uge", "shl"], [], []),                    # >= 32 gives 0
    (TileOp.SHR, i32, None, 2, ["ashr"], ["lshr"], []),
    (TileOp.SHR, D.uint8, None, 2, ["lshr"], ["ashr"], []),
    (TileOp.NE, f32, b1, 2, ["fcmp une"], [], []),                              # nan != x
    (TileOp.LT, f32, b1, 2, ["fcmp olt"], [], []),
    (TileOp.LT, D.uint32, b1, 2, ["icmp ult"], [], []),
    (TileOp.MAXIMUM, f32, None, 2, ["llvm.maximum.f32"], [], ["max.NaN.f32"]),
    (TileOp.MINIMUM, D.bfloat16, None, 2, ["llvm.minimum.f32", "fpext bfloat"], [], ["min.NaN."]),
    (TileOp.CAST, f32, i32, 1, ["fptosi", "select"], [], ["cvt.rzi.s32.f32"]),  # toward zero
    (TileOp.CAST, D.uint32, f32, 1, ["uitofp"], [], []),
    (TileOp.CAST, f32, b1, 1, ["fcmp une"], [], []),                            # nan -> True
    (TileOp.CAST, f32, D.bfloat16, 1, ["fptrunc float"], [], ["cvt.rn.bf16.f32"]),
    (TileOp.TRUEDIV, f32, None, 2, ["llvm.nvvm.rcp.approx.ftz.d", "llvm.fma.f64"], ["fdiv float"],  # one register:
     ["rcp.approx.ftz.f64", "cvt.rn.f32.f64"]),                                               # inline, no call
    (TileOp.SQRT, f32, None, 1, ["llvm.sqrt.f32"], [], ["sqrt.rn.f32"]),
    (TileOp.SIN, f32, None, 1, ["llvm.rint.f64", "mul i128"], ["sin.approx"], ["fma.rn.f64"]),   # accurate,
    (TileOp.COS, f32, None, 1, ["llvm.rint.f64", "mul i128"], ["cos.approx"], ["fma.rn.f64"]),   # full range
    (TileOp.RSQRT, f32, None, 1, [], [], ["rsqrt.approx.f32"]),
    (TileOp.FMA, f32, None, 3, ["llvm.fma.f32"], [], ["fma.rn.f32"]),
    (TileOp.INVERT, b1, None, 1, ["xor i1"], [], []),
    (TileOp.FLOORDIV, f32, None, 2, ["llvm.fma.f64", "llvm.trunc.f64", "llvm.floor.f32"], ["frem"], []),
])
def test_semantics_in_ir_shape(tile_op, dtype, out, nargs, in_llvm, not_in_llvm, in_ptx):
    text, ptx = one_op(tile_op, dtype, out, nargs)
    for s in in_llvm:
        assert s in text
    for s in not_in_llvm:
        assert s not in text
    for s in in_ptx:
        assert s in ptx


def test_kernel_abi_and_constants():
    k = Kernel("abi.kernel-1", num_warps=8)
    params = [k.param("ptr", f32), k.param("dim", i32, 0), k.param("stride", i64, 0),
              k.param("scalar", b1), k.param("scalar", D.float16), k.param("scalar", D.bfloat16)]
    consts = k.const(f32, float("inf"), float("-inf"), float("nan"), -0.0)
    k.op(SimtOp.STORE_GLOBAL, (params[0], k.const(i32, 0, 1, 2, 3), consts), attrs=GlobalAttrs(vec=4))
    geometry = [k.op(SimtOp.BLOCK_ID, (), RegType(i32), AxisAttrs(1)), k.op(SimtOp.GRID_DIM, (), RegType(i32), AxisAttrs(2))]
    k.op(SimtOp.STORE_GLOBAL, (params[0], k.const(i32, 4), k.ew(TileOp.CAST, k.ew(TileOp.ADD, *geometry), dtype=f32)),
         attrs=GlobalAttrs())
    bf = k.const(D.bfloat16, 1.0)
    k.op(SimtOp.STORE_GLOBAL, (params[0], k.const(i32, 0), k.ew(TileOp.CAST, bf, dtype=f32)), attrs=GlobalAttrs())
    fn = k.function()
    text = codegen.emit_llvm(fn)
    assert "0x7ff0000000000000" in text and "0xfff0000000000000" in text and "0x7ff8000000000000" in text
    assert "0xR3F80" in text
    ptx = codegen.compile_ptx(fn)
    assert ".visible .entry abi_kernel_1(" in ptx and ".maxntid 256" in ptx
    assert "%ctaid.y" in ptx and "%nctaid.z" in ptx
    assert "%ctaid.y" in codegen.compile_ptx(fn, opt_level=0)          # unoptimised for debugging
    from tilejit.codegen import llvm as codegen_llvm                  # the IR's level is a switch
    saved, codegen_llvm.IR_OPT = codegen_llvm.IR_OPT, 0
    try:
        assert codegen.compile_ptx(fn) == codegen.compile_ptx(fn, opt_level=0) != ptx
    finally:
        codegen_llvm.IR_OPT = saved
    for kind in (".u64 .ptr .global", ".u32", ".u64", ".u8", ".align 2 .b8"):
        assert kind in ptx
    from tilejit.runtime.packing import param_format        # the runtime packs by this table
    assert [param_format(p) for p in fn.meta.params] == ["Q", "i", "q", "?", "e", "H"]
    assert [str(codegen.param_llvm_type(p)) for p in fn.meta.params] == \
        ["ptr addrspace(1)", "i32", "i64", "i8", "half", "bfloat"]


def test_unsupported_op_is_a_compile_error():
    k = Kernel("bad")
    k.op(TileOp.DOT, (), RegType(f32))
    with pytest.raises(CompileError, match="does not support SIMT op DOT"):
        codegen.emit_llvm(k.function())
    with pytest.raises(CompileError, match="not defined for float32"):
        one_op(TileOp.SHL, f32)


def test_target_machines_are_cached_and_checked():
    assert codegen.target_machine("sm_80") is codegen.target_machine("sm_80")
    with pytest.raises(ValueError, match="unknown target"):
        codegen.target_machine("sm_70")
    llvm.parse_assembly(codegen.emit_llvm(exp_kernel(), "sm_80")).verify()


# ------------------------------------------------------------------- the math, run on the host CPU
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -3.0, 1e-3, 1e30, -1e30, 1e-40, np.inf, -np.inf,
                    np.nan], np.float32)
RNG = np.random.default_rng(0)
WIDE = np.concatenate([RNG.uniform(-30, 30, 300), np.exp(RNG.uniform(-80, 80, 300)), SPECIAL]).astype(np.float32)
# halves (ties go to even in ROUND), values just off integers, past 2**23 (already integers)
ROUNDING = np.concatenate([np.arange(-5, 5.5, 0.5), RNG.uniform(-1e4, 1e4, 200), [0.49999997, -0.49999997,
                           8388607.5, 8388609.0, -8388609.0, 3e9], WIDE]).astype(np.float32)


@pytest.mark.parametrize("tile_op,ref,domain,rtol,atol", [
    (TileOp.EXP, np.exp, WIDE, 5e-7, 0.0),
    (TileOp.EXP2, np.exp2, WIDE, 3e-7, 0.0),
    (TileOp.LOG, np.log, np.abs(WIDE), 3e-7, 0.0),
    (TileOp.LOG, np.log, np.float32(1) + RNG.uniform(-1e-3, 1e-3, 200).astype(np.float32), 3e-7, 0.0),
    (TileOp.LOG2, np.log2, np.abs(WIDE), 3e-7, 0.0),
    (TileOp.SIN, np.sin, RNG.uniform(-100, 100, 500).astype(np.float32), 0.0, 1e-6),
    (TileOp.COS, np.cos, RNG.uniform(-100, 100, 500).astype(np.float32), 0.0, 1e-6),
    (TileOp.TANH, np.tanh, np.concatenate([RNG.uniform(-3, 3, 500), SPECIAL]).astype(np.float32), 4e-7, 0.0),
    (TileOp.SIGMOID, lambda x: 1 / (1 + np.exp(-x)), WIDE, 5e-7, 0.0),
    (TileOp.ERF, np.frompyfunc(math.erf, 1, 1), np.concatenate([RNG.uniform(-5, 5, 500), SPECIAL]).astype(np.float32),
     1.2e-7, 0.0),
    (TileOp.SQRT, np.sqrt, np.abs(WIDE), 0.0, 0.0),
    (TileOp.RSQRT, lambda x: 1 / np.sqrt(x), np.abs(WIDE), 2e-7, 0.0),
    *[(op, ref, ROUNDING, 0.0, 0.0) for op, ref in [(TileOp.FLOOR, np.floor), (TileOp.CEIL, np.ceil),
                                                    (TileOp.TRUNC, np.trunc), (TileOp.ROUND, np.rint)]],
])
def test_float_math_matches_numpy_on_host(tile_op, ref, domain, rtol, atol):
    with np.errstate(all="ignore"):
        want = ref(domain.astype(np.float64))
        got = host_eval(tile_op, f32, domain)
        want = want.astype(np.float32).astype(np.float64)      # what float32 can represent
    np.testing.assert_allclose(got, want, rtol=max(rtol, 1e-7), atol=max(atol, 1e-37), equal_nan=True)


def _pairs(values):
    a, b = np.meshgrid(values, values)
    return a.ravel(), b.ravel()


@pytest.mark.parametrize("tile_op,ref", [(TileOp.FLOORDIV, np.floor_divide), (TileOp.MOD, np.remainder),
                                         (TileOp.MAXIMUM, np.maximum), (TileOp.MINIMUM, np.minimum),
                                         (TileOp.NE, np.not_equal), (TileOp.LT, np.less)])
def test_float_binary_matches_numpy_on_host(tile_op, ref):
    a, b = _pairs(np.concatenate([SPECIAL, np.float32([0.1, -0.7, 5.5, 7.0, -2.0])]))
    with np.errstate(all="ignore"):
        want = ref(a, b)
    out = b1 if want.dtype == np.bool_ else None
    np.testing.assert_array_equal(host_eval(tile_op, f32, a, b, out=out), want)


@pytest.mark.parametrize("dtype,low,high", [(f32, -103, 88), (D.float64, -744, 709)], ids=["float32", "float64"])
@pytest.mark.parametrize("tile_op,ref", [(TileOp.FLOORDIV, np.floor_divide), (TileOp.MOD, np.remainder)])
def test_float_divmod_is_numpys_to_the_bit_across_the_range(dtype, low, high, tile_op, ref):
    """The remainder is exact (a loop of truncated quotients below 2**52 and FMAs, not frem's
    x - trunc(x / y) * y), and the quotient is computed in the operands' own precision, so both
    are NumPy's bit for bit: subnormals, 3e38 % 1e-45, 1e300 % 1e-300, zeros, inf and NaN."""
    rng = np.random.default_rng(5)
    info = np.finfo(dtype.np)
    special = [0.0, -0.0, 1.0, -1.5, 0.1, float(info.max), float(info.tiny), float(info.smallest_subnormal),
               -float(info.smallest_subnormal) * 3, np.inf, -np.inf, np.nan]
    values = np.concatenate([special, np.exp(rng.uniform(low, high, 100)) * rng.choice([-1.0, 1.0], 100)])
    a, b = _pairs(values.astype(dtype.np))
    with np.errstate(all="ignore"):
        want = ref(a, b)
    got = host_eval(tile_op, dtype, a, b)
    bits = np.int32 if dtype == f32 else np.int64
    same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (a[~same][:4], b[~same][:4], got[~same][:4], want[~same][:4])


def test_float_pow_on_host():
    a, b = _pairs(np.float32([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -3.5, np.inf, -np.inf, np.nan]))
    with np.errstate(all="ignore"):
        want = np.power(a, b)
    np.testing.assert_allclose(host_eval(TileOp.POW, f32, a, b), want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", (D.int8, i32, i64, D.uint8, D.uint16, D.uint32, D.uint64), ids=str)
@pytest.mark.parametrize("tile_op,ref", [(TileOp.FLOORDIV, np.floor_divide), (TileOp.MOD, np.remainder),
                                         (TileOp.SHL, np.left_shift), (TileOp.SHR, np.right_shift),
                                         (TileOp.MAXIMUM, np.maximum), (TileOp.LT, np.less)])
def test_integer_semantics_on_host(dtype, tile_op, ref):
    info = np.iinfo(dtype.np)
    values = [0, 1, 2, 3, 7, dtype.bits - 1, dtype.bits, dtype.bits + 3, info.max, info.min, info.max // 3]
    if dtype.kind == "i":
        values += [-1, -2, -7, info.min + 1]
    a, b = _pairs(np.array(sorted(set(values)), dtype.np))
    if tile_op in (TileOp.SHL, TileOp.SHR):
        b = b.astype(np.uint64) % (dtype.bits + 8)                  # NumPy's shifts by >= bits
        b = b.astype(dtype.np)
    with np.errstate(all="ignore"):
        want = ref(a, b)
    out = b1 if want.dtype == np.bool_ else None
    np.testing.assert_array_equal(host_eval(tile_op, dtype, a, b, out=out), want.astype(want.dtype))


def test_integer_pow_on_host():
    a, b = _pairs(np.array([0, 1, 2, 3, -2, -3, 10], np.int32))
    b = np.abs(b)
    np.testing.assert_array_equal(host_eval(TileOp.POW, i32, a, b), np.power(a, b))


@pytest.mark.parametrize("dst", (i32, D.int8, D.uint8, D.uint32, i64, b1), ids=str)   # x86 lacks f16 libcalls
def test_casts_from_float32_on_host(dst):
    x = np.concatenate([SPECIAL, np.float32([300.7, -129.5, 2.5, -2.5, 4e9, -3e9, 65504.0, 7e4])])
    if dst.kind == "u":      # out of range is undefined in C; NumPy's answer varies by platform
        x = x[(x > -2.0 ** 31) & (x < 2.0 ** dst.bits)]
    with np.errstate(all="ignore"):
        want = x.astype(dst.np)
    got = host_eval(TileOp.CAST, f32, x, out=dst)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# ----------------------------------------------------- agreement with the interpreter's semantics
EXACT_FLOAT_OPS = {TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.TRUEDIV, TileOp.FLOORDIV, TileOp.MOD,
                   TileOp.MAXIMUM, TileOp.MINIMUM, TileOp.NEG, TileOp.ABS, TileOp.SQRT, TileOp.FMA}


def _sample(dtype, n=48):
    if dtype.is_bool:
        return RNG.integers(0, 2, n).astype(bool)
    if dtype.is_float:
        return np.concatenate([SPECIAL, RNG.standard_normal(n) * 10]).astype(np.float32)
    info = np.iinfo(dtype.np)
    edges = [v for v in (0, 1, -1, 2, -2, info.max, info.min, info.min + 1, info.max - 1) if info.min <= v <= info.max]
    small = RNG.integers(max(info.min, -20), 20, n // 2)
    wide = RNG.integers(info.min, info.max, n // 2, endpoint=True, dtype=dtype.np)
    return np.concatenate([np.array(edges, dtype.np), small.astype(dtype.np), wide]).astype(dtype.np)


def _interpreter_cases():
    for dtype in (D.int8, D.int16, i32, i64, D.uint8, D.uint16, D.uint32, D.uint64, f32, b1):
        ops = list(COMPARES) + [TileOp.CAST]
        if dtype.is_float:
            ops += list(FLOAT_BINARY) + list(FLOAT_UNARY) + [TileOp.FMA]
        elif dtype.is_int:
            ops += list(INT_BINARY) + [TileOp.NEG, TileOp.INVERT, TileOp.ABS, TileOp.FMA]
        else:
            ops += [TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.INVERT]
        yield from ((dtype, op) for op in ops)


@pytest.mark.parametrize("dtype,tile_op", list(_interpreter_cases()), ids=lambda x: str(getattr(x, "name", x)))
def test_agrees_with_the_interpreter(dtype, tile_op):
    """The cuda backend's elementwise math gives what the interpret/emulate backends give."""
    from tilejit.backends.interpret import elementwise_fn
    nargs = 3 if tile_op == TileOp.FMA else 1 if tile_op in FLOAT_UNARY + (TileOp.INVERT, TileOp.CAST) else 2
    a = _sample(dtype)
    args = [a] + [RNG.permutation(a) for _ in range(nargs - 1)]
    if tile_op == TileOp.POW and dtype.is_int:
        args[1] = (args[1] % 9).astype(dtype.np) - (1 if dtype.kind == "i" else 0)
    if tile_op in (TileOp.SHL, TileOp.SHR):
        args[1] = (args[1].astype(np.int64) % (dtype.bits + 8)).astype(dtype.np)
    targets = [d for d in (D.int8, i32, i64, D.uint8, D.uint16, D.uint32, D.uint64, f32, b1)] if tile_op == TileOp.CAST else \
        [b1 if tile_op in COMPARES else dtype]
    for out in targets:
        if tile_op == TileOp.CAST and dtype.is_float and out.kind == "u":   # C leaves it undefined
            args = [a[(a > -2.0 ** 31) & (a < 2.0 ** out.bits)]]
        with np.errstate(all="ignore"):
            want = np.asarray(elementwise_fn(tile_op, out, [dtype] * nargs)(*args))
        got = host_eval(tile_op, dtype, *args, out=out)
        if out.is_float and tile_op not in EXACT_FLOAT_OPS and tile_op != TileOp.CAST:
            rtol = 5e-6 if tile_op == TileOp.POW else 5e-7     # pow: ~1e-7 * |log2(result)|
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6 if tile_op in (TileOp.SIN, TileOp.COS) else 0,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{tile_op.name} {dtype} -> {out}")


def test_rounding_ops_lower_to_one_cvt_each():
    """tj.floor / ceil / trunc / round become cvt.rmi / rpi / rzi / rni.f32.f32 (exact, no call),
    for float32 and, computed in float32, for bfloat16."""
    import tilejit as tj

    @tj.kernel
    def rounding(x, y, BLOCK: tj.constexpr):
        t = tj.load(x, (0,), (BLOCK,))
        tj.store(y, (0,), tj.floor(t) + tj.ceil(t) * 2 + tj.trunc(t) * 3 + tj.round(t) * 5)

    for dt in (np.float32, tj.bfloat16.np):
        x = np.zeros(64, dt)
        specs, consts, _ = rounding.specialise(rounding.bind((x, x), {"BLOCK": 64}))
        fn = pipeline_simt(rounding.tile_ir(specs, consts))
        ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
        assert {m for m in re.findall(r"cvt\.r[mpzn]i\.f32\.f32", ptx)} == \
            {"cvt.rmi.f32.f32", "cvt.rpi.f32.f32", "cvt.rzi.f32.f32", "cvt.rni.f32.f32"}
        assert "call" not in ptx


def pipeline_simt(tile_fn):
    from tilejit.passes.pipeline import compile_to_simt
    return compile_to_simt(tile_fn, num_warps=2)


def test_shared_memory_is_addressed_with_32_bit_registers():
    """``--nvptx-short-ptr``: a shared address is one 32-bit register (no ``cvt.u64.u32`` and
    64-bit add before each access, two registers per address held across a loop)."""
    import sys
    from pathlib import Path
    import ml_dtypes
    from tilejit.passes.pipeline import compile_to_simt
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from layernorm import layernorm_kernel
    x, w = np.zeros((4, 8192), ml_dtypes.bfloat16), np.zeros(8192, ml_dtypes.bfloat16)
    specs, consts, _ = layernorm_kernel.specialise(layernorm_kernel.bind((x, w, w, x, 1e-5), {"BLOCK": 8192}))
    ptx = codegen.compile_ptx(compile_to_simt(layernorm_kernel.tile_ir(specs, consts), 16), "sm_90a")
    accesses = re.findall(r"(?:ld|st)\.shared\S*\s+[^;]*", ptx) + re.findall(r"cp\.async\.cg\.shared\.global \[[^\]]*\]", ptx)
    assert len(accesses) > 10
    assert not [a for a in accesses if "[%rd" in a]


def test_bfloat16_constants_round_as_ml_dtypes_does():
    """``codegen.base.bfloat16_bits`` (no ml_dtypes import on the compile path) against
    ml_dtypes on random float32 bit patterns (NaNs, infinities, subnormals and ties among them)."""
    import ml_dtypes
    from tilejit.codegen.base import bfloat16_bits
    rng = np.random.default_rng(7)
    bits = np.concatenate([rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x00008000, 0x3F808000, 0x3F818000,
                                     0x7F800001, 0xFFC12345, 0x80000000], np.uint32)])
    values = bits.view(np.float32)
    with np.errstate(invalid="ignore"):
        want = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = np.array([bfloat16_bits(v) for v in values], np.uint16)
    np.testing.assert_array_equal(got, want)
