"""tj.static_assert and tj.static_print: compile-time checks and prints, at the user's line."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj


@tj.kernel
def checked_copy(x, y, BLOCK: tj.constexpr):
    tj.static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16")
    t = tj.load(x, (0,), (BLOCK,))
    tj.static_print("BLOCK =", BLOCK, "tile:", t)
    tj.store(y, (0,), t)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_true_assert_compiles_and_the_print_happens_once(backend, monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(32, dtype=np.float32)
    for _ in range(2):
        y = np.zeros_like(x)
        checked_copy[(1,)](x, y, BLOCK=32)
        np.testing.assert_array_equal(y, x)
    out = capsys.readouterr().out
    assert out.count("BLOCK = 32 tile: tile<32xfloat32>") == 1
    assert "test_static_debug.py:14]" in out


def test_a_false_assert_is_a_compile_error_at_its_line(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.zeros(32, np.float32)
    with pytest.raises(tj.CompileError, match="static_assert failed: BLOCK must be a multiple of 16") as e:
        checked_copy[(1,)](x, x.copy(), BLOCK=24)
    assert e.value.loc.line == 12 and "checked_copy" in str(e.value)


def test_runtime_conditions_and_bad_messages_are_refused(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")

    @tj.kernel
    def runtime_cond(x, n):
        tj.static_assert(n > 0)

    @tj.kernel
    def bad_message(x, BLOCK: tj.constexpr):
        tj.static_assert(BLOCK > 0, BLOCK)

    @tj.kernel
    def no_message(x, BLOCK: tj.constexpr):
        tj.static_assert(BLOCK > 64)

    x = np.zeros(4, np.float32)
    with pytest.raises(tj.CompileError, match="must be known at compile time"):
        runtime_cond[(1,)](x, 3)
    with pytest.raises(tj.CompileError, match="message must be a string"):
        bad_message[(1,)](x, BLOCK=8)
    with pytest.raises(tj.CompileError) as e:
        no_message[(1,)](x, BLOCK=8)
    assert e.value.message == "static_assert failed"
