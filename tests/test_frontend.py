"""Frontend: Python kernels -> tile IR text, one test per construct family."""
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilejit as tj
from tilejit import dtypes, ir
from tilejit.errors import CompileError, TilejitError
from tilejit.frontend import compile_tile_ir
from tilejit.frontend.bytecode import CANONICAL, normalize
from tilejit.frontend.tracer import Tracer
from tilejit.specs import ArraySpec, ScalarSpec

F32, F16, I32, I8 = dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8
SCALE = 3          # a module global read by a kernel: a compile-time constant


def A(dt, rank=1):
    return ArraySpec(dt, rank)


def S(dt):
    return ScalarSpec(dt)


def compile_text(fn, specs, **constexprs) -> str:
    return ir.print_function(compile_tile_ir(fn, specs, constexprs))


def expect(text: str, expected: str):
    assert text == textwrap.dedent(expected).strip(), text


def ops_of(text: str) -> list[str]:
    """The op names of every line, in order (``%3 = add %1, %2 : t`` -> ``add``)."""
    out = []
    for line in text.splitlines()[1:-1]:
        body = line.strip().split(" = ", 1)[-1]
        if body and body[0] not in "}^":
            out.append(body.split()[0])
    return out


# --- straight-line code ------------------------------------------------------------------------------
def test_arithmetic_with_weak_and_strong_promotion():
    def k(x, s):
        t = tj.load(x, (0,), (4,))
        tj.store(x, (0,), t * s + 1)
    expect(compile_text(k, [A(I8), S(F32)]), """
        func @k(%0: array<1xint8>, %1: float32) {
          %2 = constant {value=0} : int32
          %3 = load %0, %2 {other=0} : tile<4xint8>
          %4 = cast %3 : tile<4xfloat32>
          %5 = splat %1 : tile<4xfloat32>
          %6 = mul %4, %5 : tile<4xfloat32>
          %7 = constant {value=1.0} : tile<4xfloat32>
          %8 = add %6, %7 : tile<4xfloat32>
          %9 = constant {value=0} : int32
          %10 = cast %8 : tile<4xint8>
          store %0, %9, %10
        }""")


