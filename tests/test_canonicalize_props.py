"""Every canonicalize rule and constant fold, checked against the interpreter with Hypothesis:
a kernel ``y = op(x, c)`` (or ``op(c, x)``, or ``op(c1, c2)``) gives the same bits before and
after ``canonicalize``, over operands that include signed zeros, NaN, infinities and the
integer extremes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilejit import dtypes as D
from tilejit import ir
from tilejit.backends import interpret
from tilejit.ir import BINARY_OPS, COMPARE_OPS, ConstAttrs, LoadAttrs, TileOp, TileType, scalar
from tilejit.passes.canonicalize import RULES, _FOLD, canonicalize
from tilejit.passes.pipeline import clone_function

N = 8
SPECIAL = {
    D.float32: [0.0, -0.0, 1.0, -1.0, 0.5, float("inf"), float("-inf"), float("nan"), 3.0e38, 1e-45],
    D.int32: [0, 1, -1, 2, 31, 2**31 - 1, -2**31],
    D.int64: [0, 1, -1, 63, 2**63 - 1, -2**63],
}
# ops whose float or integer forms NumPy and the interpreter both define for any operand
OPS = sorted((BINARY_OPS | COMPARE_OPS) - {TileOp.POW, TileOp.SHL, TileOp.SHR}, key=lambda o: o.name)


def _valid(op, dt):
    if dt.is_float:
        return op not in (TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.FLOORDIV, TileOp.MOD)
    return op is not TileOp.TRUEDIV


def _kernel(op, dt, left, right):
    """``y[:] = op(left, right)`` where each side is ``"x"`` (the loaded tile) or a constant."""
    t = TileType((N,), dt)
    rdt = D.bool_ if op in COMPARE_OPS else dt
    block = ir.Block([ir.Value(ir.ArrayType(dt, 1)), ir.Value(ir.ArrayType(rdt, 1))])
    b = ir.Builder(block)
    x_arr, y_arr = block.args
    zero = b.create(TileOp.CONSTANT, [], [scalar(D.int32)], ConstAttrs(0)).result
    x = b.create(TileOp.LOAD, [x_arr, zero], [t], LoadAttrs(0)).result

    def side(v):
        if v == "x":
            return x
        c = b.create(TileOp.CONSTANT, [], [scalar(dt)], ConstAttrs(v)).result
        return b.create(TileOp.SPLAT, [c], [t]).result
    r = b.create(op, [side(left), side(right)], [TileType((N,), rdt)]).result
    b.create(TileOp.STORE, [y_arr, zero, r], [])
    return ir.Function("k", block, ["x", "y"], {}), rdt


def _run(fn, x, rdt):
    y = np.zeros(N, rdt.np)
    interpret.run(fn, 1, [x.copy(), y])
    return y


def _same_bits(a, b):
    return a.tobytes() == b.tobytes() or (a.dtype.kind == "f" and np.array_equal(a, b, equal_nan=True)
                                          and (np.signbit(a) == np.signbit(b)).all())


dtypes = st.sampled_from(sorted(SPECIAL, key=lambda d: d.name))


def _values(dt):
    if dt.is_float:
        return st.one_of(st.sampled_from(SPECIAL[dt]), st.floats(width=32))
    info = np.iinfo(dt.np)
    return st.one_of(st.sampled_from(SPECIAL[dt]), st.integers(int(info.min), int(info.max)))


@st.composite
def cases(draw):
    dt = draw(dtypes)
    op = draw(st.sampled_from([o for o in OPS if _valid(o, dt)]))
    shape = draw(st.sampled_from(["xc", "cx", "cc"]))
    left = "x" if shape[0] == "x" else draw(_values(dt))
    right = "x" if shape[1] == "x" else draw(_values(dt))
    x = np.array([draw(_values(dt)) for _ in range(N)], dt.np)
    return op, dt, left, right, x


def _check(op, dt, left, right, x):
    fn, rdt = _kernel(op, dt, left, right)
    before = _run(fn, x, rdt)
    after = _run(canonicalize(clone_function(fn)), x, rdt)
    assert _same_bits(before, after), (op, dt, left, right, x, before, after)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_canonicalize_keeps_the_bits_the_interpreter_computes(case):
    _check(*case)


@pytest.mark.parametrize("dt", sorted(SPECIAL, key=lambda d: d.name), ids=lambda d: d.name)
def test_every_op_on_every_special_operand(dt):
    """Exhaustive over the special values: each as the constant on either side, against a tile
    that holds all of them, and each pair of them folded."""
    specials = SPECIAL[dt]
    x = np.array((specials * N)[:N], dt.np)
    x2 = np.array((specials[N:] + specials * N)[:N], dt.np)
    for op in OPS:
        if not _valid(op, dt):
            continue
        for c in specials:
            for tile in (x, x2):
                _check(op, dt, "x", c, tile)
                _check(op, dt, c, "x", tile)
            for c2 in specials:
                _check(op, dt, c, c2, x)


@pytest.mark.parametrize("op,dt,left,right", [
    (TileOp.SUB, D.float32, "x", -0.0),          # x - (-0.0) is x + 0.0: -0.0 becomes +0.0
    (TileOp.ADD, D.float32, "x", 0.0),           # -0.0 + 0.0 = +0.0
    (TileOp.SUB, D.float32, "x", 0.0),           # x - 0.0 = x, also for -0.0
    (TileOp.ADD, D.float32, "x", -0.0),
    (TileOp.MUL, D.float32, 1.0, "x"),
    (TileOp.TRUEDIV, D.float32, "x", 1.0),
    (TileOp.FLOORDIV, D.int32, "x", 1),
    (TileOp.ADD, D.int32, 0, "x"),
])
def test_each_rule_on_signed_zeros_nan_and_inf(op, dt, left, right):
    x = np.array(SPECIAL[dt][:N] + [SPECIAL[dt][0]] * max(0, N - len(SPECIAL[dt])), dt.np)[:N]
    fn, rdt = _kernel(op, dt, left, right)
    assert _same_bits(_run(fn, x, rdt), _run(canonicalize(clone_function(fn)), x, rdt))


def test_x_minus_negative_zero_is_not_folded_to_x():
    fn, _ = _kernel(TileOp.SUB, D.float32, "x", -0.0)
    out = ir.print_function(canonicalize(clone_function(fn)))
    assert "sub " in out
    fn, _ = _kernel(TileOp.SUB, D.float32, "x", 0.0)
    assert "sub " not in ir.print_function(canonicalize(clone_function(fn)))


def _cast_kernel(src, dst, value):
    """``y[:] = cast(value: src, dst)``, and ``y2[:] = cast(x: src, dst)`` of the loaded tile."""
    block = ir.Block([ir.Value(ir.ArrayType(src, 1)), ir.Value(ir.ArrayType(dst, 1)),
                      ir.Value(ir.ArrayType(dst, 1))])
    b = ir.Builder(block)
    x_arr, y_arr, y2_arr = block.args
    zero = b.create(TileOp.CONSTANT, [], [scalar(D.int32)], ConstAttrs(0)).result
    c = b.create(TileOp.CONSTANT, [], [scalar(src)], ConstAttrs(value)).result
    cast = b.create(TileOp.CAST, [c], [scalar(dst)]).result
    b.create(TileOp.STORE, [y_arr, zero, b.create(TileOp.SPLAT, [cast], [TileType((N,), dst)]).result], [])
    x = b.create(TileOp.LOAD, [x_arr, zero], [TileType((N,), src)], LoadAttrs(0)).result
    b.create(TileOp.STORE, [y2_arr, zero, b.create(TileOp.CAST, [x], [TileType((N,), dst)]).result], [])
    return ir.Function("k", block, ["x", "y", "y2"], {})


@pytest.mark.parametrize("src", sorted(SPECIAL, key=lambda d: d.name), ids=lambda d: d.name)
def test_casts_fold_to_what_the_interpreter_computes(src):
    x = np.array((SPECIAL[src] * N)[:N], src.np)
    for dst in (D.int8, D.int32, D.int64, D.float32, D.float16, D.bool_):
        for value in SPECIAL[src]:
            fn = _cast_kernel(src, dst, value)
            outs = []
            for f in (fn, canonicalize(clone_function(fn))):
                y, y2 = np.zeros(N, dst.np), np.zeros(N, dst.np)
                interpret.run(f, 1, [x.copy(), y, y2])
                outs.append((y, y2))
            assert _same_bits(outs[0][0], outs[1][0]), (src, dst, value, outs)
            assert _same_bits(outs[0][1], outs[1][1]), (src, dst, value, outs)


def test_every_rule_and_fold_is_covered_here():
    covered = set(OPS) | {TileOp.CAST, TileOp.BROADCAST, TileOp.RESHAPE, TileOp.TRANS, TileOp.SPLAT}
    assert set(RULES) <= covered and set(_FOLD) <= covered
