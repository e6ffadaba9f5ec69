"""Verifier: hand-built tile IR that must be accepted or rejected."""
import pytest

from tilejit import dtypes
from tilejit.ir import (ArrayType, AxisAttrs, Block, Builder, ConstAttrs, DotAttrs, ForAttrs, Function,
                        LoadAttrs, PermAttrs, ReduceAttrs, ReduceKind, TileOp, TileType, Value)
from tilejit.verifier import VerifyError, verify

F32, F16, I32, BOOL = dtypes.float32, dtypes.float16, dtypes.int32, dtypes.bool_


def T(*shape, dt=F32):
    return TileType(tuple(shape), dt)


def kernel(build) -> Function:
    """A function with args (x: array<2xf32>, n: i32) whose body ``build(b, x, n)`` fills."""
    x, n = Value(ArrayType(F32, 2), "x"), Value(T(dt=I32), "n")
    body = Block([x, n])
    build(Builder(body), x, n)
    return Function("k", body, ["x", "n"])


def const(b, value, t):
    return b.create(TileOp.CONSTANT, (), [t], ConstAttrs(value)).result


def load_store(b, x, n):
    zero = const(b, 0, T(dt=I32))
    t = b.create(TileOp.LOAD, [x, n, zero], [T(4, 8)], LoadAttrs(0.0)).result
    s = b.create(TileOp.REDUCE, [t], [T(4, 1)], ReduceAttrs(ReduceKind.MAX, 1, True)).result
    s = b.create(TileOp.BROADCAST, [s], [T(4, 8)]).result
    u = b.create(TileOp.SUB, [t, s], [T(4, 8)]).result
    b.create(TileOp.STORE, [x, n, zero, b.create(TileOp.EXP, [u], [T(4, 8)]).result])


def for_loop(b, x, n, yield_type=T(4, 8), arg_type=T(4, 8)):
    zero, one = const(b, 0, T(dt=I32)), const(b, 1, T(dt=I32))
    init = const(b, 0.0, T(4, 8))
    iv, acc = Value(T(dt=I32)), Value(arg_type)
    region = Block([iv, acc])
    rb = Builder(region)
    nxt = rb.create(TileOp.ADD, [acc, acc], [arg_type]).result
    if yield_type != arg_type:
        nxt = rb.create(TileOp.CAST, [nxt], [yield_type]).result
    rb.create(TileOp.YIELD, [nxt])
    out = b.create(TileOp.FOR, [zero, n, one, init], [T(4, 8)], ForAttrs(), [region]).result
    b.create(TileOp.STORE, [x, zero, zero, out])


def if_op(b, x, n, else_type=T(dt=I32)):
    c = b.create(TileOp.GT, [n, const(b, 0, T(dt=I32))], [T(dt=BOOL)]).result
    then, other = Block(), Block()
    Builder(then).create(TileOp.YIELD, [const(Builder(then), 1, T(dt=I32))])
    Builder(other).create(TileOp.YIELD, [const(Builder(other), 2, else_type)])
    b.create(TileOp.IF, [c], [T(dt=I32)], regions=[then, other])


def while_op(b, x, n, cond_type=T(dt=BOOL)):
    v = Value(T(dt=I32))
    region = Block([v])
    rb = Builder(region)
    nxt = rb.create(TileOp.SUB, [v, const(rb, 1, T(dt=I32))], [T(dt=I32)]).result
    c = rb.create(TileOp.GT, [nxt, const(rb, 0, T(dt=I32))], [T(dt=BOOL)]).result
    if cond_type != T(dt=BOOL):
        c = nxt
    rb.create(TileOp.YIELD, [c, nxt])
    b.create(TileOp.WHILE, [n], [T(dt=I32)], regions=[region])


@pytest.mark.parametrize("build", [load_store, for_loop, if_op, while_op])
def test_accepts_well_formed_ir(build):
    verify(kernel(build))


def _bad_add(b, x, n):
    b.create(TileOp.ADD, [const(b, 0.0, T(4)), const(b, 0.0, T(8))], [T(4)])


def _bad_dtype(b, x, n):
    b.create(TileOp.MUL, [const(b, 0.0, T(4)), const(b, 0, T(4, dt=I32))], [T(4)])


def _use_before_def(b, x, n):
    later = Value(T(4))
    b.create(TileOp.NEG, [later], [T(4)])


def _region_value_escapes(b, x, n):
    zero, one = const(b, 0, T(dt=I32)), const(b, 1, T(dt=I32))
    region = Block([Value(T(dt=I32))])
    inner = Builder(region).create(TileOp.NEG, [zero], [T(dt=I32)]).result
    Builder(region).create(TileOp.YIELD, [])
    b.create(TileOp.FOR, [zero, n, one], [], ForAttrs(), [region])
    b.create(TileOp.NEG, [inner], [T(dt=I32)])


def _load_offsets(b, x, n):
    b.create(TileOp.LOAD, [x, n], [T(4, 8)], LoadAttrs(0.0))


def _dim_axis(b, x, n):
    b.create(TileOp.DIM, [x], [T(dt=I32)], AxisAttrs(2))


def _reshape_numel(b, x, n):
    b.create(TileOp.RESHAPE, [const(b, 0.0, T(4, 8))], [T(4, 4)])


def _trans_perm(b, x, n):
    b.create(TileOp.TRANS, [const(b, 0.0, T(4, 8))], [T(4, 8)], PermAttrs((1, 0)))


def _store_dtype(b, x, n):
    b.create(TileOp.STORE, [x, n, n, const(b, 0.0, T(4, 8, dt=F16))])


def _float_unary_on_int(b, x, n):
    b.create(TileOp.EXP, [n], [T(dt=I32)])


def _dot_k(b, x, n):
    a, c = const(b, 0.0, T(4, 8, dt=F16)), const(b, 0.0, T(4, 4))
    b.create(TileOp.DOT, [a, a, c], [T(4, 4)], DotAttrs())


def _missing_yield(b, x, n):
    zero, one = const(b, 0, T(dt=I32)), const(b, 1, T(dt=I32))
    b.create(TileOp.FOR, [zero, n, one], [], ForAttrs(), [Block([Value(T(dt=I32))])])


def _top_level_yield(b, x, n):
    b.create(TileOp.YIELD, [])


@pytest.mark.parametrize("build, message", [
    (_bad_add, "broadcast"),
    (_bad_dtype, "one dtype"),
    (_use_before_def, "before it is defined"),
    (_region_value_escapes, "before it is defined"),
    (_load_offsets, "1 offsets for a rank-2 array"),
    (_dim_axis, "axis out of range"),
    (_reshape_numel, "cannot reshape"),
    (_trans_perm, "wrong result type"),
    (_store_dtype, "array's rank and dtype"),
    (_float_unary_on_int, "needs float operands"),
    (_dot_k, "(M,K) @ (K,N)"),
    (_missing_yield, "must end with yield"),
    (_top_level_yield, "yield must end a region"),
    (lambda b, x, n: for_loop(b, x, n, yield_type=T(4, 8, dt=F16)), "yielded types"),
    (lambda b, x, n: if_op(b, x, n, else_type=T(dt=F32)), "yielded types"),
    (lambda b, x, n: while_op(b, x, n, cond_type=T(dt=I32)), "start with a bool"),
])
def test_rejects_malformed_ir(build, message):
    with pytest.raises(VerifyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify(kernel(build))


def test_rejects_non_scalar_function_argument():
    fn = Function("k", Block([Value(T(4))]), ["t"])
    with pytest.raises(VerifyError, match="array or a scalar"):
        verify(fn)
