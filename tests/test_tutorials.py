"""The numbered tutorials (``tutorials/``) run as scripts do, on the emulator (and the debugging
one on the interpreter too): each checks its kernel against NumPy and prints what it shows."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parent.parent / "tutorials").glob("[0-9][0-9]_*.py"))


def test_the_path_is_numbered_without_gaps():
    assert [int(p.name[:2]) for p in TUTORIALS] == list(range(1, len(TUTORIALS) + 1)) and len(TUTORIALS) == 7


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_on_the_emulator(path, monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    runpy.run_path(str(path), run_name="tutorial")["main"]()
    out = capsys.readouterr().out
    assert out.strip(), "a tutorial prints what it shows"
    assert runpy.run_path(str(path), run_name="tutorial")["__doc__"].startswith(f"Tutorial {int(path.name[:2])}:")


def test_the_debugging_tutorial_on_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    runpy.run_path(str(TUTORIALS[-1]), run_name="tutorial")["main"]()
    out = capsys.readouterr().out
    assert "caught:" in out and "program (2, 0, 0)" in out and "refused at compile time" in out
