"""The tile-IR interpreter on hand-built IR, against NumPy: elementwise ops across dtype pairs,
casts, reductions, shape ops, dot, masked loads/stores, program ids and structured control flow."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import dtypes as D
from tilejit import ir
from tilejit.backends import interpret
from tilejit.ir import (ArrayType, AxisAttrs, ConstAttrs, DotAttrs, ForAttrs, LoadAttrs, PermAttrs,
                        ReduceAttrs, ReduceKind, TileOp as Op, TileType)

NARROW = (D.float16, D.bfloat16)


class KernelBuilder:
    """Builds a tile-IR function op by op (what the frontend does for real kernels)."""

    def __init__(self, *params, block=None, fn=None):
        if fn is None:
            args = [ir.Value(t, name) for name, t in params]
            fn = ir.Function("k", ir.Block(args), [name for name, _ in params])
        self.fn, self.b = fn, ir.Builder(block or fn.body)
        self.args = fn.args

    def op(self, op, operands, shape, dtype, attrs=None, regions=None):
        return self.b.create(op, operands, [TileType(tuple(shape), dtype)], attrs, regions).result

    def const(self, value, dtype=D.int32, shape=()):
        return self.op(Op.CONSTANT, [], shape, dtype, ConstAttrs(value))

    def load(self, array, offsets, shape, other=0):
        offs = [self.const(o) if isinstance(o, int) else o for o in offsets]
        return self.op(Op.LOAD, [array, *offs], shape, array.type.dtype, LoadAttrs(other))

    def store(self, array, offsets, tile):
        offs = [self.const(o) if isinstance(o, int) else o for o in offsets]
        self.b.create(Op.STORE, [array, *offs, tile])

    def cast(self, v, dtype):
        return v if v.type.dtype == dtype else self.op(Op.CAST, [v], v.type.shape, dtype)

    def region(self, arg_types, body):
        """A block with arguments of ``arg_types`` whose ops ``body(builder, *args)`` makes; the
        values it returns are yielded."""
        block = ir.Block([ir.Value(t) for t in arg_types])
        inner = KernelBuilder(block=block, fn=self.fn)
        inner.b.create(Op.YIELD, list(body(inner, *block.args)))
        return block

    def run(self, grid, *args):
        interpret.run(self.fn, grid, list(args))


def array_type(a: np.ndarray) -> ArrayType:
    return ArrayType(D.from_numpy(a.dtype), a.ndim)


def elementwise(op, inputs, operand_dtype, result_dtype):
    """Run ``op`` on whole-array tiles of ``inputs`` (cast to operand_dtype); return the result."""
    shape = inputs[0].shape
    out = np.zeros(shape, result_dtype.np)
    k = KernelBuilder(*[(f"a{i}", array_type(a)) for i, a in enumerate(inputs)], ("out", array_type(out)))
    tiles = [k.cast(k.load(arg, [0] * len(shape), shape), operand_dtype) for arg in k.args[:-1]]
    k.store(k.args[-1], [0] * len(shape), k.op(op, tiles, shape, result_dtype))
    k.run(1, *inputs, out)
    return out


def compute_dtype(dt):
    return np.float32 if dt in NARROW else dt.np


NUMPY_BINARY = {Op.ADD: (np.add, "fiu"), Op.SUB: (np.subtract, "fiu"), Op.MUL: (np.multiply, "fiu"),
                Op.TRUEDIV: (np.true_divide, "fiu"), Op.FLOORDIV: (np.floor_divide, "fiu"),
                Op.MOD: (np.mod, "fiu"), Op.POW: (np.power, "f"), Op.AND: (np.bitwise_and, "iub"),
                Op.OR: (np.bitwise_or, "iub"), Op.XOR: (np.bitwise_xor, "iub"),
                Op.MAXIMUM: (np.maximum, "fiu"), Op.MINIMUM: (np.minimum, "fiu"),
                Op.EQ: (np.equal, "fiub"), Op.NE: (np.not_equal, "fiub"), Op.LT: (np.less, "fiub"),
                Op.LE: (np.less_equal, "fiub"), Op.GT: (np.greater, "fiub"), Op.GE: (np.greater_equal, "fiub")}


@pytest.mark.parametrize("op", list(NUMPY_BINARY), ids=lambda o: o.name)
@given(data=st.data())
def test_binary_op_matches_numpy_across_dtype_pairs(op, data):
    np_op, kinds = NUMPY_BINARY[op]
    a_dt, b_dt = data.draw(tj.testing.dtypes(kinds)), data.draw(tj.testing.dtypes(kinds))
    promoted = D.promote(a_dt, b_dt)
    unsigned64 = {a_dt.kind, b_dt.kind} == {"i", "u"} and D.uint64 in (a_dt, b_dt)
    if a_dt.is_float == b_dt.is_float and {a_dt, b_dt} != set(NARROW) and not unsigned64:
        assert promoted.np == np.result_type(a_dt.np, b_dt.np)        # promotion is NumPy's
    if unsigned64:
        assert promoted == D.int64                                    # the documented deviation
    result = D.bool_ if op in ir.COMPARE_OPS else D.float_result(promoted) if op is Op.TRUEDIV else promoted
    shape = data.draw(tj.testing.shapes(2, 1, 9))
    a = data.draw(tj.testing.arrays(a_dt, shape))
    b = data.draw(tj.testing.arrays(b_dt, shape))
    if op in (Op.FLOORDIV, Op.MOD, Op.TRUEDIV) and b_dt.is_int:
        b = np.where(b == 0, 3, b).astype(b_dt.np)
    if op is Op.POW:
        a = np.abs(a.astype(np.float32)).astype(a_dt.np) + a_dt.np.type(0.5)
    out = elementwise(op, [a, b], promoted, result)
    ct = compute_dtype(D.float_result(promoted) if op is Op.TRUEDIV else promoted)
    with np.errstate(all="ignore"):
        ref = np_op(a.astype(promoted.np).astype(ct), b.astype(promoted.np).astype(ct)).astype(result.np)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("op", [Op.SHL, Op.SHR], ids=lambda o: o.name)
@given(dt=tj.testing.dtypes("iu"), seed=st.integers(0, 2**16))
def test_shifts_match_numpy(op, dt, seed):
    rng = np.random.default_rng(seed)
    a = tj.testing.random_array(rng, dt, (5, 7), -1000, 1000) if dt.kind == "i" else \
        tj.testing.random_array(rng, dt, (5, 7), 0, 200)
    b = rng.integers(0, dt.bits, (5, 7)).astype(dt.np)
    np_op = np.left_shift if op is Op.SHL else np.right_shift
    np.testing.assert_array_equal(elementwise(op, [a, b], dt, dt), np_op(a, b))


def test_integer_division_floors_and_overflow_wraps():
    a = np.array([7, -7, 7, -7, 2**31 - 1], np.int32)
    b = np.array([2, 2, -2, -2, 1], np.int32)
    assert elementwise(Op.FLOORDIV, [a, b], D.int32, D.int32).tolist()[:4] == [3, -4, -4, 3]
    assert elementwise(Op.MOD, [a, b], D.int32, D.int32).tolist()[:4] == [1, 1, -1, -1]
    assert elementwise(Op.ADD, [a, b], D.int32, D.int32)[4] == -2**31
    p = elementwise(Op.POW, [np.array([2, -1, -1, 3], np.int32), np.array([3, -3, -2, -1], np.int32)],
                    D.int32, D.int32)
    assert p.tolist() == [8, -1, 1, 0]


UNARY = {Op.NEG: (np.negative, "fi"), Op.ABS: (np.abs, "fi"), Op.INVERT: (np.invert, "iub"),
         Op.EXP: (np.exp, "fiu"), Op.EXP2: (np.exp2, "fiu"), Op.LOG: (np.log, "fiu"),
         Op.LOG2: (np.log2, "fiu"), Op.SQRT: (np.sqrt, "fiu"), Op.RSQRT: (lambda x: 1 / np.sqrt(x), "fiu"),
         Op.SIN: (np.sin, "fiu"), Op.COS: (np.cos, "fiu"), Op.TANH: (np.tanh, "fiu"),
         Op.SIGMOID: (lambda x: 1 / (1 + np.exp(-x)), "fiu"), Op.FLOOR: (np.floor, "fiu"),
         Op.ERF: (np.frompyfunc(math.erf, 1, 1), "fiu"), Op.CEIL: (np.ceil, "fiu"), Op.TRUNC: (np.trunc, "fiu"), Op.ROUND: (np.rint, "fiu")}


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
@given(data=st.data())
def test_unary_op_matches_numpy(op, data):
    np_op, kinds = UNARY[op]
    dt = data.draw(tj.testing.dtypes(kinds))
    a = data.draw(tj.testing.arrays(dt, tj.testing.shapes(2, 1, 9)))
    if op in (Op.LOG, Op.LOG2, Op.SQRT, Op.RSQRT):
        a = np.abs(a.astype(np.float32)).astype(dt.np) + dt.np.type(1)
    result = D.float_result(dt) if op in ir.FLOAT_UNARY_OPS else dt
    out = elementwise(op, [a], dt, result)
    with np.errstate(all="ignore"):
        ref = (np.logical_not(a) if dt.is_bool else np_op(a.astype(compute_dtype(result)))).astype(result.np)
    np.testing.assert_array_equal(out, ref)


@given(src=tj.testing.dtypes(), dst=tj.testing.dtypes(), seed=st.integers(0, 2**16))
def test_cast_follows_c_conversion_rules(src, dst, seed):
    bounds = (0, 100) if dst.kind == "u" and src.is_float else (None, None)   # negative -> unsigned is UB
    a = tj.testing.random_array(np.random.default_rng(seed), src, (3, 5), *bounds)
    out = elementwise(Op.CAST, [a], src, dst)
    if dst.is_bool:
        expected = [bool(float(x)) for x in a.flat]
    elif dst.is_int:                               # truncate toward zero, wrap to the width
        expected = [((int(float(x)) + 2**(dst.bits - 1)) % 2**dst.bits - 2**(dst.bits - 1)) if dst.kind == "i"
                    else int(float(x)) % 2**dst.bits for x in a.flat]
    else:
        expected = np.array([float(x) for x in a.flat]).astype(dst.np)
    np.testing.assert_array_equal(out.ravel(), np.asarray(expected, dtype=dst.np))


def test_fma_where_and_narrow_float_rounding():
    a, b, c = (np.array(v, np.float32) for v in ([1 + 2**-23, 3.0], [1 - 2**-23, 0.5], [-1.0, 1.0]))
    fma = elementwise(Op.FMA, [a, b, c], D.float32, D.float32)
    assert fma[0] == np.float32(-(2.0**-46)) and fma[1] == 2.5       # one rounding, like a GPU fma
    cond = np.array([True, False])
    x, y = np.array([1, 2], np.int16), np.array([3, 4], np.int16)
    np.testing.assert_array_equal(elementwise(Op.WHERE, [cond, x, y], D.int16, D.int16), [1, 4])
    h = np.array([2048, 1], np.float16)
    assert elementwise(Op.ADD, [h, np.ones(2, np.float16)], D.float16, D.float16).tolist() == [2048, 2]


# ---------------------------------------------------------------------------------- reductions
REDUCE_NUMPY = {ReduceKind.SUM: np.sum, ReduceKind.MAX: np.max, ReduceKind.MIN: np.min,
                ReduceKind.ARGMAX: np.argmax, ReduceKind.ARGMIN: np.argmin}


def reduce_out_dtype(kind, dt):
    if kind in (ReduceKind.ARGMAX, ReduceKind.ARGMIN) or (kind is ReduceKind.SUM and dt.is_int):
        return D.int32
    return dt


@pytest.mark.parametrize("kind", list(ReduceKind), ids=lambda k: k.name)
@given(data=st.data())
def test_reduce_each_axis_with_and_without_keepdims(kind, data):
    dt = data.draw(st.sampled_from([D.float32, D.float16, D.bfloat16, D.int32, D.int8, D.uint8]))
    shape = data.draw(tj.testing.shapes(data.draw(st.integers(1, 3)), 1, 7))
    axis, keepdims = data.draw(st.integers(0, len(shape) - 1)), data.draw(st.booleans())
    a = data.draw(tj.testing.arrays(dt, shape))
    res_dt = reduce_out_dtype(kind, dt)
    out_shape = tuple(1 if i == axis else n for i, n in enumerate(shape)) if keepdims else \
        tuple(n for i, n in enumerate(shape) if i != axis)
    out = np.zeros(out_shape or (1,), res_dt.np)
    k = KernelBuilder(("a", array_type(a)), ("out", array_type(out)))
    r = k.op(Op.REDUCE, [k.load(k.args[0], [0] * len(shape), shape)], out_shape, res_dt,
             ReduceAttrs(kind, axis, keepdims))
    if not out_shape:
        r = k.op(Op.RESHAPE, [r], (1,), res_dt)
    k.store(k.args[1], [0] * out.ndim, r)
    k.run(1, a, out)
    wide = a.astype(np.float64 if dt.is_float else np.int64)
    ref = REDUCE_NUMPY[kind](wide, axis=axis, keepdims=keepdims)
    tj.testing.assert_close(out, np.reshape(ref, out.shape), dtype=res_dt)


# ------------------------------------------------------------------------- shapes, dot, consts
def test_splat_broadcast_reshape_trans_arange_constant():
    out = np.zeros((4, 3), np.float32)
    k = KernelBuilder(("n", TileType((), D.float32)), ("out", array_type(out)))
    col = k.op(Op.CAST, [k.op(Op.ARANGE, [], (3,), D.int32, ConstAttrs(5))], (3,), D.float32)
    row = k.op(Op.RESHAPE, [col], (1, 3), D.float32)
    grid = k.op(Op.BROADCAST, [row], (4, 3), D.float32)
    per_row = k.op(Op.TRANS, [k.op(Op.BROADCAST, [k.op(Op.RESHAPE, [k.op(
        Op.CAST, [k.op(Op.ARANGE, [], (4,), D.int32, ConstAttrs(0))], (4,), D.float32)], (1, 4), D.float32)],
        (3, 4), D.float32)], (4, 3), D.float32, PermAttrs((1, 0)))
    total = k.op(Op.ADD, [grid, k.op(Op.MUL, [per_row, k.const(10.0, D.float32, (4, 3))], (4, 3), D.float32)],
                 (4, 3), D.float32)
    k.store(k.args[1], [0, 0], k.op(Op.ADD, [total, k.op(Op.SPLAT, [k.args[0]], (4, 3), D.float32)],
                                    (4, 3), D.float32))
    k.run(1, 0.5, out)
    np.testing.assert_array_equal(out, np.arange(5, 8)[None, :] + 10 * np.arange(4)[:, None] + 0.5)


@pytest.mark.parametrize("dt", [D.float16, D.bfloat16, D.float32, D.int8], ids=str)
@given(m=st.integers(1, 20), n=st.integers(1, 20), kk=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_dot_accumulates_exactly_converted_inputs(dt, m, n, kk, seed):
    rng = np.random.default_rng(seed)
    acc_dt = D.int32 if dt.is_int else D.float32
    a, b = tj.testing.random_array(rng, dt, (m, kk)), tj.testing.random_array(rng, dt, (kk, n))
    acc0 = tj.testing.random_array(rng, acc_dt, (m, n))
    out = np.zeros((m, n), acc_dt.np)
    k = KernelBuilder(("a", array_type(a)), ("b", array_type(b)), ("c", array_type(acc0)), ("out", array_type(out)))
    ta, tb, tc = (k.load(x, [0, 0], arr.shape) for x, arr in zip(k.args, (a, b, acc0)))
    k.store(k.args[3], [0, 0], k.op(Op.DOT, [ta, tb, tc], (m, n), acc_dt, DotAttrs()))
    k.run(1, a, b, acc0, out)
    wide = np.int64 if dt.is_int else np.float64
    ref = a.astype(wide) @ b.astype(wide) + acc0
    tj.testing.assert_close(out, ref, rtol=0 if dt.is_int else 1e-6, atol=0 if dt.is_int else 1e-6)


def test_dot_tf32_rounds_inputs():
    a = np.full((1, 1), 1 + 2**-20, np.float32)
    out = np.zeros((1, 1), np.float32)
    for allow, expected in ((False, 1 + 2**-20), (True, 1.0)):
        k = KernelBuilder(("a", array_type(a)), ("out", array_type(out)))
        ta = k.load(k.args[0], [0, 0], (1, 1))
        k.store(k.args[1], [0, 0], k.op(Op.DOT, [ta, k.const(1.0, D.float32, (1, 1)),
                                                 k.const(0.0, D.float32, (1, 1))], (1, 1), D.float32,
                                         DotAttrs(allow_tf32=allow)))
        k.run(1, a, out)
        assert out[0, 0] == np.float32(expected)


# ------------------------------------------------------------------------------ loads and stores
def padded_window(a, offsets, shape, other):
    """NumPy reference of a masked load: element by element."""
    out = np.full(shape, other, a.dtype)
    for idx in np.ndindex(*shape):
        src = tuple(o + i for o, i in zip(offsets, idx))
        if all(0 <= s < n for s, n in zip(src, a.shape)):
            out[idx] = a[src]
    return out


def edge_offsets(shape, tile):
    """Offsets that put the tile across the array's edges (and, at the extremes, fully outside)."""
    return st.tuples(*[st.integers(-t, n) for n, t in zip(shape, tile)])


