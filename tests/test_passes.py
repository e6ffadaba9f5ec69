"""Tile-IR passes on IR text (canonicalise, DCE), the pipeline, and the SIMT-level passes."""
import re

import pytest

from tilejit.abi import ParamKind
import tilejit as tj
from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import AxisAttrs, ConstAttrs, LoadAttrs, TileOp, TileType, scalar
from tilejit.passes import pipeline
from tilejit.passes.canonicalize import canonicalize
from tilejit.passes.dce import dce
from tilejit.passes.pipeline import PIPELINE, compile_to_simt
from tilejit.specs import ArraySpec, ScalarSpec
from tilejit.simt import SimtOp

F32, I32 = D.float32, D.int32


class Kernel:
    """A tile function under construction with ir.Builder."""

    def __init__(self, *arg_types, specs=None):
        self.block = ir.Block([ir.Value(t) for t in arg_types])
        self.b = ir.Builder(self.block)
        self.args = self.block.args
        self.specs = specs or [ArraySpec(t.dtype, t.rank) if isinstance(t, ir.ArrayType) else ScalarSpec(t.dtype)
                               for t in arg_types]

    def op(self, op, operands, rtype=None, attrs=None):
        o = self.b.create(op, operands, [rtype] if rtype else [], attrs)
        return o.result if rtype else o

    def const(self, value, t):
        return self.op(TileOp.CONSTANT, [], t, ConstAttrs(value))

    def fn(self, name="k"):
        return ir.Function(name, self.block, [f"a{i}" for i in range(len(self.args))], {"specs": self.specs})


def text(fn):
    return ir.print_function(fn)


# ------------------------------------------------------------------------------ canonicalize
def test_mul_by_one_add_zero_and_same_type_casts_disappear():
    k = Kernel(scalar(I32))
    x = k.args[0]
    y = k.op(TileOp.MUL, [x, k.const(1, scalar(I32))], scalar(I32))
    y = k.op(TileOp.ADD, [k.const(0, scalar(I32)), y], scalar(I32))
    y = k.op(TileOp.CAST, [y], scalar(I32))
    k.op(TileOp.YIELD, [y])
    out = text(dce(canonicalize(k.fn())))
    assert out == "func @k(%0: int32) {\n  yield %0\n}"


def test_float_plus_zero_is_kept_but_plus_negative_zero_folds():
    k = Kernel(scalar(F32))
    x = k.args[0]
    a = k.op(TileOp.ADD, [x, k.const(0.0, scalar(F32))], scalar(F32))     # -0.0 + 0.0 = +0.0
    b = k.op(TileOp.ADD, [x, k.const(-0.0, scalar(F32))], scalar(F32))    # x + -0.0 = x exactly
    k.op(TileOp.YIELD, [a, b])
    out = text(dce(canonicalize(k.fn())))
    assert "add %0, %1" in out and out.endswith("yield %2, %0\n}")


def test_constant_arithmetic_folds():
    k = Kernel()
    two, three = k.const(2, scalar(I32)), k.const(3, scalar(I32))
    s = k.op(TileOp.MUL, [k.op(TileOp.ADD, [two, three], scalar(I32)), three], scalar(I32))
    lt = k.op(TileOp.LT, [s, k.const(16, scalar(I32))], scalar(D.bool_))
    f = k.op(TileOp.CAST, [s], scalar(F32))
    k.op(TileOp.YIELD, [s, lt, f])
    out = text(dce(canonicalize(k.fn())))
    assert "{value=15}" in out and "{value=True}" in out and "{value=15.0}" in out
    assert "add" not in out and "mul" not in out


def test_broadcast_reshape_and_identity_transpose_to_same_shape_disappear():
    t = TileType((4, 8), F32)
    k = Kernel(ir.ArrayType(F32, 2))
    zero = k.const(0, scalar(I32))
    x = k.op(TileOp.LOAD, [k.args[0], zero, zero], t, LoadAttrs(0.0))
    y = k.op(TileOp.BROADCAST, [x], t)
    y = k.op(TileOp.RESHAPE, [y], t)
    y = k.op(TileOp.TRANS, [y], t, ir.PermAttrs((0, 1)))
    k.op(TileOp.STORE, [k.args[0], zero, zero, y])
    out = text(canonicalize(k.fn()))
    assert "broadcast" not in out and "reshape" not in out and "trans" not in out
    assert "store %0, %1, %1, %2" in out


def test_splat_of_constant_becomes_constant_tile():
    k = Kernel()
    s = k.op(TileOp.SPLAT, [k.const(2.5, scalar(F32))], TileType((16,), F32))
    k.op(TileOp.YIELD, [s])
    out = text(dce(canonicalize(k.fn())))
    assert out == "func @k() {\n  %0 = constant {value=2.5} : tile<16xfloat32>\n  yield %0\n}"


