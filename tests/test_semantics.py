"""Semantics builders: broadcasting and promotion against NumPy (Hypothesis), and the typing
rules of each builtin (dot, load/store, reductions, shape ops)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tilejit import dtypes
from tilejit.frontend import semantics
from tilejit.errors import CompileError
from tilejit.ir import ArrayType, Block, Builder, Loc, ReduceKind, TileOp, TileType, Value

LOC = Loc("kernel.py", 3, 4, 9, "k")
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32]
ALL = [dtypes.bool_] + INTS + FLOATS


def builder() -> Builder:
    return Builder(Block(), LOC)


def tile(shape, dt=dtypes.float32) -> Value:
    return Value(TileType(tuple(shape), dt))


def ops(b: Builder) -> list[str]:
    return [o.op.name.lower() for o in b.block.ops]


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)


# --- broadcasting ---------------------------------------------------------------------------------
@given(st.lists(shapes, min_size=2, max_size=3))
def test_broadcast_shapes_agrees_with_numpy(shape_list):
    try:
        expected = np.broadcast_shapes(*shape_list)
    except ValueError:
        with pytest.raises(ValueError):
            semantics.broadcast_shapes(*shape_list)
        return
    assert semantics.broadcast_shapes(*shape_list) == expected


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
def test_binary_broadcasts_operands_to_one_shape(bshapes):
    b = builder()
    out = semantics.binary(b, "+", tile(bshapes.input_shapes[0]), tile(bshapes.input_shapes[1]))
    assert out.type.shape == bshapes.result_shape
    assert all(v.type == out.type for v in out.owner.operands)


def test_bad_broadcast_message():
    with pytest.raises(CompileError, match=r"cannot broadcast shapes \(4, 8\) and \(3,\)") as e:
        semantics.binary(builder(), "*", tile((4, 8)), tile((3,)))
    assert e.value.loc == LOC


# --- promotion -------------------------------------------------------------------------------------
def _numpy_agrees(a, b) -> bool:
    """Pairs where our rules are NumPy's (see the deviations in tilejit/dtypes.py)."""
    if a.bits == 8 and a.is_float or b.bits == 8 and b.is_float:
        return False
    if {a, b} == {dtypes.float16, dtypes.bfloat16} or dtypes.bfloat16 in (a, b) and a != b:
        return False
    return not (a.is_float != b.is_float and not a.is_bool and not b.is_bool)


@given(st.sampled_from(ALL), st.sampled_from(ALL))
def test_promotion_matches_numpy_where_documented(a, b):
    got = semantics.binary(builder(), "+" if not (a.is_bool and b.is_bool) else "&",
                           tile((2,), a), tile((2,), b)).type.dtype
    if _numpy_agrees(a, b):
        assert got.np == np.result_type(a.np, b.np)
    elif a.is_float != b.is_float and not (a.is_bool or b.is_bool):
        assert got == (a if a.is_float else b)          # deviation: int with float -> that float


@given(st.sampled_from(INTS + FLOATS), st.one_of(st.integers(-70000, 70000), st.floats(-10, 10)))
def test_weak_python_scalars_follow_nep50(dt, value):
    b = builder()
    try:
        expected = (np.zeros(2, dt.np) + value).dtype
    except OverflowError:
        with pytest.raises(CompileError, match="does not fit"):
            semantics.binary(b, "+", tile((2,), dt), value)
        return
    got = semantics.binary(b, "+", tile((2,), dt), value).type.dtype
    if dt.is_int and isinstance(value, float):
        assert got == dtypes.float32                     # deviation: NumPy gives float64
    else:
        assert got.np == expected


def test_division_and_float_math_on_ints_give_float32():
    b = builder()
    assert semantics.binary(b, "/", tile((4,), dtypes.int32), 2).type == TileType((4,), dtypes.float32)
    assert semantics.unary(b, "exp", tile((), dtypes.int8)).type == TileType((), dtypes.float32)
    assert semantics.binary(b, "<", tile((4,), dtypes.int8), 2.5).type.dtype == dtypes.bool_


def test_bitwise_on_floats_and_arithmetic_on_bools_are_errors():
    with pytest.raises(CompileError, match="needs integer or bool operands, got float32"):
        semantics.binary(builder(), "&", tile((4,)), 1)
    with pytest.raises(CompileError, match="not defined on bool"):
        semantics.binary(builder(), "+", tile((4,), dtypes.bool_), tile((4,), dtypes.bool_))


# --- builtins ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt, acc", [(dtypes.float16, dtypes.float32), (dtypes.bfloat16, dtypes.float32),
                                     (dtypes.float32, dtypes.float32), (dtypes.int8, dtypes.int32)])
def test_dot_accumulator_types(dt, acc):
    b = builder()
    out = semantics.dot(b, tile((16, 32), dt), tile((32, 8), dt))
    assert out.type == TileType((16, 8), acc) and ops(b) == ["constant", "dot"]


