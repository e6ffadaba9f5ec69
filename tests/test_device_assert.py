"""``tj.device_assert(cond, msg)``: compiled in only with ``debug=True`` or ``TILEJIT_DEBUG=1``;
a false element raises ``DeviceAssertError`` naming the kernel, the assert's line, the program and
the element, on every backend (on the GPU after the kernel ends, the context still usable)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj
from tilejit import ir
from tilejit.specs import ArraySpec

from conftest import HAVE_GPU, assemble_or_skip, body_error, compile_source

CPU = ["interpret", "emulate"]
ALL = CPU + [pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def checked_copy(x, y, B: tj.constexpr):
    rows = tj.program_id(0) * B
    t = tj.load(x, (rows, 0), (B, 4))
    tj.device_assert(t >= 0, "x must be non-negative")
    tj.store(y, (rows, 0), t * 2)


ASSERT_LINE = checked_copy.fn.__code__.co_firstlineno + 4     # (the decorator is the first line)


@tj.kernel
def scalar_check(x, n):
    tj.device_assert(n < 100, "n too big")
    tj.store(x, (tj.program_id(0),), tj.full((1,), n, tj.int32))


@tj.kernel
def loop_check(x, y, B: tj.constexpr):
    acc = tj.zeros((B,), tj.float32)
    for i in range(x.shape[0]):
        t = tj.load(x, (i, tj.program_id(0) * B), (1, B)).reshape((B,))
        tj.device_assert(t != 7)
        acc += t
    tj.store(y, (tj.program_id(0) * B,), acc)


@pytest.mark.parametrize("backend", ALL)
def test_without_debug_the_assert_compiles_to_nothing(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.delenv("TILEJIT_DEBUG", raising=False)
    x = -np.arange(32, dtype=np.float32).reshape(8, 4)
    y = np.zeros_like(x)
    checked_copy[(4,)](x, y, B=2)
    np.testing.assert_array_equal(y, 2 * x)
    seen = checked_copy.inspect(x, y, B=2)
    assert "  assert " in seen.tile_ir and "  assert " not in seen.simt_ir
    assert "tilejit_assert_record" not in (seen.ptx or "")


@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("warps", [1, 4])
def test_a_failed_assert_names_kernel_line_program_and_element(backend, warps, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.ones((8, 4), np.float32)
    x[5, 2] = -1                     # program 2 (rows 4, 5), element (1, 2)
    y = np.zeros_like(x)
    with pytest.raises(tj.DeviceAssertError) as err:
        checked_copy[(4,)](x, y, B=2, num_warps=warps, debug=True)
    text = str(err.value)
    assert "kernel 'checked_copy'" in text
    assert f"test_device_assert.py:{ASSERT_LINE}" in text
    assert "program (2, 0, 0), element (1, 2): x must be non-negative" in text
    assert "tj.device_assert(t >= 0" in text                 # the user's source line is shown
    x[5, 2] = 1                      # the same kernel runs again, and passes
    checked_copy[(4,)](x, y, B=2, num_warps=warps, debug=True)
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.parametrize("backend", ALL)
def test_tilejit_debug_turns_asserts_on(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.zeros(3, np.int32)
    scalar_check[(3,)](x, 200)                          # release: not checked
    np.testing.assert_array_equal(x, 200)
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    with pytest.raises(tj.DeviceAssertError, match=r"(?m)program \(0, 0, 0\): n too big$"):
        scalar_check[(3,)](x, 200)
    scalar_check[(3,)](x, 5)
    np.testing.assert_array_equal(x, 5)


@pytest.mark.parametrize("backend", ALL)
def test_a_fast_relaunch_does_not_skip_the_check(backend, monkeypatch):
    """A launch without debug first (its fast path cached), then the same arguments with it."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.zeros(2, np.int32)
    if backend == "cuda":
        import cupy
        x = cupy.asarray(x)
    for _ in range(2):
        scalar_check[(2,)](x, 500)
    with pytest.raises(tj.DeviceAssertError, match="n too big"):
        scalar_check[(2,)](x, 500, debug=True)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 5), st.integers(0, 2), st.integers(0, 7), st.sampled_from(CPU))
