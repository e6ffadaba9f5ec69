"""Compile errors: each names the construct, points at the user's line with a caret, and gets a
traceback whose last frame is that line (no compiler frames)."""
import importlib.util
import inspect
import os

import pytest

import tilejit as tj
from tilejit import dtypes
from tilejit.errors import CompileError, user_traceback
from tilejit.frontend import compile_tile_ir
from tilejit.specs import ArraySpec, ScalarSpec

F32, I32 = dtypes.float32, dtypes.int32
PACKAGE = os.path.dirname(os.path.abspath(tj.__file__))
G = 1


def marked_line(fn) -> int:
    """Line number of the line in ``fn``'s source that carries the ``# <-`` marker."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if "# <-" in line)


def compile_error(fn, specs=None, **constexprs) -> CompileError:
    specs = specs if specs is not None else [ArraySpec(F32, 1), ScalarSpec(I32)]
    with pytest.raises(CompileError) as info:
        compile_tile_ir(fn, specs, constexprs)
    return info.value


def check_points_at_marker(err: CompileError, fn, fragment: str, kernel: str | None = None) -> None:
    line = marked_line(fn)
    text = str(err)
    assert fragment in text, text
    assert f"{__file__}:{line}:" in text, text
    src_line = inspect.getsourcelines(fn)[0][line - fn.__code__.co_firstlineno].strip()
    rendered = text.splitlines()
    assert rendered[1].strip() == src_line.split("  # <-")[0].strip() or rendered[1].strip() == src_line
    assert set(rendered[2].strip()) == {"^"}, text
    assert f"in kernel '{kernel or fn.__name__}'" in text
    tb = user_traceback(err).__traceback__
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert frames[-1] == (__file__, line)
    assert not any(os.path.abspath(f).startswith(PACKAGE) for f, _ in frames)


# --- unsupported Python constructs ------------------------------------------------------------------
def k_try(x, n):
    try:  # <-
        n = n + 1
    except ValueError:
        pass


def k_with(x, n):
    with open("f"):  # <-
        pass


def k_print(x, n):
    print(n)  # <-


def k_lambda(x, n):
    f = (lambda v: v)  # <-
    return f


def k_comprehension(x, n):
    t = [i for i in range(3)]  # <-
    return t


def k_generator(x, n):
    yield n  # <-


def k_break(x, n):
    for i in range(n):
        if i > 2:  # <-
            break


def k_return_value(x, n):
    return n  # <-


def k_global_store(x, n):
    global G
    G = 2  # <-


def k_attr_store(x, n):
    x.foo = 1  # <-


def k_item_store(x, n):
    t = tj.zeros((4,), tj.float32)
    t[0] = 1.0  # <-


def k_star_args(x, n):
    args = (1, 2)
    tj.maximum(*args)  # <-


def k_dict(x, n):
    d = {"a": n}  # <-
    return d


def k_numpy_call(x, n):
    import_free = os.path.join("a", "b")  # <-
    return import_free


def k_raise(x, n):
    raise ValueError("no")  # <-


@pytest.mark.parametrize("fn, fragment", [
    (k_try, "`try` is not supported in kernels"),
    (k_with, "`with` is not supported in kernels"),
    (k_print, "call to print() is not supported"),
    (k_lambda, "lambdas"),
    (k_comprehension, "comprehensions"),
    (k_generator, "generators"),
    (k_break, "`break`"),
    (k_return_value, "kernels cannot return a value"),
    (k_global_store, "assignment to a global variable is not supported"),
    (k_attr_store, "attribute assignment is not supported"),
    (k_item_store, "item assignment is not supported"),
    (k_star_args, "star-arguments"),
    (k_dict, "dicts are not supported"),
    (k_numpy_call, "call to join() is not supported"),
    (k_raise, "`raise` is not supported"),
])
def test_unsupported_construct(fn, fragment):
    check_points_at_marker(compile_error(fn), fn, fragment)


# --- shape and type errors ---------------------------------------------------------------------------
def k_dot_k_mismatch(x, n):
    a = tj.zeros((16, 32), tj.float16)
    b = tj.zeros((16, 8), tj.float16)
    tj.dot(a, b)  # <-


def k_bad_broadcast(x, n):
    a = tj.zeros((4, 8), tj.float32)
    b = tj.zeros((3,), tj.float32)
    c = a + b  # <-
    return c


def k_runtime_shape(x, n):
    t = tj.load(x, (0,), (n,))  # <-
    return t


def k_carried_type_change(x, n):
    acc = tj.zeros((4,), tj.float32)
    for i in range(n):  # <-
        acc = acc.to(tj.float16)


def k_load_rank(x, n):
    t = tj.load(x, (0, 0), (4, 4))  # <-
    return t


def k_other_not_constant(x, n):
    t = tj.load(x, (0,), (4,), other=n)  # <-
    return t


def k_tile_condition(x, n):
    t = tj.load(x, (0,), (4,))
    if t > 0:  # <-
        pass


def k_one_branch_only(x, n):
    if n > 0:
        y = 1.0
    tj.store(x, (0,), y)  # <-


def k_weak_overflow(x, n):
    t = tj.zeros((4,), tj.uint8)
    u = t + 300  # <-
    return u


def k_undefined_name(x, n):
    tj.store(x, (0,), no_such_name)  # <-  # noqa: F821


@pytest.mark.parametrize("fn, fragment", [
    (k_dot_k_mismatch, "dot: K mismatch (32 vs 16)"),
    (k_bad_broadcast, "cannot broadcast shapes (4, 8) and (3,)"),
    (k_runtime_shape, "tile shape must be compile-time constant"),
    (k_carried_type_change, "loop-carried variable 'acc' changes type from tile<4xfloat32> to "
                            "tile<4xfloat16>"),
    (k_load_rank, "2 offset(s) given for the rank-1 array 'x'"),
    (k_other_not_constant, "`other` must be a compile-time number"),
    (k_tile_condition, "truth value of a tile<4xbool> is ambiguous"),
    (k_one_branch_only, "'y' is assigned in only one branch"),
    (k_weak_overflow, "300 does not fit in uint8"),
    (k_undefined_name, "name 'no_such_name' is not defined"),
])
def test_shape_and_type_errors(fn, fragment):
    check_points_at_marker(compile_error(fn), fn, fragment)


# --- errors inside a tj.func point at the tj.func's own line ----------------------------------------
@tj.func
def bad_helper(t):
    return t @ tj.zeros((3, 3), tj.float32)  # <-


def k_calls_bad_helper(x, n):
    bad_helper(tj.zeros((2, 2), tj.float32))


def test_error_inside_tj_func_points_at_its_line():
    err = compile_error(k_calls_bad_helper)
    assert "dot: K mismatch (2 vs 3)" in str(err)
    check_points_at_marker(err, bad_helper.fn, "K mismatch", kernel="k_calls_bad_helper")


def test_static_assert_on_constexpr(tmp_path):
    # written to a file of its own: pytest rewrites the asserts of test modules
    src = tmp_path / "assert_kernel.py"
    src.write_text("import tilejit as tj\n\n\ndef k(x, n, B: tj.constexpr):\n    assert B % 16 == 0\n")
    spec = importlib.util.spec_from_file_location("assert_kernel", src)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compile_tile_ir(module.k, [ArraySpec(F32, 1), ScalarSpec(I32)], {"B": 32})
    err = compile_error(module.k, B=8)
    assert "assertion failed" in str(err) and "assert B % 16 == 0\n" in str(err) + "\n"
    assert (err.loc.file, err.loc.line) == (str(src), 5)


def k_while_break(x, n):
    while n > 0:
        if n == 3:  # <-
            break
        n = n - 1


def k_while_return(x, n):
    while n > 0:
        n = n - 1
        if n == 3:  # <-
            return


def k_while_forever(x, n):
    while True:  # <-
        n = n + 1


def k_return_in_for(x, n):
    for i in range(n):
        if i == 3:  # <-
            return


@pytest.mark.parametrize("fn, fragment", [
    (k_while_break, "`break` and `return` are not supported inside while loops"),
    (k_while_return, "`break` and `return` are not supported inside while loops"),
    (k_while_forever, "never exits"),
    (k_return_in_for, "`break` and `return` are not supported inside loops with runtime bounds"),
])
def test_early_exits_from_runtime_loops(fn, fragment):
    check_points_at_marker(compile_error(fn), fn, fragment)
