"""``tj.device_print(prefix, *values)``: one line per element, ``pid (x, y, z) idx (i, j) prefix
v1 v2``, on every backend; replicas and the spare programs of a packed CTA print nothing."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, body_error, compile_source


@tj.kernel
def show(x, B: tj.constexpr):
    t = tj.load(x, (tj.program_id(0) * B, 0), (B, 2))
    tj.device_print("t%, t*2:", t, (t * 2).to(tj.int32))
    tj.device_print("rows", x.shape[0])


def expected(x, B):
    lines = []
    for p in range(x.shape[0] // B):
        block = x[p * B:(p + 1) * B]
        lines += [f"pid ({p}, 0, 0) idx ({i}, {j}) t%, t*2: {'%g' % block[i, j]} {int(block[i, j] * 2)}"
                  for i in range(B) for j in range(2)]
        lines.append(f"pid ({p}, 0, 0) rows {x.shape[0]}")
    return lines


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("warps", [1, 4])
def test_each_element_prints_once_per_program(backend, warps, monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = (np.arange(12, dtype=np.float32).reshape(6, 2) - 3) / 4
    show[(3,)](x, B=2, num_warps=warps)             # 4 warps: 128 threads for 4 elements (replicas)
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(expected(x, 2))
    for p in range(3):                              # each program's own lines in order
        mine = [line for line in lines if line.startswith(f"pid ({p},")]
        assert mine == [line for line in expected(x, 2) if line.startswith(f"pid ({p},")]


@pytest.mark.parametrize("body, message", [
    ("tj.device_print(3, t)", "first argument must be a string"),
    ("tj.device_print('x')", "at least one value"),
    ("tj.device_print('x', t, tj.zeros((3,), tj.float32))", "do not broadcast"),
])
def test_bad_prints_are_errors_at_the_users_line(body, message):
    body_error(body, message, [ArraySpec(tj.float32, 1)] * 2, {"B": 4}, head="    t = tj.load(x, (0,), (B,))\n")


def test_the_gpu_prints_through_vprintf(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs, consts, _ = show.specialise(show.bind((np.zeros((6, 2), np.float32),), {"B": 2}))
    ptx = show.compile(specs, consts, 1, "cuda").artifact.ptx
    assert "vprintf" in ptx
    assemble_or_skip(ptx, "sm_90a")


@pytest.mark.gpu
def test_device_print_on_the_gpu(monkeypatch, capfd):
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    x = (np.arange(12, dtype=np.float32).reshape(6, 2) - 3) / 4
    show[(3,)](x, B=2, num_warps=1)
    assert sorted(capfd.readouterr().out.splitlines()) == sorted(expected(x, 2))


@pytest.mark.parametrize("prefix", ["t%, t*2:", "x = {a}, (b)", "it's \"quoted\"", "rows"])
def test_the_ir_text_of_a_print_round_trips_whatever_its_prefix(prefix):
    src = f"def k(x, y, B: tj.constexpr):\n    tj.device_print({prefix!r}, tj.load(x, (0,), (B,)))\n"
    fn = compile_source(src, [ArraySpec(tj.float32, 1)] * 2, {"B": 4}, "print_src.py")
    text = ir.print_function(fn)
    back = ir.parse_function(text)
    assert ir.print_function(back) == text
    assert next(o for o in back.walk() if o.op.name == "PRINT").attrs.prefix == prefix
