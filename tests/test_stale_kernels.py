"""Within one process, compiled code never outlives what it folded in: a global read only by a
``tj.func``, containers mutated in place, class, module and dataclass attributes, and closure
cells rebound with ``nonlocal`` all make the next launch recompile (on the interpret backend
here; the check is the launch path's, shared by every backend)."""
from __future__ import annotations

import dataclasses
import textwrap
import types

import numpy as np
import pytest

import tilejit as tj


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")


def module(source: str, **names) -> types.ModuleType:
    """A user file: ``source`` run in a fresh module holding ``names``."""
    m = types.ModuleType("user_file")
    m.__dict__.update(tj=tj, **names)
    exec(compile(textwrap.dedent(source), "user_file.py", "exec"), m.__dict__)
    return m


def run(kernel) -> float:
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    kernel[(1,)](x, y, B=8)
    return float(y[0])


def kernel_of(expr: str, prelude: str = "", **names):
    return module(prelude + f"""
@tj.kernel
def k(x, y, B: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (0,), (B,)) * ({expr}))
""", **names)


@dataclasses.dataclass
class Settings:
    gain: float = 2.0


CASES = {
    "global read only by a tj.func": (
        "helper(1.0)", "GAIN = 2.0\n@tj.func\ndef helper(t):\n    return t * GAIN\n",
        lambda m: setattr(m, "GAIN", 3.0)),
    "list mutated in place": ("TABLE[0]", "TABLE = [2.0]\n", lambda m: m.TABLE.__setitem__(0, 3.0)),
    "dict mutated in place": ("CFG['gain']", "CFG = {'gain': 2.0}\n", lambda m: m.CFG.__setitem__("gain", 3.0)),
    "class attribute": ("Cfg.GAIN", "class Cfg:\n    GAIN = 2.0\n", lambda m: setattr(m.Cfg, "GAIN", 3.0)),
    "module attribute": ("config.GAIN", "", lambda m: setattr(m.config, "GAIN", 3.0)),
    "dataclass field": ("settings.gain", "", lambda m: setattr(m.settings, "gain", 3.0)),
    "nested class attribute": ("Outer.Inner.GAIN", "class Outer:\n    class Inner:\n        GAIN = 2.0\n",
                               lambda m: setattr(m.Outer.Inner, "GAIN", 3.0)),
    "rebound global": ("GAIN", "GAIN = 2.0\n", lambda m: setattr(m, "GAIN", 3.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_change_to_what_the_kernel_folded_in_recompiles_it(case):
    expr, prelude, change = CASES[case]
    config = types.ModuleType("config")
    config.GAIN = 2.0
    m = kernel_of(expr, prelude, config=config, settings=Settings())
    assert run(m.k) == 2.0
    assert run(m.k) == 2.0                       # cached
    change(m)
    assert run(m.k) == 3.0, case


def test_a_closure_cell_rebound_with_nonlocal_recompiles():
    def make():
        gain = 2.0

        @tj.kernel
        def k(x, y, B: tj.constexpr):
            tj.store(y, (0,), tj.load(x, (0,), (B,)) * gain)

        def set_gain(value):
            nonlocal gain
            gain = value
        return k, set_gain
    k, set_gain = make()
    assert run(k) == 2.0
    set_gain(3.0)
    assert run(k) == 3.0


def test_unchanged_dependencies_keep_the_compiled_code():
    m = kernel_of("TABLE[0] * Cfg.GAIN", "TABLE = [2.0]\nclass Cfg:\n    GAIN = 1.0\n")
    run(m.k)
    compiled = dict(m.k._cache)
    m.TABLE[0] = 2.0                             # the same value written again
    run(m.k)
    assert m.k._cache == compiled