def test_dot_errors():
    with pytest.raises(CompileError, match=r"dot: K mismatch \(32 vs 16\)"):
        semantics.dot(builder(), tile((8, 32)), tile((16, 8)))
    with pytest.raises(CompileError, match="dtypes differ"):
        semantics.dot(builder(), tile((8, 8), dtypes.float16), tile((8, 8), dtypes.bfloat16))
    with pytest.raises(CompileError, match="acc must be"):
        semantics.dot(builder(), tile((8, 8), dtypes.float16), tile((8, 8), dtypes.float16),
                      acc=tile((8, 8), dtypes.float16))


def _array(rank, dt=dtypes.float32):
    return semantics.ArrayHandle(Value(ArrayType(dt, rank)), "x")


def test_load_and_store_rules():
    b, x = builder(), _array(2, dtypes.int32)
    row = tile((), dtypes.int32)
    t = semantics.load(b, x, (row, 4), (2, 8), other=-1)
    assert t.type == TileType((2, 8), dtypes.int32) and t.owner.attrs.other == -1
    semantics.store(b, x, (row, 0), tile((2, 8), dtypes.float32))
    assert ops(b)[-2:] == ["cast", "store"]
    for args, message in [(((0,), (2, 8)), "1 offset"), (((0, 0), (8,)), "rank 1"),
                          (((0, 0), (2, row)), "compile-time constant"),
                          (((0.5, 0), (2, 2)), "integer scalars")]:
        with pytest.raises(CompileError, match=message):
            semantics.load(builder(), x, *args)
    with pytest.raises(CompileError, match="compile-time number"):
        semantics.load(builder(), x, (0, 0), (2, 2), other=row)
    with pytest.raises(CompileError, match="cannot be represented as int32"):
        semantics.load(builder(), x, (0, 0), (2, 2), other=-float("inf"))
    with pytest.raises(CompileError, match="tile rank 1 does not match"):
        semantics.store(builder(), x, (0, 0), tile((4,)))


@pytest.mark.parametrize("kind, dt, axis, keepdims, shape, out_dt", [
    (ReduceKind.SUM, dtypes.float16, None, False, (), dtypes.float16),
    (ReduceKind.SUM, dtypes.int8, 0, False, (8,), dtypes.int32),
    (ReduceKind.MAX, dtypes.float32, -1, True, (4, 1), dtypes.float32),
    (ReduceKind.ARGMIN, dtypes.float32, 0, False, (8,), dtypes.int32),
    (ReduceKind.MIN, dtypes.int16, None, True, (1, 1), dtypes.int16),
])
def test_reductions(kind, dt, axis, keepdims, shape, out_dt):
    out = semantics.reduce(builder(), kind, tile((4, 8), dt), axis, keepdims)
    assert out.type == TileType(shape, out_dt)


def test_shape_ops():
    b = builder()
    t = tile((4, 8))
    assert semantics.subscript(b, tile((4,)), (slice(None), None)).type.shape == (4, 1)
    assert semantics.subscript(b, tile((4,)), (None, Ellipsis)).type.shape == (1, 4)
    assert semantics.trans(b, tile((2, 3, 4))).type.shape == (4, 3, 2)
    assert semantics.trans(b, t, 1, 0).owner.attrs.perm == (1, 0)
    assert semantics.reshape(b, t, (-1, 2)).type.shape == (16, 2)
    assert semantics.broadcast_to(b, tile((8,)), (4, 8)).type.shape == (4, 8)
    assert semantics.expand_dims(b, t, 0).type.shape == (1, 4, 8)
    with pytest.raises(CompileError, match="cannot reshape"):
        semantics.reshape(b, t, (3, 3))
    with pytest.raises(CompileError, match="only ':' and None"):
        semantics.subscript(b, t, 0)


def test_where_broadcasts_all_three_and_full_splats_runtime_scalars():
    b = builder()
    out = semantics.where(b, tile((4, 1), dtypes.bool_), tile((8,), dtypes.float16), 0.0)
    assert out.type == TileType((4, 8), dtypes.float16)
    assert all(v.type.shape == (4, 8) for v in out.owner.operands)
    b = builder()
    filled = semantics.full(b, (2, 2), tile((), dtypes.int32), dtypes.float32)
    assert filled.type == TileType((2, 2), dtypes.float32) and ops(b) == ["cast", "splat"]
    assert semantics.arange(b, 2, 6).type == TileType((4,), dtypes.int32)
    with pytest.raises(CompileError, match="compile-time integers"):
        semantics.arange(builder(), tile((), dtypes.int32), 8)


def test_tile_truth_value_is_ambiguous():
    with pytest.raises(CompileError, match="ambiguous"):
        semantics.condition(builder(), tile((4,), dtypes.bool_))
    b = builder()
    assert semantics.condition(b, tile((), dtypes.int32)).owner.op == TileOp.NE