@given(data=st.data())
def test_masked_load_partly_outside_reads_other(data):
    rank = data.draw(st.integers(1, 3))
    shape = data.draw(tj.testing.shapes(rank, 1, 9))
    tile = data.draw(tj.testing.shapes(rank, 1, 8))
    offsets = data.draw(edge_offsets(shape, tile))
    a = data.draw(tj.testing.arrays(D.float32, shape))
    other = data.draw(st.sampled_from([0.0, -math.inf, 7.5]))
    out = np.zeros(tile, np.float32)
    k = KernelBuilder(("a", array_type(a)), ("out", array_type(out)))
    k.store(k.args[1], [0] * rank, k.load(k.args[0], list(offsets), tile, other))
    k.run(1, a, out)
    np.testing.assert_array_equal(out, padded_window(a, offsets, tile, other))


@given(data=st.data())
def test_masked_store_writes_only_inside(data):
    shape = data.draw(tj.testing.shapes(2, 1, 9))
    tile = data.draw(tj.testing.shapes(2, 1, 8))
    offsets = data.draw(edge_offsets(shape, tile))
    src = data.draw(tj.testing.arrays(D.int16, tile))
    out = np.full(shape, -1, np.int16)
    k = KernelBuilder(("src", array_type(src)), ("out", array_type(out)))
    k.store(k.args[1], list(offsets), k.load(k.args[0], [0, 0], tile))
    k.run(1, src, out)
    ref = np.full(shape, -1, np.int16)
    for i, j in np.ndindex(*tile):
        y, x = offsets[0] + i, offsets[1] + j
        if 0 <= y < shape[0] and 0 <= x < shape[1]:
            ref[y, x] = src[i, j]
    np.testing.assert_array_equal(out, ref)


