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


# --- the edges a mutation run of semantics.py found unasserted (tests/README.md) ----------------
def fails(match, fn, *args, **kwargs):
    with pytest.raises(CompileError, match=match):
        fn(builder(), *args, **kwargs)


def test_tile_shapes_up_to_the_limit_and_the_dimension_checks():
    limit = semantics.MAX_TILE_ELEMENTS
    assert limit == 1 << 20 and semantics.broadcast_shapes() == ()
    assert semantics.const_shape(builder(), (limit,), "t") == (limit,)
    assert semantics.const_shape(builder(), (2, limit // 2), "t") == (2, limit // 2)
    fails("too large", semantics.const_shape, (2, limit), "t")
    for bad, match in [((4, 0), "positive"), ((4, -2), "positive"), ((2.5,), "must be ints"),
                       ((True, 4), "must be ints")]:
        fails(match, semantics.const_shape, bad, "t")


def test_axes_are_compile_time_ints_within_the_rank():
    t = tile((4, 8))
    for axis in (2, -3):
        fails("out of range for a rank-2", semantics.reduce, ReduceKind.SUM, t, axis)
    for axis in (True, 1.0):
        fails("compile-time integer", semantics.reduce, ReduceKind.SUM, t, axis)
    assert semantics.reduce(builder(), ReduceKind.SUM, t, -2).type.shape == (8,)
    fails("cannot reduce a scalar along axis 0", semantics.reduce, ReduceKind.SUM, tile(()), 0)
    for axis in (True, 3, -1):
        fails("constant 0, 1 or 2", semantics.program_id, axis)
        fails("constant 0, 1 or 2", semantics.num_programs, axis)
    assert semantics.program_id(builder(), 2).owner.attrs.axis == 2


def test_constants_must_be_exact_in_integer_types():
    ty = TileType((), dtypes.int32)
    assert semantics.constant(builder(), 2.0, ty).owner.attrs.value == 2
    assert semantics.constant(builder(), -3.0, ty).owner.attrs.value == -3
    for bad in (2.5, -2.5, float("inf"), float("nan")):
        fails("cannot be represented as int32", semantics.constant, bad, ty)


def test_integer_power_with_a_negative_literal_is_refused_and_other_ops_are_not():
    fails(r"integer \*\* -1: .*x\.to\(tj\.float32\) \*\* -1$", semantics.binary, "**", tile((4,), dtypes.int32), -1)
    for op, x, y in [("**", tile((4,), dtypes.int32), 0), ("**", tile((4,), dtypes.int32), 2),
                     ("**", tile((4,)), -1), ("-", tile((4,), dtypes.int32), -1),
                     ("+", tile((4,), dtypes.int32), -5), ("*", tile((4,), dtypes.int8), -1)]:
        assert semantics.binary(builder(), op, x, y).type.shape == (4,)


def test_a_runtime_condition_compares_with_zero():
    b = builder()
    out = semantics.to_bool(b, tile((), dtypes.int32))
    assert out.owner.op is TileOp.NE and out.owner.operands[1].owner.attrs.value == 0
    assert semantics.to_bool(builder(), 3).owner.attrs.value is True


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.bool_])
def test_unary_ops_on_integers_keep_their_type(dt):
    b = builder()
    x = tile((4,), dt)
    assert semantics.unary(b, "+", x) is x
    inv = semantics.unary(b, "~", x)
    assert inv.owner.op is TileOp.INVERT and inv.type == x.type
    absolute = semantics.unary(b, "abs", x)
    assert absolute is x if dt.is_bool else (absolute.owner.op is TileOp.ABS and absolute.type == x.type)
    if not dt.is_bool:
        assert semantics.unary(b, "-", x).owner.op is TileOp.NEG
    assert semantics.unary(b, "not", tile((), dt)).owner.op is TileOp.EQ
    fails("operator ~ needs integer or bool", semantics.unary, "~", tile((4,)))
    fails("not defined on bool", semantics.unary, "-", tile((4,), dtypes.bool_))


def test_dtype_arguments_and_fill_values():
    fails("is not a tilejit dtype", semantics.cast, tile((4,)), "float7")
    fails("is not a tilejit dtype", semantics.cast, tile((4,)), 3.5)
    assert semantics.full(builder(), (2,), tile((), dtypes.int16)).type.dtype == dtypes.int16
    assert semantics.full(builder(), (2,), 1.5).type.dtype == dtypes.float32
    fails("fill value must be a scalar", semantics.full, (2,), tile((2,)))
    r = semantics.arange(builder(), 4)
    assert r.type.shape == (4,) and r.owner.attrs.value == 0