# -------------------------------------------------------------------------------------- DCE
def test_dce_keeps_stores_and_loops_with_stores_and_drops_the_rest():
    t = TileType((16,), F32)
    k = Kernel(ir.ArrayType(F32, 1), scalar(I32))
    arr, n = k.args
    zero = k.const(0, scalar(I32))
    k.op(TileOp.LOAD, [arr, zero], t, LoadAttrs(0.0))                # unused load: dead
    k.op(TileOp.MUL, [n, n], scalar(I32))                              # dead
    one = k.const(1, scalar(I32))
    for has_store in (True, False):
        body = ir.Block([ir.Value(scalar(I32))])
        bb = ir.Builder(body)
        if has_store:
            v = bb.create(TileOp.LOAD, [arr, body.args[0]], [t], LoadAttrs(0.0)).result
            bb.create(TileOp.STORE, [arr, body.args[0], v])
        bb.create(TileOp.YIELD, [])
        k.b.create(TileOp.FOR, [zero, n, one], [], ir.ForAttrs(), [body])
    out = text(dce(k.fn()))
    assert out.count("for ") == 1 and out.count("load") == 1 and "mul" not in out
    assert "store" in out


# --------------------------------------------------------------------------------- pipeline
def softmax_ir(block=256, dtype=F32):
    """Softmax over rows of a (rows, cols) array, built by hand."""
    t = TileType((1, block), dtype)
    k = Kernel(ir.ArrayType(dtype, 2), ir.ArrayType(dtype, 2))
    x, y = k.args
    row = k.op(TileOp.PROGRAM_ID, [], scalar(I32), AxisAttrs(0))
    zero = k.const(0, scalar(I32))
    v = k.op(TileOp.LOAD, [x, row, zero], t, LoadAttrs(float("-inf")))
    m = k.op(TileOp.REDUCE, [v], TileType((1, 1), dtype), ir.ReduceAttrs(ir.ReduceKind.MAX, 1, True))
    e = k.op(TileOp.EXP, [k.op(TileOp.SUB, [v, k.op(TileOp.BROADCAST, [m], t)], t)], t)
    s = k.op(TileOp.REDUCE, [e], TileType((1, 1), dtype), ir.ReduceAttrs(ir.ReduceKind.SUM, 1, True))
    k.op(TileOp.STORE, [y, row, zero, k.op(TileOp.TRUEDIV, [e, k.op(TileOp.BROADCAST, [s], t)], t)])
    return k.fn("softmax")


def test_pipeline_is_one_ordered_list_and_every_stage_dumps():
    names = [s.name for s in PIPELINE]
    assert names == ["strip_asserts", "cluster_rows", "chunk_rows", "widen_offsets", "canonicalize", "fold_exp", "fold_scale", "fuse_fma", "dce", "sink_transposes", "uniform_masks", "hoist_loads", "prefetch_loads", "split_dot_loads", "swap_small_dots", "defer_products", "rotate_products", "plan_dots", "assign_layouts", "plan_loops", "plan_stores",
                     "lower_to_simt", "coarsen_programs", "persist_programs", "remat_indices", "plan_shared_memory", "insert_barriers", "specialise_warps",
                     "pack_programs"]
    seen = {}
    fn = softmax_ir()
    before = text(fn)
    compile_to_simt(fn, 4, dump=lambda name, txt: seen.setdefault(name, txt))
    assert list(seen) == ["input"] + names
    assert text(fn) == before, "the caller's tile IR must not change"
    assert "#blocked<1x256" in seen["assign_layouts"] and "#slice" in seen["assign_layouts"]
    assert "shuffle_xor" in seen["lower_to_simt"] and "barrier" in seen["insert_barriers"]


def test_debug_mode_verifies_between_passes(monkeypatch):
    calls = []
    monkeypatch.setattr(simt, "verify", lambda fn: calls.append(fn))
    compile_to_simt(softmax_ir(), 4)
    assert calls == []
    compile_to_simt(softmax_ir(), 4, verify=True)
    assert len(calls) == sum(s.level == "simt" for s in PIPELINE) == 8    # after each SIMT-level stage