def test_strided_views_are_read_and_written_in_place():
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    view = base[::2, ::-3]                       # non-unit and negative strides
    dst = np.zeros((8, 8), np.float32)
    target = dst.T[1:, 2:]
    k = KernelBuilder(("a", array_type(view)), ("out", array_type(target)))
    k.store(k.args[1], [1, 1], k.load(k.args[0], [0, 0], (4, 4), -1.0))
    k.run(1, view, target)
    ref = np.zeros((8, 8), np.float32)
    ref.T[1:, 2:][1:5, 1:5] = padded_window(view, (0, 0), (4, 4), -1.0)
    np.testing.assert_array_equal(dst, ref)


def test_program_ids_num_programs_and_dims():
    out = np.zeros((2, 3, 4), np.int32)
    k = KernelBuilder(("out", array_type(out)))
    pid = [k.op(Op.PROGRAM_ID, [], (), D.int32, AxisAttrs(i)) for i in range(3)]
    nprog = [k.op(Op.NUM_PROGRAMS, [], (), D.int32, AxisAttrs(i)) for i in range(3)]
    dim = k.op(Op.DIM, [k.args[0]], (), D.int32, AxisAttrs(2))
    value = pid[0]
    for v, scale in ((pid[1], 10), (pid[2], 100), (nprog[0], 1000), (nprog[1], 10**4),
                     (nprog[2], 10**5), (dim, 10**6)):
        value = k.op(Op.ADD, [value, k.op(Op.MUL, [v, k.const(scale)], (), D.int32)], (), D.int32)
    k.store(k.args[0], [pid[2], pid[1], pid[0]], k.op(Op.RESHAPE, [value], (1, 1, 1), D.int32))
    k.run((3, 2), out)
    z, y, x = np.indices((1, 2, 3))
    np.testing.assert_array_equal(out[:1, :2, :3], x + 10 * y + 100 * z + 3000 + 2 * 10**4 + 10**5 + 4 * 10**6)
    assert not out[1:].any() and not out[:, :, 3].any()


