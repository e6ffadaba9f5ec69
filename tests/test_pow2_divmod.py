"""Integer floor division and modulo by a constant power of two (``codegen.elementwise``'s
``_floor_divmod`` with ``POW2_DIVMOD``: a shift and a mask) against NumPy's ``//`` and ``%`` for
every sign, run on the host by LLVM's JIT, and the instructions the warp-specialised loop's
slot and phase then take."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from tilejit import dtypes as D
from tilejit.codegen import elementwise
from tilejit.codegen.base import Ctx
from tilejit.ir import TileOp

CASES = [(D.int32, np.int32, ir.IntType(32)), (D.uint32, np.uint32, ir.IntType(32)),
         (D.int64, np.int64, ir.IntType(64)), (D.int16, np.int16, ir.IntType(16)), (D.uint8, np.uint8, ir.IntType(8))]


def _run(dt, npt, ity, divisor, values):
    """q, r of ``values // divisor`` and ``% divisor`` as the codegen emits them, JIT-run."""
    mod, ptr = ir.Module("host"), ir.PointerType()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, ir.IntType(32)]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    b = ctx.builder
    loop, done = ctx.block("loop"), ctx.block("done")
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(ir.IntType(32))
    i.add_incoming(ir.Constant(ir.IntType(32), 0), entry)
    x = b.load(b.gep(fn.args[0], [i], source_etype=ity), typ=ity)
    d = ir.Constant(ity, divisor)
    q = elementwise.INT_BINARY[TileOp.FLOORDIV](ctx, x, d, dt)
    r = elementwise.INT_BINARY[TileOp.MOD](ctx, x, d, dt)
    b.store(q, b.gep(fn.args[1], [i], source_etype=ity))
    b.store(r, b.gep(fn.args[2], [i], source_etype=ity))
    nxt = b.add(i, ir.Constant(ir.IntType(32), 1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[3]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(str(mod))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        engine.get_function_address("f"))
    xs = np.ascontiguousarray(values, npt)
    qs, rs = np.zeros_like(xs), np.zeros_like(xs)
    cfn(xs.ctypes.data, qs.ctypes.data, rs.ctypes.data, len(xs))
    return xs, qs, rs, str(mod)


@pytest.mark.parametrize("on", [True, False])
@pytest.mark.parametrize("dt, npt, ity", CASES, ids=[c[0].name for c in CASES])
def test_floor_divmod_by_powers_of_two_match_numpy(dt, npt, ity, on, monkeypatch):
    monkeypatch.setattr(elementwise, "POW2_DIVMOD", on)
    info = np.iinfo(npt)
    rng = np.random.default_rng(0)
    for s in range(0, min(info.bits - 1, 12)):
        divisor = 1 << s
        values = np.concatenate([rng.integers(info.min, info.max, 200, dtype=npt, endpoint=True),
                                 np.array([info.min, info.min + 1, -1 if info.min else 0, 0, 1, info.max,
                                           divisor - 1, divisor] + ([-divisor, -divisor - 1] if info.min else []), npt)])
        xs, qs, rs, text = _run(dt, npt, ity, divisor, values)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(qs, xs // npt(divisor))
            np.testing.assert_array_equal(rs, xs % npt(divisor))
        general = " sdiv " in text or " udiv " in text
        assert general == (not on and s > 0) or (not on and s == 0)


def test_the_slot_and_phase_of_a_warp_specialised_loop_are_a_shift_and_masks(monkeypatch):
    """The fp8 blockwise GEMM (4 ring slots, K tiles of 128): its trips, slots, phases and scale
    blocks (``k // 128``) become shifts and ``and``s; only the divisions by the grid's extents
    (program order) stay divisions in the LLVM IR."""
    from tilejit.codegen.llvm import emit_llvm
    from tilejit.examples import fp8_blockwise_gemm as ex
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.specs import ArraySpec
    f8, f32 = ArraySpec(D.float8e4m3, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    tile = ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(D.bfloat16, 2, True, True, False)),
                                                  {"BM": 128, "BN": 128, "BK": 128, "B_NK": True})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    divisions = {}
    for on in (True, False):
        monkeypatch.setattr(elementwise, "POW2_DIVMOD", on)
        divisions[on] = emit_llvm(fn, "sm_90a").count(" = sdiv i32 ")
    assert 0 < divisions[True] <= 4 < 16 <= divisions[False]