def test_tilejit_debug_reaches_the_pipeline_through_the_launch_path(monkeypatch):
    from tilejit.backends import emulate
    from tilejit.kernel import verify_switch
    seen = []
    monkeypatch.setattr(emulate, "EmulatedKernel", lambda fn: seen.append(fn))
    import tilejit.passes.pipeline as pl
    real = pl.compile_to_simt
    monkeypatch.setattr(pl, "compile_to_simt", lambda *a, **kw: seen.append(kw.get("verify")) or real(*a, **kw))
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    assert verify_switch()

    @tj.kernel
    def double(x, y, B: tj.constexpr):
        tj.store(y, (0,), tj.load(x, (0,), (B,)) * 2)
    spec = ArraySpec(F32, 1)
    double.compile((spec, spec), {"B": 32}, 4, "emulate")
    assert seen[0] is True


def test_simt_verifier_rejects_mismatched_registers():
    fn = compile_to_simt(softmax_ir(), 4)
    simt.verify(fn)
    ew = next(o for o in fn.walk() if o.op is SimtOp.ELEMENTWISE and o.results[0].type.n > 1)
    ew.operands[0] = next(o for o in fn.walk() if o.op is SimtOp.THREAD_ID).result
    with pytest.raises(simt.SimtVerifyError):
        simt.verify(fn)


def test_softmax_simt_shape():
    fn = compile_to_simt(softmax_ir(1024), 4, persist=False)
    ops = [o.op for o in fn.walk()]
    loads = [o for o in fn.walk() if o.op is SimtOp.LOAD_GLOBAL]
    stores = [o for o in fn.walk() if o.op is SimtOp.STORE_GLOBAL]
    assert [o.attrs.vec for o in loads] == [4] and [o.attrs.vec for o in stores] == [4]
    assert ops.count(SimtOp.SHUFFLE_XOR) == 10            # 5 butterfly steps per reduction
    assert ops.count(SimtOp.BARRIER) == 2                 # one per cross-warp reduction
    assert ops.count(SimtOp.SHARED_ALLOC) == 0            # planned away
    assert fn.meta.shared_bytes == 32 and fn.meta.writes == [1]
    kinds = [(p.kind.value, p.arg, p.axis) for p in fn.meta.params]
    assert kinds == [("ptr", 0, None), ("dim", 0, 0), ("dim", 0, 1), ("stride", 0, 0),
                     ("ptr", 1, None), ("dim", 1, 0), ("dim", 1, 1), ("stride", 1, 0)]


def test_non_unit_stride_and_large_arrays_change_params_and_index_width():
    k = softmax_ir()
    k.meta["specs"] = [ArraySpec(F32, 2, unit_inner_stride=False, large=True), ArraySpec(F32, 2)]
    fn = compile_to_simt(k, 4)
    strides = [(p.arg, p.axis, p.dtype) for p in fn.meta.params if p.kind is ParamKind.STRIDE]
    assert strides == [(0, 0, D.int64), (0, 1, D.int64), (1, 0, I32)]
    load, store = [o for o in fn.walk() if o.op in (SimtOp.LOAD_GLOBAL, SimtOp.STORE_GLOBAL)]
    assert load.operands[1].type.dtype == D.int64 and load.attrs.vec == 1
    assert store.operands[1].type.dtype == I32        # y is small: 32-bit index math


def test_offsets_not_known_aligned_give_scalar_accesses():
    t = TileType((128,), F32)
    k = Kernel(ir.ArrayType(F32, 1), scalar(I32))
    x, off = k.args
    v = k.op(TileOp.LOAD, [x, off], t, LoadAttrs(0.0))
    k.op(TileOp.STORE, [x, off, v])
    fn = compile_to_simt(k.fn(), 4)
    assert {o.attrs.vec for o in fn.walk() if o.op in (SimtOp.LOAD_GLOBAL, SimtOp.STORE_GLOBAL)} == {1}


def test_shared_buffers_with_disjoint_lifetimes_share_bytes():
    def transpose_twice(x, y, B: tj.constexpr):
        t = tj.load(x, (0, 0), (B, B))
        tj.store(y, (0, 0), t.T)
        tj.store(x, (0, 0), (t * 2).T)
    from tilejit.frontend import compile_tile_ir
    specs = [ArraySpec(F32, 2), ArraySpec(F32, 2)]
    fn = compile_to_simt(compile_tile_ir(transpose_twice, specs, {"B": 32}), 4)
    buffers = fn.meta.shared_buffers
    assert len(buffers) == 2 and {off for off, _ in buffers.values()} == {0}
    assert fn.meta.shared_bytes == 32 * 32 * 4
    # store A, barrier, load A, barrier (reuse), store B, barrier, load B
    assert [o.op for o in fn.walk()].count(SimtOp.BARRIER) == 3


def test_stage_text_of_simt_mentions_meta():
    out = pipeline.stage_text(compile_to_simt(softmax_ir(), 2), "simt")
    assert re.search(r"num_warps=2 shared_bytes=\d+ writes=\[1\] barriers=\d+", out)