# ---------------------------------------------------------------------------------- control flow
@given(lb=st.integers(-5, 5), ub=st.integers(-5, 12), step=st.sampled_from([1, 2, 3, -1, -2]))
def test_for_loop_carries_scalars_and_tiles(lb, ub, step):
    out = np.zeros(3, np.int32)
    k = KernelBuilder(("out", array_type(out)))
    i32, tile = TileType((), D.int32), TileType((3,), D.int32)

    def body(b, iv, total, count):
        ramp = b.op(Op.ADD, [total, b.op(Op.SPLAT, [iv], (3,), D.int32)], (3,), D.int32)
        return ramp, b.op(Op.ADD, [count, b.const(1)], (), D.int32)
    region = k.region([i32, tile, i32], body)
    inits = [k.const(lb), k.const(ub), k.const(step), k.op(Op.ARANGE, [], (3,), D.int32, ConstAttrs(0)), k.const(0)]
    loop = k.b.create(Op.FOR, inits, [tile, i32], ForAttrs(), [region])
    total, count = loop.results
    with_count = k.op(Op.ADD, [total, k.op(Op.SPLAT, [k.op(Op.MUL, [count, k.const(1000)], (), D.int32)],
                                         (3,), D.int32)], (3,), D.int32)
    k.store(k.args[0], [0], with_count)
    k.run(1, out)
    steps = list(range(lb, ub, step))
    np.testing.assert_array_equal(out, np.arange(3) + sum(steps) + 1000 * len(steps))