def test_constexpr_arithmetic_is_folded():
    def k(x, B: tj.constexpr):
        tj.store(x, (0,), tj.zeros((tj.cdiv(B, 3) * 2,), tj.float32) + B // 2)
    text = compile_text(k, [A(F32)], B=10)
    assert "tile<8xfloat32>" in text and "{value=5.0}" in text
    assert "floordiv" not in text and "mul" not in text


def test_load_store_2d_offsets_other_and_dims():
    def k(x, y, B: tj.constexpr):
        row = tj.program_id(0)
        t = tj.load(x, (row, x.shape[1] - B), (1, B), other=-tj.inf)
        tj.store(y, (row, 0), t + y.shape[0] + x.shape[1])
    text = compile_text(k, [A(F32, 2), A(F32, 2)], B=16)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[1:3] == ["%2 = dim %0 {axis=1} : int32", "%3 = dim %1 {axis=0} : int32"]
    assert "%7 = load %0, %4, %6 {other=-inf} : tile<1x16xfloat32>" in lines
    assert text.count("dim ") == 2                      # x.shape[1] read twice: one DIM


def test_reductions():
    def k(x, y):
        t = tj.load(x, (0, 0), (4, 8))
        a = tj.sum(t)
        b = tj.max(t, axis=0)
        c = tj.argmax(t, 1, keepdims=True)
        tj.store(y, (0, 0), c + a + b)
    text = compile_text(k, [A(F16, 2), A(F32, 2)])
    assert "%5 = reshape %4 : tile<32xfloat16>" in text
    assert "reduce %5 {kind=sum, axis=0, keepdims=False} : float16" in text
    assert "reduce %4 {kind=max, axis=0, keepdims=False} : tile<8xfloat16>" in text
    assert "reduce %4 {kind=argmax, axis=1, keepdims=True} : tile<4x1xint32>" in text


def test_for_loop_with_iter_args():
    def k(x, n):
        acc = tj.zeros((4,), tj.float32)
        unchanged = tj.zeros((4,), tj.float32)
        for i in range(n):
            acc = acc + tj.load(x, (i,), (4,))
        tj.store(x, (0,), acc + unchanged)
    expect(compile_text(k, [A(F32), S(I32)]), """
        func @k(%0: array<1xfloat32>, %1: int32) {
          %2 = constant {value=0.0} : tile<4xfloat32>
          %3 = constant {value=0.0} : tile<4xfloat32>
          %4 = constant {value=0} : int32
          %5 = constant {value=1} : int32
          %6 = for %4, %1, %5, %2 {stages=0, unroll=False} : tile<4xfloat32> {
            ^(%7: int32, %8: tile<4xfloat32>):
            %9 = load %0, %7 {other=0.0} : tile<4xfloat32>
            %10 = add %8, %9 : tile<4xfloat32>
            yield %10
          }
          %11 = add %6, %3 : tile<4xfloat32>
          %12 = constant {value=0} : int32
          store %0, %12, %11
        }""")


def test_tj_range_stages_negative_step_and_promoted_python_int():
    def k(x, n):
        count = 0
        for i in tj.range(n, 0, -2, stages=3):
            count += 1
        tj.store(x, (0,), count)
    text = compile_text(k, [A(I32), S(I32)])
    assert "for %1, %2, %3, %4 {stages=3, unroll=False} : int32" in text
    assert "%3 = constant {value=-2} : int32" in text


def test_static_range_unrolls():
    def k(x, N: tj.constexpr):
        t = tj.load(x, (0,), (4,))
        for i in tj.static_range(N):
            t = t * (i + 2)
        for w in (1.5, 2.5):
            t = t + w
        tj.store(x, (0,), t)
    text = compile_text(k, [A(F32)], N=3)
    assert "for " not in text
    assert ops_of(text).count("mul") == 3 and ops_of(text).count("add") == 2
    assert "{value=4.0}" in text and "{value=2.5}" in text


def test_if_else_with_results():
    def k(x, n):
        t = tj.load(x, (0,), (2,))
        if n > 0:
            t = t + 1.0
            m = 1
        else:
            m = 2
        tj.store(x, (0,), t * m)
    expect(compile_text(k, [A(F32), S(I32)]), """
        func @k(%0: array<1xfloat32>, %1: int32) {
          %2 = constant {value=0} : int32
          %3 = load %0, %2 {other=0.0} : tile<2xfloat32>
          %4 = constant {value=0} : int32
          %5 = gt %1, %4 : bool
          %6, %7 = if %5 : tile<2xfloat32>, int32 {
            %8 = constant {value=1.0} : tile<2xfloat32>
            %9 = add %3, %8 : tile<2xfloat32>
            %10 = constant {value=1} : int32
            yield %9, %10
          } {
            %11 = constant {value=2} : int32
            yield %3, %11
          }
          %12 = cast %7 : float32
          %13 = splat %12 : tile<2xfloat32>
          %14 = mul %6, %13 : tile<2xfloat32>
          %15 = constant {value=0} : int32
          store %0, %15, %14
        }""")


def test_constexpr_if_is_folded_including_strings():
    def k(x, ACT: tj.constexpr, B: tj.constexpr):
        t = tj.load(x, (0,), (B,))
        if ACT == "relu":
            t = tj.maximum(t, 0.0)
        elif B > 64:
            t = tj.exp(t)
        else:
            t = -t
        tj.store(x, (0,), t)
    relu = ops_of(compile_text(k, [A(F32)], ACT="relu", B=4))
    assert relu[:4] == ["constant", "load", "constant", "maximum"]
    assert "exp" in ops_of(compile_text(k, [A(F32)], ACT="x", B=128))
    text = compile_text(k, [A(F32)], ACT="x", B=4)
    assert "neg" in ops_of(text) and "if" not in ops_of(text)


def test_while_loop():
    def k(x, n):
        i = 0
        while i < n:
            i += 2
        tj.store(x, (0,), i)
    expect(compile_text(k, [A(I32), S(I32)]), """
        func @k(%0: array<1xint32>, %1: int32) {
          %2 = constant {value=0} : int32
          %3 = lt %2, %1 : bool
          %4 = if %3 : int32 {
            %5 = constant {value=0} : int32
            %6 = while %5 : int32 {
              ^(%7: int32):
              %8 = constant {value=2} : int32
              %9 = add %7, %8 : int32
              %10 = lt %9, %1 : bool
              yield %10, %9
            }
            yield %6
          } {
            %11 = constant {value=0} : int32
            yield %11
          }
          %12 = constant {value=0} : int32
          %13 = splat %4 : tile<1xint32>
          store %0, %12, %13
        }""")


@tj.func
def clamp_or_negate(t, flag):
    if flag > 0:
        return tj.minimum(t, 1.0)
    else:
        return -t


@tj.func
def twice(t):
    return clamp_or_negate(t, 1) * 2


def test_tj_func_inlined_with_returns_in_both_arms():
    def k(x, n):
        tj.store(x, (0,), clamp_or_negate(tj.load(x, (0,), (4,)), n))
    text = compile_text(k, [A(F32), S(I32)])
    assert ops_of(text) == ["constant", "load", "constant", "gt", "if", "constant", "minimum", "yield",
                            "neg", "yield", "constant", "store"]
    assert "%6 = if %5 : tile<4xfloat32> {" in text


def test_tj_func_nested_and_constant_branch_and_deps():
    def k(x):
        tj.store(x, (0,), twice(tj.load(x, (0,), (4,))) * SCALE)
    fn = compile_tile_ir(k, [A(F32)], {})
    text = ir.print_function(fn)
    assert "if" not in ops_of(text) and "minimum" in text and "{value=3.0}" in text
    assert fn.meta["deps"]["SCALE"] == 3
    assert fn.meta["deps"]["twice"] is twice
    assert "twice.clamp_or_negate" in fn.meta["deps"]


def test_closure_variables_are_constants():
    width = 8

    def k(x):
        tj.store(x, (0,), tj.zeros((width,), tj.float32))
    fn = compile_tile_ir(k, [A(F32)], {})
    assert "tile<8xfloat32>" in ir.print_function(fn) and fn.meta["deps"]["width"] == 8


def test_early_return_and_continue():
    def k(x, n):
        if tj.program_id(0) >= n:
            return
        acc = 0.0
        for i in range(n):
            if i % 2 == 0:
                continue
            acc += 1.0
        tj.store(x, (0,), acc)
    text = compile_text(k, [A(F32), S(I32)])
    assert ops_of(text)[:4] == ["program_id", "ge", "if", "yield"]
    assert "\n    store %0" in text                  # the rest of the kernel is in the else arm
    assert ops_of(text).count("if") == 2 and ops_of(text)[-2:] == ["store", "yield"]


def test_runtime_and_or_and_ternary():
    def k(x, n, m):
        c = (n > 0) and (m > 0)
        v = 1.0 if c else 2.0
        tj.store(x, (0,), v)
    text = compile_text(k, [A(F32), S(I32), S(I32)])
    assert ops_of(text).count("if") == 2
    assert "%8 = if %5 : float32" in text


def test_shape_sugar_and_methods():
    def k(x, y):
        t = tj.load(x, (0,), (4,))
        u = t[:, None] + t[None, :]
        tj.store(y, (0, 0), (u.T.reshape((4, 4)) * u.sum()).to(tj.float16))
    text = compile_text(k, [A(F32), A(F16, 2)])
    for line in ("reshape %3 : tile<4x1xfloat32>", "reshape %3 : tile<1x4xfloat32>",
                 "trans %8 {perm=(1, 0)} : tile<4x4xfloat32>", "cast %13 : tile<4x4xfloat16>"):
        assert line in text


def test_runtime_cdiv_is_inlined_and_math_maps_to_tile_ops():
    import math

    def k(x, n, B: tj.constexpr):
        tj.store(x, (0,), math.sqrt(tj.cdiv(n, B) * 1.0) + math.pi)
    ops = ops_of(compile_text(k, [A(F32), S(I32)], B=4))
    assert ["neg", "floordiv", "neg"] == [o for o in ops if o in ("neg", "floordiv")]
    assert "sqrt" in ops


def test_nested_runtime_loops():
    def k(x, n, m):
        acc = tj.zeros((2,), tj.float32)
        for i in range(n):
            for j in range(m):
                acc += tj.load(x, (i * m + j,), (2,))
        tj.store(x, (0,), acc)
    text = compile_text(k, [A(F32), S(I32), S(I32)])
    assert ops_of(text).count("for") == 2 and ops_of(text).count("yield") == 2


# --- meta, params, errors of the entry point -------------------------------------------------------
def test_meta_and_constexpr_defaults():
    def k(x, n, B: tj.constexpr = 8, C: "tj.constexpr" = 2):
        tj.store(x, (n,), tj.zeros((B * C,), tj.float32))
    fn = compile_tile_ir(k, [A(F32), S(I32)], {"C": 4})
    assert fn.meta["constexprs"] == {"B": 8, "C": 4} and fn.arg_names == ["x", "n"]
    assert fn.meta["specs"] == [A(F32), S(I32)]
    assert "tile<32xfloat32>" in ir.print_function(fn)
    with pytest.raises(CompileError, match="constexpr parameter 'B'"):
        def needs(x, B: tj.constexpr):
            pass
        compile_tile_ir(needs, [A(F32)], {})


def test_tj_func_outside_kernel_raises():
    with pytest.raises(TilejitError, match="only be used inside"):
        twice(1.0)
    assert twice.__tilejit_func__ and twice.fn.__name__ == "twice"


def test_loop_variable_after_runtime_loop_is_an_error():
    def k(x, n):
        for i in range(n):
            pass
        tj.store(x, (i,), 1.0)
    with pytest.raises(CompileError, match="'i' is assigned inside a runtime loop"):
        compile_tile_ir(k, [A(F32), S(I32)], {})


def test_static_loop_with_constexpr_break():
    def k(x, N: tj.constexpr):
        t = tj.load(x, (0,), (4,))
        for i in tj.static_range(10):
            if i == N:
                break
            t = t + 1.0
        tj.store(x, (0,), t)
    assert ops_of(compile_text(k, [A(F32)], N=3)).count("add") == 3


# --- the normalisation table -------------------------------------------------------------------------
def test_canonical_instructions_all_have_handlers():
    def k(x, y, n, B: tj.constexpr):
        a, b = (n, B)
        for i in range(n):
            while a < b:
                a = -a + 1 if a else a
        tj.store(x, (a, b), tj.load(y, (n,), (B,), other=0.0)[None, :])
    ops = {ins.op for ins in normalize(k.__code__)}
    assert ops <= CANONICAL and "UNSUPPORTED" not in ops
    assert {"FOR_ITER", "CALL_KW", "BINARY_OP", "SUBSCR", "JUMP"} <= ops
    assert all(hasattr(Tracer, "op_" + op) for op in CANONICAL)
    assert all(ins.loc.line > 0 for ins in normalize(k.__code__))


def test_only_the_normalisation_table_reads_the_python_version():
    import pathlib
    import tilejit.frontend
    package = pathlib.Path(tilejit.frontend.__file__).parent
    readers = [p.name for p in package.glob("*.py") if "version_info" in p.read_text()]
    assert readers == ["bytecode.py"]


def test_while_with_compound_condition_and_do_while_break():
    def k(x, n):
        i = 0
        while i < n and i < 10:
            i += 1
        j = n
        while True:
            j = j - 1
            if j < 0:
                break
        tj.store(x, (i,), j)
    text = compile_text(k, [A(I32), S(I32)])
    assert ops_of(text).count("while") == 2
    # the `and` of the loop test short-circuits through an IF yielding the continue flag
    assert "yield %13" in text and "%14 = constant {value=False} : bool" in text


def test_chained_comparison_on_runtime_and_constexpr_values():
    def k(x, n, B: tj.constexpr):
        inside = 0 < n < B
        tj.store(x, (0,), tj.where(inside, 1.0, 2.0) + (0 < B < 10))
    text = compile_text(k, [A(F32), S(I32)], B=4)
    assert ops_of(text)[:3] == ["constant", "lt", "if"] and "{value=1.0}" in text


def test_value_carried_only_once_a_python_int_is_promoted():
    def k(x, n):
        flag = 0
        t = tj.zeros((2,), tj.float32)
        for i in range(n):
            if flag == 1:
                t = t + 1.0
            flag = 1
        tj.store(x, (0,), t)
    text = compile_text(k, [A(F32), S(I32)])
    assert "for %3, %1, %4, %2, %5 {stages=0, unroll=False} : tile<2xfloat32>, int32" in text


def test_array_shape_unpacking_slicing_and_ndim():
    def k(x):
        m, n = x.shape
        rest = x.shape[1:]
        tj.store(x, (m - 1, rest[0] - 1), tj.zeros((1, x.ndim), tj.float32) + n)
    text = compile_text(k, [A(F32, 2)])
    assert ops_of(text)[:2] == ["dim", "dim"] and text.count("dim ") == 2
    assert "tile<1x2xfloat32>" in text


def test_module_attribute_reads_are_recorded_as_deps():
    import types
    config = types.ModuleType("kernel_config")
    config.WIDTH = 4

    def k(x):
        tj.store(x, (0,), tj.zeros((config.WIDTH,), tj.float32))
    fn = compile_tile_ir(k, [A(F32)], {})
    assert fn.meta["deps"]["kernel_config.WIDTH"] == 4


def test_if_joins_a_weak_python_number_with_a_runtime_value():
    def k(x, n):
        v = n
        if n > 4:
            v = 0.5
        tj.store(x, (0,), v)
    text = compile_text(k, [A(F32), S(I32)])
    assert "if %3 : float32" in text and "cast %1 : float32" in text


# --- control flow semantics, run on the tile interpreter ------------------------------------------------
def _collatz_steps(x, n):
    steps = 0
    while n != 1 and steps < 100:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    tj.store(x, (0,), steps)


def _mixed_loops(x, n, B: tj.constexpr):
    total = 0.0
    for i in tj.range(n, -1, -1, stages=2):          # n, n-1, ..., 0
        if i % 3 == 0:
            continue
        for j in tj.static_range(B):
            if j > i:
                break
            total += clamp_or_negate(tj.full((1,), i * 0.5 + j, tj.float32), i - 2).sum()
    tj.store(x, (0,), total)


def _python_mixed(n, B):
    total = 0.0
    for i in range(n, -1, -1):
        if i % 3 == 0:
            continue
        for j in range(B):
            if j > i:
                break
            v = i * 0.5 + j
            total += min(v, 1.0) if i - 2 > 0 else -v
    return total


@given(st.integers(1, 40))
def test_while_and_nested_ifs_run_like_python(n):
    from tilejit.backends.interpret import run
    out = np.zeros(1, np.int32)
    run(compile_tile_ir(_collatz_steps, [A(I32), S(I32)], {}), 1, [out, n])
    steps, m = 0, n
    while m != 1 and steps < 100:
        m, steps = (m // 2 if m % 2 == 0 else 3 * m + 1), steps + 1
    assert out[0] == steps


@given(st.integers(-2, 12), st.sampled_from([1, 3]))
def test_runtime_and_static_loops_with_continue_break_and_tj_func_run_like_python(n, B):
    from tilejit.backends.interpret import run
    out = np.zeros(1, np.float32)
    run(compile_tile_ir(_mixed_loops, [A(F32), S(I32)], {"B": B}), 1, [out, n])
    assert out[0] == pytest.approx(_python_mixed(n, B), rel=1e-6)
