"""Differential fuzzing: Hypothesis writes random valid tile kernels (elementwise chains over
mixed dtypes, row and column broadcasts, reductions, casts, ``where``, an optional runtime loop,
ragged shapes), runs them on interpret and emulate (and on the GPU under ``-m gpu``), and
compares each with a NumPy model of the same program; random invalid launches must raise a
tilejit error and leave every output untouched."""
from __future__ import annotations

import linecache
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tilejit as tj
from tilejit import dtypes as D

DTYPES = [D.float32, D.float16, D.int32, D.int8]
BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "max": np.maximum, "min": np.minimum}


class Node:
    """A generated expression: its kernel source and its NumPy value on the padded tile."""

    def __init__(self, src: str, value: np.ndarray, dtype: D.DType):
        self.src, self.value, self.dtype = src, value, dtype


def _round(x: np.ndarray, dt: D.DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(dt.np)


KINDS = ("binary", "binary", "unary", "cast", "where", "reduce", "scan")


@st.composite
def expressions(draw, leaves: list, depth: int, kinds=KINDS, axes=(0, 1), casts=(D.float32, D.float16, D.int32)):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(kinds))
    a = draw(expressions(leaves, depth - 1, kinds, axes, casts))
    if kind == "binary":
        b = draw(expressions(leaves, depth - 1, kinds, axes, casts))
        op = draw(st.sampled_from(sorted(BINARY)))
        dt = D.promote(a.dtype, b.dtype)
        src = f"tj.maximum({a.src}, {b.src})" if op == "max" else f"tj.minimum({a.src}, {b.src})" \
            if op == "min" else f"({a.src} {op} {b.src})"
        wide = np.float64 if dt.is_float else dt.np
        with np.errstate(all="ignore"):
            value = BINARY[op](a.value.astype(wide), b.value.astype(wide))
        return Node(src, _round(value, dt), dt)
    if kind == "unary":
        op = draw(st.sampled_from(["neg", "abs"]))
        if op == "neg":
            with np.errstate(all="ignore"):
                return Node(f"(-{a.src})", _round(-a.value, a.dtype), a.dtype)
        with np.errstate(all="ignore"):
            return Node(f"tj.abs({a.src})", _round(np.abs(a.value), a.dtype), a.dtype)
    if kind == "cast":
        dt = draw(st.sampled_from(list(casts)))
        value = a.value
        if a.dtype.is_float and not dt.is_float:          # float -> int: keep it in range
            value = np.clip(np.nan_to_num(value), -1000, 1000)
            return Node(f"tj.minimum(tj.maximum({a.src}, -1000.0), 1000.0).to(tj.{dt.name})",
                        _round(np.trunc(value), dt), dt)
        return Node(f"{a.src}.to(tj.{dt.name})", _round(value, dt), dt)
    if kind == "where":
        b = draw(expressions(leaves, depth - 1, kinds, axes, casts))
        dt = D.promote(a.dtype, b.dtype)
        cond = a.value.astype(np.float64) > b.value.astype(np.float64)
        value = np.where(cond, b.value.astype(np.float64) if dt.is_float else b.value.astype(dt.np),
                         a.value.astype(np.float64) if dt.is_float else a.value.astype(dt.np))
        return Node(f"tj.where({a.src} > {b.src}, {b.src}, {a.src})", _round(value, dt), dt)
    axis = draw(st.sampled_from(axes))
    if kind == "scan":                                     # running sums along a row or column
        reverse = draw(st.booleans())
        f32 = a.value.astype(np.float32).astype(np.float64)
        run = np.flip(np.cumsum(np.flip(f32, axis), axis=axis), axis) if reverse else np.cumsum(f32, axis=axis)
        return Node(f"tj.cumsum({a.src}.to(tj.float32), axis={axis}, reverse={reverse})", _round(run, D.float32),
                    D.float32)
    # a row or column reduction, broadcast back
    how = draw(st.sampled_from(["sum", "max"]))
    f32 = a.value.astype(np.float32).astype(np.float64)
    red = f32.sum(axis=axis, keepdims=True) if how == "sum" else f32.max(axis=axis, keepdims=True)
    return Node(f"tj.{how}({a.src}.to(tj.float32), axis={axis}, keepdims=True)", _round(red, D.float32), D.float32)