def test_shape_op_edges_against_numpy():
    """Also ``t[:, ..., None]``: the ellipsis stands for the dims the slices after it leave (it
    counted every slice, so a rank-3 tile gave (2, 3, 1, 4) instead of NumPy's (2, 3, 4, 1))."""
    b = builder()
    fails("expected a tile", semantics.reshape, 3, (1,))
    assert semantics.reshape(b, tile(()), (1, 1)).owner.op is TileOp.SPLAT
    for shape, axis in [((4,), 1), ((4,), -1), ((2, 3), 2), ((2, 3), 1), ((2, 3), -3)]:
        assert semantics.expand_dims(builder(), tile(shape), axis).type.shape == \
            np.expand_dims(np.empty(shape), axis).shape
    fails("out of range", semantics.expand_dims, tile((4,)), 2)
    for shape, to in [((3, 4), (4,)), ((2, 1), (1, 5))]:
        fails("cannot broadcast a tile", semantics.broadcast_to, tile(shape), to)
    for index in [(slice(None), None), (None, slice(None)), (Ellipsis, None), (None, Ellipsis),
                  (slice(None), None, Ellipsis), (Ellipsis, None, slice(None)), (slice(None), Ellipsis, None),
                  (None,), (slice(None), slice(None), slice(None), None)]:
        assert semantics.subscript(builder(), tile((2, 3, 4)), index).type.shape == \
            np.empty((2, 3, 4))[index].shape, index
    fails("too many indices", semantics.subscript, tile((4,)), (Ellipsis, slice(None), slice(None)))
    fails("with bounds", semantics.subscript, tile((4, 8)), (slice(1, 3),))
    fails("single ellipsis", semantics.subscript, tile((4, 8)), (Ellipsis, None, Ellipsis))


def test_permutations():
    t = tile((2, 3, 4))
    for perm in [((2, 0, 1),), (2, 0, 1)]:
        out = semantics.trans(builder(), t, *perm)
        assert out.type.shape == (4, 2, 3) and out.owner.attrs.perm == (2, 0, 1)
    assert semantics.trans(builder(), t, 0, 1, 2) is t and semantics.trans(builder(), t, (0, 1, 2)) is t
    assert semantics.permute(builder(), t, (1, 0, 2)).type.shape == (3, 2, 4)
    fails("give the new order", semantics.permute, t)
    for bad in [(1, 1, 0), (0, 1, 3), (0, 1), (0.0, 1, 2)]:
        fails("is not a permutation", semantics.trans, t, bad)


@pytest.mark.parametrize("dt, out", [(dtypes.bool_, dtypes.int32), (dtypes.int8, dtypes.int32),
                                     (dtypes.uint8, dtypes.int32), (dtypes.int16, dtypes.int32),
                                     (dtypes.int32, dtypes.int32), (dtypes.int64, dtypes.int64),
                                     (dtypes.uint32, dtypes.uint32), (dtypes.float16, dtypes.float16)])
def test_sum_widens_only_narrow_integers(dt, out):
    assert semantics.reduce(builder(), ReduceKind.SUM, tile((8,), dt)).type.dtype == out
    b = builder()
    scalar = semantics.reduce(b, ReduceKind.SUM, tile((), dt))
    assert scalar.type == TileType((), out) and "reduce" not in ops(b)


def test_dot_defaults_and_operand_checks():
    b = builder()
    out = semantics.dot(b, tile((16, 8), dtypes.float16), tile((8, 16), dtypes.float16))
    assert out.owner.attrs.allow_tf32 is False
    assert out.owner.operands[2].owner.attrs.value == 0
    fails("2-D tiles", semantics.dot, tile((2, 16, 8), dtypes.float16), tile((8, 16), dtypes.float16))
    fails("2-D tiles", semantics.dot, tile((16, 8), dtypes.float16), tile((1, 8, 16), dtypes.float16))
    for dt in (dtypes.int16, dtypes.int32, dtypes.bool_):
        fails("operands are not supported", semantics.dot, tile((16, 8), dt), tile((8, 16), dt))
    assert semantics.dot(builder(), tile((16, 8), dtypes.int8), tile((8, 16), dtypes.int8)).type.dtype == dtypes.int32
    assert semantics.dot(builder(), tile((16, 8), dtypes.float64), tile((8, 16), dtypes.float64)).type.dtype == dtypes.float64


