"""Control flow the frontend recovers from bytecode, checked against plain Python/NumPy: runtime
``if`` arms that assign tuples or values of different kinds, loop-carried Python numbers that a
tile re-types, runtime ``while`` loops with several carried values, compile-time ``while`` and
``for`` that fold away, and ``if``/``else`` chains whose arms are compile-time bools (mutants of
``frontend/control.py`` that the suite did not notice)."""
import numpy as np
import pytest

import tilejit as tj

from conftest import compile_source


@tj.kernel
def branches(x, y, n, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    r = tj.program_id(0) + n
    if r > 2:
        a, b = t, t * 2
    else:
        a, b = t * 3, t
    acc = 0                                   # a Python number, re-typed by the loop
    for i in range(n):
        acc += t * i
    i, s, c = 0, t * 0, 1.0
    while i < n:
        s += t
        c = c * 2
        i += 1
    k = 1
    while k < B:                              # compile-time: folds to 8 for B = 5
        k *= 2
    flag = r > 4 if k == 8 else r > 100       # a compile-time choice between runtime bools
    tj.store(y, (0,), a + 10 * b + 100 * acc + 1000 * s + c + k * 10000 + tj.where(flag, 1e5, 0.0))


@pytest.mark.parametrize("n", [0, 1, 3, 6])
def test_runtime_control_flow_matches_python(n, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.arange(1, 6, dtype=np.float32)
    y = np.zeros(5, np.float32)
    branches[(1,)](x, y, n, B=5)
    t = x.astype(np.float64)
    a, b = (t, t * 2) if n > 2 else (t * 3, t)
    acc = sum(t * i for i in range(n)) if n else 0.0
    want = a + 10 * b + 100 * acc + 1000 * t * n + 2.0 ** n + 8 * 10000 + (1e5 if n > 4 else 0.0)
    np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_the_same_on_the_compiled_path(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(1, 6, dtype=np.float32)
    out = {}
    for n in (2, 5):
        y = np.zeros(5, np.float32)
        branches[(1,)](x, y, n, B=5)
        out[n] = y
    np.testing.assert_array_less(out[2], out[5])


@tj.kernel
def while_conditions(x, y, n, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    i, j = 0, 0
    while i < n and j < 5:                    # a runtime `and` in the exit test
        i += 1
        j += 2
    k = 0
    while k < n or k < 2:                     # a runtime `or`
        k += 1
    m = 0
    while not m >= n:                         # a negated test
        m += 3
    q = 1 if n > 2 else 2.5                   # Python numbers of two kinds joined by a runtime if
    p = 0
    while (p and p + 1) < n:                  # `and` as a value inside the exit test
        p += 1
    tj.store(y, (0,), t * 0 + i + 10 * j + 100 * k + 1000 * m + 10000 * q + 100000 * p)


@pytest.mark.parametrize("n", [0, 1, 2, 4, 7])
def test_while_exit_tests_and_joined_numbers_match_python(n, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    y = np.zeros(4, np.float32)
    while_conditions[(1,)](np.zeros(4, np.float32), y, n, B=4)
    i = j = 0
    while i < n and j < 5:
        i, j = i + 1, j + 2
    k = 0
    while k < n or k < 2:
        k += 1
    m = 0
    while not m >= n:
        m += 3
    q = 1 if n > 2 else 2.5
    p = 0
    while (p and p + 1) < n:
        p += 1
    np.testing.assert_array_equal(y, np.full(4, i + 10 * j + 100 * k + 1000 * m + 10000 * q + 100000 * p,
                                             np.float32))


@pytest.mark.parametrize("body, message", [
    ("if n > 0:\n        a = (t, t)\n    else:\n        a = (t, t, t)\n    tj.store(y, (0,), a[0])", "different compile-time values|runtime if"),
    ("i = 0\n    while i < n:\n        i += 1\n        if i > 3:\n            break\n    tj.store(y, (0,), t + i)", "`break` and `return` are not supported inside while loops"),
    ("if n > 0:\n        a = t\n    else:\n        a = 3000000000\n    tj.store(y, (0,), a)", "does not fit"),
    ("if n > 0:\n        a = t\n    else:\n        a = None\n    tj.store(y, (0,), a)", "different compile-time values"),
])
def test_branches_that_cannot_join_are_errors(body, message):
    from tilejit.specs import ArraySpec, ScalarSpec
    src = "def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,)).to(tj.int32)\n    " + body + "\n"
    with pytest.raises(tj.CompileError, match=message):
        compile_source(src, [ArraySpec(tj.float32, 1), ArraySpec(tj.int32, 1), ScalarSpec(tj.int32)], {"B": 4},
                       "control_kernel.py")


@tj.kernel
def static_loop_with_runtime_ifs(x, y, n, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    acc = t * 0
    for i in tj.static_range(4):                  # the unrolled loop's iterator lives across each if
        if n > i:
            acc += t * (i + 1)
        else:
            acc -= t
    tj.store(y, (0,), acc)


@pytest.mark.parametrize("n", [0, 2, 5])
def test_a_static_range_loop_around_runtime_ifs(n, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.arange(1, 5, dtype=np.float32)
    y = np.zeros(4, np.float32)
    static_loop_with_runtime_ifs[(1,)](x, y, n, B=4)
    want = sum(x * (i + 1) if n > i else -x for i in range(4))
    np.testing.assert_array_equal(y, want)


def _control_error(body: str, message: str):
    from tilejit.specs import ArraySpec, ScalarSpec
    src = "def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    " + body + "\n"
    with pytest.raises(tj.CompileError, match=message):
        compile_source(src, [ArraySpec(tj.float32, 1), ArraySpec(tj.float32, 1), ScalarSpec(tj.int32)], {"B": 4},
                       "control_kernel.py")


@pytest.mark.parametrize("body, message", [
    # a compile-time value that a runtime loop changes cannot be read after the loop ...
    ("mode = None\n    for i in range(n):\n        mode = 'seen'\n    tj.store(y, (0,), t if mode is None else t * 2)",
     "assigned inside a runtime loop and cannot be used after it"),
    ("mode = None\n    i = 0\n    while i < n:\n        mode = 'seen'\n        i += 1\n    tj.store(y, (0,), t if mode is None else t * 2)",
     "assigned inside a runtime loop and cannot be used after it"),
    # ... nor inside it, where its value depends on the iteration
    ("acc = t * 0\n    mode = None\n    for i in range(n):\n        if mode is None:\n            acc += t\n        mode = 'seen'\n    tj.store(y, (0,), acc)",
     "changes its compile-time value inside a runtime loop"),
    # a variable no branch left usable stays unusable when a later runtime if assigns it in one arm
    ("if n > 0:\n        a = t\n    else:\n        a = None\n    if n > 1:\n        a = t * 2\n    tj.store(y, (0,), a)",
     "different compile-time values"),
])
def test_compile_time_values_changed_by_runtime_control_flow_are_errors(body, message):
    _control_error(body, message)


@tj.kernel
def loop_with_constant_locals(x, y, n, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    scale, a_name, zed = 3, 2, 5                  # names on both sides of the loop variable's
    acc = t * 0
    for i in range(n):
        scale, a_name, zed = 3, 2, 5              # the same compile-time values: not carried
        acc += t * scale
    tj.store(y, (0,), acc + scale + 10 * a_name + 100 * zed)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_values_a_runtime_loop_leaves_unchanged_are_usable_after_it(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(1, 5, dtype=np.float32)
    y = np.zeros(4, np.float32)
    loop_with_constant_locals[(1,)](x, y, 3, B=4)
    np.testing.assert_array_equal(y, x * 9 + 3 + 20 + 500)


@tj.kernel
def nested_runtime_ifs(x, y, n, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    a = t
    if n > 0:
        if n > 2:                                  # the then-arm starts with its own runtime if
            a = t * 2
        else:
            a = t * 3
        a += 1
    else:
        if n < -2:
            a = t * 5
        a -= 1
    b = a * 10
    tj.store(y, (0,), a + b)


@pytest.mark.parametrize("n", [-5, -1, 0, 1, 2, 3])
def test_nested_runtime_ifs_at_the_start_of_an_arm(n, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.arange(1, 5, dtype=np.float32)
    y = np.zeros(4, np.float32)
    nested_runtime_ifs[(1,)](x, y, n, B=4)
    if n > 0:
        a = (x * 2 if n > 2 else x * 3) + 1
    else:
        a = (x * 5 if n < -2 else x) - 1
    np.testing.assert_array_equal(y, a * 11)


# --- more control.py survivors: each test below failed on at least one mutant of it ----------------
def _interpret(src: str, n: int, x: np.ndarray, B: int, monkeypatch, backend: str = "interpret"):
    """Run the kernel ``k(x, y, n, B)`` written as source on ``backend``; y has x's shape."""
    import linecache
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    linecache.cache["control_src.py"] = (len(src), None, src.splitlines(True), "control_src.py")
    namespace = {"tj": tj}
    exec(compile(src, "control_src.py", "exec"), namespace)
    y = np.zeros_like(x)
    tj.kernel(namespace["k"])[(1,)](x, y, n, B=B)
    return y


@pytest.mark.parametrize("n", [0, 2, 5])
def test_control_flow_far_into_a_long_kernel(n, monkeypatch):
    # past 256 bytecode instructions, instruction indices are ints CPython does not cache: an `is`
    # where `==` belongs would change the loops and ifs that start there
    pad = "".join(f"    a = a + {i % 7}\n" for i in range(120))
    src = ("def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    a = 0\n" + pad +
           "    i = 0\n    s = t * 0\n    while i < n:\n        if i % 2 == 0:\n            s += t\n"
           "        else:\n            s -= t * 3\n        i += 1\n"
           "    j = 0\n    while j < n:\n        j += 2\n"
           "    tj.store(y, (0,), s + a + 100 * j)\n")
    x = np.arange(1, 5, dtype=np.float32)
    a = sum(i % 7 for i in range(120))
    s = sum(x if i % 2 == 0 else -3 * x for i in range(n)) if n else 0 * x
    j = 0
    while j < n:
        j += 2
    np.testing.assert_array_equal(_interpret(src, n, x, 4, monkeypatch), s + a + 100 * j)


def test_a_while_true_far_into_a_long_kernel_is_reported_at_its_line():
    pad = "".join(f"    a = a + {i % 7}\n" for i in range(120))
    src = "def k(x, y, n, B: tj.constexpr):\n    a = 0\n" + pad + "    while True:\n        n = n + 1\n"
    from tilejit.specs import ArraySpec, ScalarSpec
    with pytest.raises(tj.CompileError, match="never exits") as err:
        compile_source(src, [ArraySpec(tj.float32, 1), ArraySpec(tj.float32, 1), ScalarSpec(tj.int32)], {"B": 4},
                       "control_long.py")
    assert "control_long.py:123" in str(err.value)


@pytest.mark.parametrize("n", [0, 3])
def test_a_python_int_a_loop_turns_into_a_float_is_carried_as_a_float(n, monkeypatch):
    # `step` is the int 1 before the loop and the float 1.0 in it: not "the same" compile-time value
    src = ("def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    step = 1\n"
           "    for i in range(n):\n        step = 1.0\n    tj.store(y, (0,), t + step)\n")
    x = np.full(4, 2 ** 24 + 1, np.int32)
    got = _interpret(src, n, x, 4, monkeypatch)
    # a float32 after the loop however often it ran: int32 + float32 1.0 rounds 2**24 + 1 to 2**24
    # first (and 2**24 + 1 back to 2**24); int32 + int 1 would give 2**24 + 2
    np.testing.assert_array_equal(got, np.full(4, 2 ** 24, np.int32))


@pytest.mark.parametrize("n", [-1, 1])
def test_different_compile_time_values_joined_by_a_runtime_if(n, monkeypatch):
    src = ("def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n"
           "    if n > 0:\n        k1, k2 = 3, B * 2\n    else:\n        k1, k2 = 2, B + B\n"
           "    r = tj.arange(0, k2)\n"                     # equal but distinct ints (512): still compile-time
           "    tj.store(y, (0,), t * k1 + tj.sum(r))\n")
    x = np.arange(1, 5, dtype=np.float32)
    got = _interpret(src, n, np.arange(1, 257, dtype=np.float32), 256, monkeypatch)
    np.testing.assert_array_equal(got, np.arange(1, 257) * (3 if n > 0 else 2) + sum(range(512)))


@pytest.mark.parametrize("n", [0, 1, 4])
def test_loop_bodies_that_keep_a_value_or_retype_a_number(n, monkeypatch):
    x = np.arange(1, 5, dtype=np.float32)
    cases = [  # (body, want): a value kept as it is, and numbers first carried as int scalars, then as tiles
        ("acc = 0\n    for i in range(n):\n        t = t\n        acc += t\n    tj.store(y, (0,), acc + t)", x * n + x),
        ("acc = t * 0\n    for i in range(n):\n        t = t\n        acc += t\n    tj.store(y, (0,), acc + t)", x * n + x),
        ("a, b = 0, 0\n    for i in range(n):\n        a = a + b + i\n        b = t\n    tj.store(y, (0,), t * 0 + a)",
         np.float32(sum(range(n))) + max(n - 1, 0) * x),
    ]
    for body, want in cases:
        src = "def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    " + body + "\n"
        for backend in ("interpret", "emulate"):                     # emulate: the verified, compiled path
            np.testing.assert_array_equal(_interpret(src, n, x, 4, monkeypatch, backend), want)


@pytest.mark.parametrize("n", [0, 2, 5])
def test_compile_time_tests_inside_a_while_condition(n, monkeypatch):
    src = ("def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n    p = 0\n"
           "    while (p if B > 2 else p + 1) < n:\n        p += 1\n"
           "    q = 0\n    while B > 2 and q < n:\n        q += 2\n"
           "    tj.store(y, (0,), t * 0 + p + 10 * q)\n")
    x = np.arange(1, 5, dtype=np.float32)
    q = 0
    while q < n:
        q += 2
    np.testing.assert_array_equal(_interpret(src, n, x, 4, monkeypatch), np.full(4, n + 10 * q, np.float32))


@pytest.mark.parametrize("body, message", [
    ("if n > 0:\n        a = (t, t, t)\n    else:\n        a = (t, t)\n    tj.store(y, (0,), a[0])",
     "different compile-time values|runtime if"),
    ("for i in range(n):\n        if i > 2:\n            break\n        t = t + 1\n    tj.store(y, (0,), t)",
     "`break` and `return` are not supported inside loops with runtime bounds"),
    ("best = None\n    for i in range(n):\n        best = t\n    tj.store(y, (0,), best)",
     "changes its compile-time value|cannot be used after it"),
    ("acc = t * 0\n    mode = None\n    for i in range(n):\n        acc += t\n        mode = 'seen'\n"
     "    tj.store(y, (0,), acc if mode is None else acc * 2)", "cannot be used after it"),
    ("a, b = 0, 0\n    for a, b in range(n):\n        t = t + 1\n    tj.store(y, (0,), t)",
     "the target of a runtime loop must be a single variable"),
])
def test_more_control_flow_that_is_refused(body, message):
    _control_error(body, message)


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_tuples_joined_by_a_runtime_if_and_a_walrus_in_a_while_condition(n, monkeypatch):
    src = ("def k(x, y, n, B: tj.constexpr):\n    t = tj.load(x, (0,), (B,))\n"
           "    if n > 1:\n        pair = (t, t * 2)\n    else:\n        pair = (t * 3, t)\n"
           "    j = 0\n    while (j := j + 1) < n:\n        t = t + 1\n"
           "    tj.store(y, (0,), pair[0] + 10 * pair[1] + 100 * t + 1000 * j)\n")
    x = np.arange(1, 5, dtype=np.float32)
    pair = (x, x * 2) if n > 1 else (x * 3, x)
    t, j = x.copy(), 0
    while (j := j + 1) < n:
        t = t + 1
    np.testing.assert_array_equal(_interpret(src, n, x, 4, monkeypatch), pair[0] + 10 * pair[1] + 100 * t + 1000 * j)
