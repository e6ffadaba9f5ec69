"""Run codegen's elementwise LLVM on the host CPU (MCJIT), for CPU-only tests of the GPU math.

``host_eval(TileOp.EXP, float32, x)`` emits ``out[i] = exp(x[i])`` with exactly the LLVM that
``codegen.elementwise.elementwise`` gives the GPU, swaps the NVVM approximate instructions for the
exact operations they approximate (their own error is PTX's, ~2**-22), JIT-compiles it for the
host and runs it on NumPy arrays.  This checks range reductions, polynomials, special values
and integer semantics against NumPy without a GPU.  float16/bfloat16/float8 are not
supported here (the host lacks their conversion routines); those dtypes only add a
conversion around the float32 math.
"""
from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from tilejit.codegen.base import I64, Ctx, mem_type
from tilejit.codegen.elementwise import elementwise
from tilejit.codegen.memory import to_mem, to_reg
from tilejit.dtypes import DType
from tilejit.ir import TileOp

HOST_APPROX = {   # NVVM approximation -> the exact operation it stands for (x in, r out)
    "llvm.nvvm.ex2.approx.ftz.f": "%r = call float @llvm.exp2.f32(float %x)",
    "llvm.nvvm.sin.approx.f": "%r = call float @llvm.sin.f32(float %x)",
    "llvm.nvvm.cos.approx.f": "%r = call float @llvm.cos.f32(float %x)",
    "llvm.nvvm.rsqrt.approx.f": "%s = call float @llvm.sqrt.f32(float %x)\n  %r = fdiv float 1.0, %s",
    "llvm.nvvm.div.full": ("float %x, float %y", "%r = fdiv float %x, %y"),
    # MUFU.RCP64H's estimate is good to about 2**-22: keep 22 bits of the exact reciprocal, so
    # the refinement that follows it (``Ctx.ieee_div_f32``) is tested as the GPU runs it
    # MUFU.RCP's is good to about 2**-23: keep 22 bits (``Ctx.fast_div_f32`` must cope with less)
    "llvm.nvvm.rcp.approx.ftz.f": ("float %x", "%e = fdiv float 1.0, %x\n  %i = bitcast float %e to i32\n"
                                   "  %m = and i32 %i, -2\n  %r = bitcast i32 %m to float"),
    "llvm.nvvm.rcp.approx.ftz.d": ("double %x", "%e = fdiv double 1.0, %x\n  %i = bitcast double %e to i64\n"
                                   "  %m = and i64 %i, -1073741824\n  %r = bitcast i64 %m to double", "double"),
}


def _host_loop_module(tile_op: TileOp, in_dtypes: list[DType], out: DType, inline_division: bool = False) -> str:
    """``void f(out*, in0*, ..., i64 n)``: out[i] = op(in0[i], ...), emitted by codegen.elementwise."""
    nargs = len(in_dtypes)
    mod, ptr = ir.Module("host"), ir.PointerType()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr] * (1 + nargs) + [I64]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    ctx.inline_division = inline_division
    b, entry = ctx.builder, ctx.builder.block
    head, body, done = ctx.block("head"), ctx.block("body"), ctx.block("done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    b.cbranch(b.icmp_signed("<", i, fn.args[-1]), body, done)
    b.position_at_end(body)
    args = [to_reg(ctx, b.load(b.gep(p, [i], source_etype=mem_type(dt)), typ=mem_type(dt)), dt)
            for p, dt in zip(fn.args[1:-1], in_dtypes)]
    r = elementwise(ctx, tile_op, args, list(in_dtypes), out)
    b.store(to_mem(ctx, r, out), b.gep(fn.args[0], [i], source_etype=mem_type(out)))
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(b.add(i, ir.Constant(I64, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    text = str(mod)
    for k, (name, exact) in enumerate(HOST_APPROX.items()):
        params, exact, ret = (exact + ("float",))[:3] if isinstance(exact, tuple) else ("float %x", exact, "float")
        text = re.sub(rf'declare {ret} @"{re.escape(name)}"\(.*\)\n', "", text)
        text = text.replace(f'@"{name}"', f'@"host{k}"')
        text += f'\ndefine internal {ret} @"host{k}"({params}) {{\n  {exact}\n  ret {ret} %r\n}}\n'
    return text


def host_eval(tile_op: TileOp, in_dtype, *arrays, out: DType | None = None, inline_division: bool = False) -> np.ndarray:
    """NumPy arrays in, the codegen's answer for ``tile_op`` computed on the host out.
    ``in_dtype`` is one DType for every operand, or a list of one per operand (``where``'s
    bool condition, a comparison or cast between dtypes).  ``inline_division``: float32 division as
    codegen emits it for one-register ops (``Ctx.ieee_div_f32``)."""
    in_dtypes = list(in_dtype) if isinstance(in_dtype, (list, tuple)) else [in_dtype] * len(arrays)
    out = out or in_dtypes[-1]
    if any(d.is_float and d.bits < 32 for d in (*in_dtypes, out)):
        raise ValueError(f"host_eval runs float32/int/bool only, not {in_dtypes} -> {out}")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_host_loop_module(tile_op, in_dtypes, out, inline_division))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()          # the engine owns the code: it lives until we return
    cfn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (1 + len(arrays)), ctypes.c_int64)(
        engine.get_function_address("f"))
    ins = [np.ascontiguousarray(a, dtype=dt.np) for a, dt in zip(arrays, in_dtypes)]
    res = np.zeros(len(ins[0]), out.np)
    cfn(res.ctypes.data, *[a.ctypes.data for a in ins], len(res))
    return res