def test_load_offsets_shapes_and_other():
    x = _array(2, dtypes.int32)
    t = semantics.load(builder(), x, (0, 0), (2, 2))
    assert t.owner.attrs.other == 0
    fails("3 offset", semantics.load, x, (0, 0, 0), (2, 2))
    fails("has rank 3", semantics.load, x, (0, 0), (2, 2, 2))
    gathered = semantics.load(builder(), x, (tile((2,), dtypes.int32), 0), (2, 2))   # per-row indices
    assert gathered.owner.operands[1].type.shape == (2, 2)
    fails("index tile for dim 0 has shape \\(3,\\)", semantics.load, x, (tile((3,), dtypes.int32), 0), (2, 2))
    fails("integer scalars or 1-D", semantics.load, x, (tile((2, 2), dtypes.int32), 0), (2, 2))
    fails("integer scalars", semantics.load, x, (tile((), dtypes.float32), 0), (2, 2))
    b = builder()
    semantics.load(b, x, (tile((), dtypes.bool_), tile((), dtypes.int64)), (2, 2))
    assert ops(b) == ["cast", "load"]
    assert semantics.load(builder(), x, (0, 0), (2, 2), other=2.0).owner.attrs.other == 2
    for other in (2.5, float("nan")):
        fails("cannot be represented as int32", semantics.load, x, (0, 0), (2, 2), other=other)
    assert semantics.load(builder(), _array(1), (0,), (4,), other=-0.5).owner.attrs.other == -0.5


def test_more_edges_the_second_mutation_run_found():
    fails("out of range for a rank-2", semantics.reduce, ReduceKind.SUM, tile((4, 8)), 5)
    fails("expected a tile", semantics.reduce, ReduceKind.SUM, 3)
    fails("expected a tile, a scalar or a number", semantics.where, tile((4,), dtypes.bool_), _array(1), 0.0)
    fails("empty range", semantics.arange, 5, 3)
    fails("empty range", semantics.arange, 4, 4)
    big = semantics.reshape(builder(), tile((32, 32)), (1024,))          # sizes past the small-int cache
    assert big.type.shape == (1024,)
    assert semantics.reshape(builder(), tile((64, 64)), (-1, 512)).type.shape == (8, 512)
    fails("2-D tiles", semantics.dot, tile((8,), dtypes.float16), tile((8, 16), dtypes.float16))
    fails(r"K mismatch \(8 vs 16\)", semantics.dot, tile((16, 8), dtypes.float16), tile((16, 16), dtypes.float16))
    b = builder()
    t = semantics.load(b, _array(2, dtypes.int32), (tile((), dtypes.bool_), tile((), dtypes.int64)), (2, 2))
    assert [v.type.dtype for v in t.owner.operands[1:]] == [dtypes.int32, dtypes.int64]
    fails("tile rank 3 does not match", semantics.store, _array(2), (0, 0), tile((2, 2, 2)))


def test_edges_the_recheck_of_the_second_run_found():
    for shape, index in [((2, 3, 4, 5), (slice(None), slice(None), Ellipsis, None, slice(None))),
                         ((2, 3), (Ellipsis, None, slice(None))),
                         ((2, 3, 4, 5), (slice(None), slice(None), Ellipsis, None)),
                         ((2, 3, 4, 5), (slice(None), slice(None), slice(None), Ellipsis, slice(None)))]:
        assert semantics.subscript(builder(), tile(shape), index).type.shape == np.empty(shape)[index].shape, index
    for args in [(tile((4,)), _array(1), 1.0), (1.0, tile((4,)), _array(1)), (_array(1), 2.0, tile((4,)))]:
        fails("fma: expected a tile, a scalar or a number", semantics.fma, *args)
    fails(r"operator \+: expected a tile, a scalar or a number", semantics.binary, "+", _array(1), tile((4,)))
    fails(r"operator \*: expected a tile, a scalar or a number", semantics.binary, "*", tile((4,)), _array(1))
    fails("2-D tiles", semantics.dot, tile((16, 8), dtypes.float16), tile((8,), dtypes.float16))