def test_if_selects_region_results_per_program():
    out = np.zeros((4, 2), np.float32)
    k = KernelBuilder(("out", array_type(out)))
    pid = k.op(Op.PROGRAM_ID, [], (), D.int32, AxisAttrs(0))
    cond = k.op(Op.LT, [pid, k.const(2)], (), D.bool_)
    then = k.region([], lambda b: [b.const(1.5, D.float32, (1, 2))])
    other = k.region([], lambda b: [b.op(Op.CAST, [b.op(Op.SPLAT, [pid], (1, 2), D.int32)], (1, 2), D.float32)])
    result = k.b.create(Op.IF, [cond], [TileType((1, 2), D.float32)], None, [then, other]).result
    k.store(k.args[0], [pid, 0], result)
    k.run(4, out)
    np.testing.assert_array_equal(out, [[1.5, 1.5], [1.5, 1.5], [2, 2], [3, 3]])


@given(n=st.integers(-3, 5000))
def test_while_is_a_do_while(n):
    out = np.zeros(1, np.int32)
    k = KernelBuilder(("n", TileType((), D.int32)), ("out", array_type(out)))
    n_arg = k.args[0]

    def body(b, v):
        doubled = b.op(Op.MUL, [v, b.const(2)], (), D.int32)
        return b.op(Op.LT, [doubled, n_arg], (), D.bool_), doubled
    loop = k.b.create(Op.WHILE, [k.const(1)], [TileType((), D.int32)], None,
                      [k.region([TileType((), D.int32)], body)])
    k.store(k.args[1], [0], k.op(Op.RESHAPE, [loop.result], (1,), D.int32))
    k.run(1, np.int32(n), out)
    expected = 2
    while expected < n:
        expected *= 2
    assert out[0] == expected


def test_launch_rejects_read_only_targets_and_foreign_arrays():
    out = np.broadcast_to(np.zeros(1, np.float32), (4,))
    k = KernelBuilder(("out", array_type(out)))
    k.store(k.args[0], [0], k.const(1.0, D.float32, (4,)))
    with pytest.raises(tj.LaunchError, match="read-only"):
        k.run(1, out)
    with pytest.raises(tj.LaunchError, match="NumPy array"):
        k.run(1, [0.0] * 4)