def test_the_reported_element_is_a_failing_one_in_loops(i, program, j, backend):
    """Property: with one 7 in x, the report names the program and column of the 7."""
    import os
    old = os.environ.get("TILEJIT_BACKEND")
    os.environ["TILEJIT_BACKEND"] = backend
    try:
        x = np.ones((6, 24), np.float32)
        x[i, program * 8 + j] = 7
        y = np.zeros(24, np.float32)
        with pytest.raises(tj.DeviceAssertError, match=rf"(?m)program \({program}, 0, 0\), element \({j}\)$"):
            loop_check[(3,)](x, y, B=8, debug=True)
        x[i, program * 8 + j] = 1
        loop_check[(3,)](x, y, B=8, debug=True)
        np.testing.assert_array_equal(y, x.sum(0))
    finally:
        os.environ.pop("TILEJIT_BACKEND") if old is None else os.environ.__setitem__("TILEJIT_BACKEND", old)


@tj.kernel
def in_range(x, y, B: tj.constexpr):
    rows = tj.program_id(0) * B
    tj.device_assert(rows < x.shape[0], "a program past the rows")
    tj.store(y, (rows, 0), tj.load(x, (rows, 0), (B, 4)))


@pytest.mark.parametrize("backend", ALL)
def test_spare_programs_of_a_packed_cta_do_not_report(backend, monkeypatch):
    """5 programs of tiny tiles share a CTA with 3 spare slots: only real programs check (a
    spare slot's program id is past the grid, so its check would fail)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.ones((10, 4), np.float32)
    y = np.zeros_like(x)
    assert in_range.inspect(x, y, B=2, num_warps=1).programs_per_cta >= 8
    in_range[(5,)](x, y, B=2, num_warps=1, debug=True)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(tj.DeviceAssertError, match=r"program \(5, 0, 0\): a program past the rows"):
        in_range[(6,)](x, y, B=2, num_warps=1, debug=True)
    checked_copy[(5,)](x, y, B=2, num_warps=1, debug=True)
    np.testing.assert_array_equal(y, 2 * x)
    x[9, 0] = -3
    with pytest.raises(tj.DeviceAssertError, match=r"program \(4, 0, 0\), element \(1, 0\)"):
        checked_copy[(5,)](x, y, B=2, num_warps=1, debug=True)


@pytest.mark.parametrize("body, message", [
    ("tj.device_assert(t > 0, 3)", "message must be a string"),
    ("tj.device_assert(x)", "must be a boolean tile or scalar"),
    ("tj.device_assert('yes')", "must be a boolean tile or scalar"),
])
def test_bad_asserts_are_errors_at_the_users_line(body, message):
    body_error(body, message, [ArraySpec(tj.float32, 1)] * 2, {"B": 4}, head="    t = tj.load(x, (0,), (B,))\n")


def test_a_false_compile_time_assert_needs_debug_too(monkeypatch):
    src = "def k(x, y, B: tj.constexpr):\n    tj.device_assert(B > 8, 'B')\n    tj.device_assert(B > 2, 'never')\n"
    fn = compile_source(src, [ArraySpec(tj.float32, 1)] * 2, {"B": 4}, "assert_src.py")
    asserts = [o for o in fn.walk() if o.op.name == "ASSERT"]
    assert [o.attrs.msg for o in asserts] == ["B"]           # the true one folds away
    text = ir.print_function(fn)
    assert ir.print_function(ir.parse_function(text)) == text


def test_the_debug_ptx_records_failures_and_assembles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    x = np.zeros((8, 4), np.float32)
    specs, consts, _ = checked_copy.specialise(checked_copy.bind((x, x), {"B": 2}))
    debug = checked_copy.compile(specs, consts, 4, "cuda", debug=True).artifact
    release = checked_copy.compile(specs, consts, 4, "cuda").artifact
    assert "tilejit_assert_record" in debug.ptx and "atom" in debug.ptx and "cas" in debug.ptx
    assert "tilejit_assert_record" not in release.ptx
    assert debug.asserts[0][0] == "x must be non-negative" and debug.asserts[0][3].line == ASSERT_LINE
    assemble_or_skip(debug.ptx, "sm_90a")
    from tilejit.backends.cuda import CudaArtifact
    back = CudaArtifact.from_cache(debug.files(), debug.meta())       # through the disk cache
    assert back.asserts == debug.asserts


@pytest.mark.skipif(not HAVE_GPU, reason="needs an NVIDIA GPU")
@pytest.mark.gpu
def test_the_gpu_context_survives_a_failed_assert(monkeypatch):
    import cupy
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    x = cupy.asarray(-np.ones((8, 4), np.float32))
    y = cupy.zeros_like(x)
    with pytest.raises(tj.DeviceAssertError, match="program"):
        checked_copy[(4,)](x, y, B=2, debug=True)
    x = cupy.abs(x)
    checked_copy[(4,)](x, y, B=2, debug=True)
    np.testing.assert_array_equal(cupy.asnumpy(y), 2 * cupy.asnumpy(x))