@st.composite
def programs(draw, wide: bool = False):
    """A random kernel over a (rows, cols) input.  ``wide``: rows of 16K-40K columns, which
    ``passes.chunk_rows`` splits into loops; the expressions then reduce only along the rows and
    have no ``where`` and no float-to-int casts (a last-bit difference between two orders of a
    32K-term sum must not flip a branch or a truncation)."""
    if wide:
        rows, cols = draw(st.integers(1, 2)), draw(st.integers(16385, 40000))
    else:
        rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 33))
    br, bc = tj.next_power_of_2(rows), tj.next_power_of_2(cols)
    n_inputs = draw(st.integers(1, 3))
    dts = [draw(st.sampled_from(DTYPES)) for _ in range(n_inputs)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays, leaves = [], []
    for i, dt in enumerate(dts):
        if dt.is_float:
            host = (rng.standard_normal((rows, cols)) * 4).astype(dt.np)
        else:
            host = rng.integers(-8, 9, (rows, cols)).astype(dt.np)
        padded = np.zeros((br, bc), dt.np)
        padded[:rows, :cols] = host
        arrays.append(host)
        leaves.append(Node(f"x{i}", padded, dt))
    leaves.append(Node("2", np.full((br, bc), 2, np.int32), D.int32))     # weak scalars: see below
    if wide:
        return rows, cols, br, bc, arrays, draw(expressions(leaves[:-1], 3, ("binary", "binary", "unary", "cast", "reduce"),
                                                            (1,), (D.float32, D.float16))), False
    expr = draw(expressions(leaves[:-1], 3))
    loop = draw(st.booleans())
    return rows, cols, br, bc, arrays, expr, loop


def _kernel_source(n: int, expr: str, loop: bool) -> str:
    args = ", ".join(f"x{i}_arr" for i in range(n))
    loads = "".join(f"    x{i} = tj.load(x{i}_arr, (0, 0), (BR, BC))\n" for i in range(n))
    body = f"    acc = ({expr}).to(tj.float32) + tj.zeros((BR, BC), tj.float32)\n"
    if loop:   # a runtime loop that adds the expression `reps` times, then divides back
        body = ("    acc = tj.zeros((BR, BC), tj.float32)\n    for _ in range(reps):\n"
                f"        acc = acc + ({expr}).to(tj.float32)\n    acc = acc / reps\n")   # (BR, BC) already
    return (f"def fuzzed({args}, out, reps, BR: tj.constexpr, BC: tj.constexpr):\n{loads}{body}"
            "    tj.store(out, (0, 0), acc)\n")


def _compile(n: int, expr: str, loop: bool):
    src = _kernel_source(n, expr, loop)
    name = f"fuzzed_{abs(hash(src))}.py"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    namespace = {"tj": tj}
    exec(compile(src, name, "exec"), namespace)
    return tj.kernel(namespace["fuzzed"]), src


def _check(program, backends, wide: bool = False):
    rows, cols, br, bc, arrays, expr, loop = program
    kernel, src = _compile(len(arrays), expr.src, loop)
    expected = expr.value.astype(np.float32).astype(np.float64)[:rows, :cols]
    expected = np.broadcast_to(expected, (rows, cols))
    tol = 1e-2 if any(a.dtype == np.float16 for a in arrays) or "float16" in expr.src else 1e-5
    atol = tol * 4
    if wide:       # float32 sums of 32K terms in another order: relative to the largest value
        from tilejit.passes.chunk_rows import plan_chunks
        k = kernel
        specs, consts, _ = k.specialise(k.bind((*arrays, np.zeros((rows, cols), np.float32), 3), {"BR": br, "BC": bc}))
        assert plan_chunks(k.tile_ir(specs, consts)) is not None, src
        finite = np.abs(expected[np.isfinite(expected)])
        tol, atol = max(tol, 1e-3), max(tol, 1e-3) * (finite.max() if finite.size else 1.0)
    for backend in backends:
        os.environ["TILEJIT_BACKEND"] = backend
        out = np.full((rows, cols), np.nan, np.float32)
        kernel[(1,)](*arrays, out, 3, BR=br, BC=bc)
        np.testing.assert_allclose(out, expected, rtol=tol, atol=atol,
                                   err_msg=f"{backend}:\n{src}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_kernels_match_numpy_on_the_cpu_backends(program):
    saved = os.environ.get("TILEJIT_BACKEND")
    try:
        _check(program, ("interpret", "emulate"))
    finally:
        os.environ.pop("TILEJIT_BACKEND", None) if saved is None else os.environ.__setitem__("TILEJIT_BACKEND", saved)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(wide=True))
def test_random_row_kernels_past_the_registers_match_numpy(program):
    """The same generator over rows that ``chunk_rows`` splits (emulate runs the split
    program; interpret runs the tile IR as written)."""
    saved = os.environ.get("TILEJIT_BACKEND")
    try:
        _check(program, ("interpret", "emulate"), wide=True)
    finally:
        os.environ.pop("TILEJIT_BACKEND", None) if saved is None else os.environ.__setitem__("TILEJIT_BACKEND", saved)


@pytest.mark.gpu
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_kernels_match_numpy_on_the_gpu(program):
    saved = os.environ.get("TILEJIT_BACKEND")
    try:
        _check(program, ("cuda",))
    finally:
        os.environ.pop("TILEJIT_BACKEND", None) if saved is None else os.environ.__setitem__("TILEJIT_BACKEND", saved)


# ----------------------------------------------------------------------- invalid launches
@tj.kernel
def copy_kernel(x, y, B: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (0,), (B,)))


INVALID = st.one_of(
    st.tuples(st.just("grid"), st.sampled_from([(0,), (-1,), (2**31,), (1, 70000), (1.5,), ("a",), ()])),
    st.tuples(st.just("B"), st.sampled_from([0, -4, 1.5, "8", None, 2**40])),
    st.tuples(st.just("x"), st.sampled_from([np.zeros((2, 2), np.float32), np.zeros(8, np.complex64),
                                             "text", None, [1.0, 2.0]])),
    st.tuples(st.just("warps"), st.sampled_from([0, 3, 64, -1, 2.0])),
)


@settings(max_examples=40, deadline=None)
@given(INVALID, st.sampled_from(["interpret", "emulate"]))
def test_random_invalid_launches_raise_and_write_nothing(bad, backend):
    saved = os.environ.get("TILEJIT_BACKEND")
    os.environ["TILEJIT_BACKEND"] = backend
    try:
        what, value = bad
        x, y = np.ones(8, np.float32), np.full(8, 7.0, np.float32)
        grid, consts, warps = (1,), {"B": 8}, 4
        if what == "grid":
            grid = value
        elif what == "B":
            consts = {"B": value}
        elif what == "x":
            x = value
        else:
            warps = value
        with pytest.raises(tj.TilejitError):
            copy_kernel[grid](x, y, num_warps=warps, **consts)
        assert (y == 7.0).all()
    finally:
        os.environ.pop("TILEJIT_BACKEND", None) if saved is None else os.environ.__setitem__("TILEJIT_BACKEND", saved)
