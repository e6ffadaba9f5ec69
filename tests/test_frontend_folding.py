"""Compile-time Python in a kernel folds exactly as Python evaluates it: ``not``, ``and`` / ``or``
as conditions and as values, ``is`` / ``is not``, ``in`` / ``not in``, list literals, tuple
unpacking, and the tj.func nesting limit.  Each case is checked against plain Python (these were
mutants of the tracer that the suite did not notice)."""
import linecache

import numpy as np
import pytest

import tilejit as tj

from conftest import compile_source
from tilejit.specs import ArraySpec

OBJ = object()
EQUAL_1, EQUAL_2 = tuple([1, 2]), tuple([1, 2])      # equal, but two objects


LOGIC = """\
v = 0
if not A:
    v += 1
if A or B:
    v += 2
if A and B:
    v += 4
c = A or B
d = A and B
if c:
    v += 8
if d:
    v += 16
if A is B:
    v += 32
if A is not B:
    v += 64
if A in (0, 3):
    v += 128
if B not in (0, 3):
    v += 256
consts = [1, 2, 3, 4]
pair = [A, B, 7]
v = v + consts[2] * 1000 + pair[1] * 10000 + c * 100000 + d * 1000000
v = v + [5, 6, 7][2] * 10000000 + (1 + (A or B)) * 100000000 - (2 * (A and B)) * 100000000
"""


def _define(header: str, footer: str):
    """One function from the LOGIC lines: the same source runs as Python and as a kernel."""
    src = header + "".join(f"    {line}\n" for line in LOGIC.splitlines()) + footer
    linecache.cache["folding_logic.py"] = (len(src), None, src.splitlines(True), "folding_logic.py")
    namespace = {"tj": tj}
    exec(compile(src, "folding_logic.py", "exec"), namespace)
    return namespace["f"]


python_value = _define("def f(A, B):\n", "    return v\n")
folded = tj.kernel(_define("def f(out, A: tj.constexpr, B: tj.constexpr):\n",
                           "    tj.store(out, (0,), tj.zeros((1,), tj.int32) + v)\n"))


@pytest.mark.parametrize("a, b", [(0, 0), (0, 3), (3, 0), (3, 3), (2, 5), (5, 2), (1, 0)])
def test_compile_time_logic_folds_like_python(a, b, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    out = np.zeros(1, np.int32)
    folded[(1,)](out, A=a, B=b)
    assert out[0] == python_value(a, b)


SPECS = [ArraySpec(tj.float32, 2), ArraySpec(tj.float32, 2)]


def compile_src(src: str, specs=SPECS, **consts):
    return compile_source(src, specs, {"B": 4, **consts}, "folding_kernel.py",
                          OBJ=OBJ, EQUAL_1=EQUAL_1, EQUAL_2=EQUAL_2)


@pytest.mark.parametrize("names, rank, message", [
    ("M, N", 3, "cannot unpack 3 values into 2 names"),
    ("M, N", 1, "cannot unpack 1 values into 2 names"),
    ("M, N, K", 2, "cannot unpack 2 values into 3 names")])
def test_unpacking_the_wrong_number_of_values_is_refused(names, rank, message):
    src = (f"def k(x, y, B: tj.constexpr):\n    {names} = x.shape\n"
           "    tj.store(y, (0, 0), tj.zeros((B, B), tj.float32))\n")
    with pytest.raises(tj.CompileError, match=message):
        compile_src(src, [ArraySpec(tj.float32, rank), ArraySpec(tj.float32, 2)])


def test_in_on_a_runtime_value_is_refused():
    src = ("def k(x, y, B: tj.constexpr):\n    r = tj.program_id(0)\n    if r in (0, 1):\n"
           "        tj.store(y, (0, 0), tj.zeros((B, B), tj.float32))\n")
    with pytest.raises(tj.CompileError, match="`in` is only supported on compile-time values"):
        compile_src(src)


@pytest.mark.parametrize("mode, want", [("OBJ", 1.0), ("None", 2.0), ("EQUAL_2", 2.0)])
def test_is_compares_compile_time_objects_by_identity(mode, want):
    other = "EQUAL_1" if mode == "EQUAL_2" else "OBJ"
    src = (f"def k(x, y, B: tj.constexpr):\n    m = {mode}\n    v = 1.0 if m is {other} else 2.0\n"
           "    tj.store(y, (0, 0), tj.zeros((B, B), tj.float32) + v)\n")
    fn = compile_src(src)
    consts = [o.attrs for o in fn.walk() if o.op is tj.ir.TileOp.CONSTANT]
    values = [getattr(a, "value", None) for a in consts]
    assert want in values and 3.0 - want not in values, values


def _chain(depth: int) -> str:
    src = "@tj.func\ndef f0(t):\n    return t + 1\n" + "".join(
        f"@tj.func\ndef f{i}(t):\n    return f{i - 1}(t)\n" for i in range(1, depth))
    return src + f"def k(x, y, B: tj.constexpr):\n    tj.store(y, (0, 0), f{depth - 1}(tj.load(x, (0, 0), (B, B))))\n"


def test_tj_funcs_nest_exactly_to_the_limit():
    from tilejit.frontend.calls import _MAX_INLINE_DEPTH
    compile_src(_chain(_MAX_INLINE_DEPTH))
    with pytest.raises(tj.CompileError, match=f"nested more than {_MAX_INLINE_DEPTH} deep"):
        compile_src(_chain(_MAX_INLINE_DEPTH + 1))


@pytest.mark.parametrize("expr, message", [
    ("B // 0", "ZeroDivisionError in compile-time expression"),
    ("~1.5", "TypeError in compile-time expression"),
    ("B + 'a'", "TypeError in compile-time expression")])
def test_failing_compile_time_arithmetic_is_a_compile_error(expr, message):
    src = f"def k(x, y, B: tj.constexpr):\n    v = {expr}\n    tj.store(y, (0, 0), tj.zeros((B, B), tj.float32) + v)\n"
    with pytest.raises(tj.CompileError, match=message):
        compile_src(src)


@tj.kernel
def runtime_ops(x, y, z, B: tj.constexpr):
    t = tj.load(x, (0, 0), (B, B))
    tj.store(y, (0, 0), (t | 3) + (t ^ 5) * 100 + (t >> 1) * 10000)
    f = t.to(tj.float32)
    tj.store(z, (0, 0), f @ f)                                  # the operator, not a call


def test_runtime_bitwise_operators_and_matmul_keep_their_meaning(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.arange(16, dtype=np.int32).reshape(4, 4)
    y = np.zeros((4, 4), np.int32)
    z = np.zeros((4, 4), np.float32)
    runtime_ops[(1,)](x, y, z, B=4)
    np.testing.assert_array_equal(y, (x | 3) + (x ^ 5) * 100 + (x >> 1) * 10000)
    np.testing.assert_array_equal(z, x.astype(np.float64) @ x)


@tj.kernel
def keyword_out_of_order(x, y, B: tj.constexpr):
    cols = tj.arange(0, B)[None, :]
    tj.store(y, (0, 0), tj.load(x, (0, 0), (1, B), mask=cols < 2))     # `other` left to its default


def test_keywords_that_skip_a_parameter_bind_by_name(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.arange(1, 5, dtype=np.float32)[None, :]
    y = np.full((1, 4), -1, np.float32)
    keyword_out_of_order[(1,)](x, y, B=4)
    np.testing.assert_array_equal(y, [[1, 2, 0, 0]])
