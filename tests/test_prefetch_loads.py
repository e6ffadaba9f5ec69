"""prefetch_loads: a tensor-core loop's small loads (scales) are issued one iteration ahead and
carried; the IR in and out, the loops it leaves alone (a store in the body, a load feeding a
DOT or another load's offsets), and the same values on every backend."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes.prefetch_loads import prefetch_loads
from tilejit.specs import ArraySpec

from conftest import compile_source

BF16 = ArraySpec(tj.bfloat16, 2, True, True, False)
F32 = ArraySpec(tj.float32, 2, True, True, False)
I32 = ArraySpec(tj.int32, 1, True, True, False)

SCALED = """
def k(a, b, s, c, B: tj.constexpr):
    acc = tj.zeros((B, B), tj.float32)
    for i in range(0, a.shape[1], B):
        sc = tj.load(s, (0, i // B), (B, 1))
        acc = acc + tj.dot(tj.load(a, (0, i), (B, B)), tj.load(b, (i, 0), (B, B))) * sc
    {extra}
    tj.store(c, (0, 0), acc)
"""


def loop_of(fn):
    return next(o for o in fn.walk() if o.op is TileOp.FOR)


def test_a_scale_load_is_issued_one_iteration_ahead():
    fn = prefetch_loads(compile_source(SCALED.format(extra=""), [BF16, BF16, F32, F32], {"B": 32}))
    loop = loop_of(fn)
    body = loop.regions[0]
    assert len(body.args) == 3 and len(loop.results) == 2 and len(loop.operands) == 5
    first = loop.operands[4].owner                      # before the loop: the first iteration's
    assert first.op is TileOp.LOAD and first in fn.body.ops
    ahead = body.ops[-1].operands[1].owner              # in the body: the next iteration's
    assert ahead.op is TileOp.LOAD and ahead in body.ops
    nxt = [o for o in body.ops if o.op is TileOp.ADD and o.operands[:2] == [body.args[0], loop.operands[2]]]
    assert nxt, "the next iteration's offsets come from i + step"
    users = [o for o in body.walk() if body.args[2] in o.operands]
    assert users and all(o.op is not TileOp.YIELD for o in users)     # the value read is the carried one
    text = ir.print_function(fn)
    assert text.count("load %2") == 2


@pytest.mark.parametrize("extra", ["tj.store(c, (0, 0), acc)"])
def test_a_loop_that_stores_is_left_alone(extra):
    src = SCALED.format(extra="").replace("        acc = acc +", f"        {extra}\n        acc = acc +")
    fn = compile_source(src, [BF16, BF16, F32, F32], {"B": 32})
    before = ir.print_function(fn)
    assert ir.print_function(prefetch_loads(fn)) == before


def test_loads_feeding_a_dot_or_another_loads_offsets_are_left_alone():
    src = """
def k(a, b, table, c, B: tj.constexpr):
    acc = tj.zeros((B, B), tj.float32)
    for i in range(0, a.shape[1], B):
        row = tj.sum(tj.load(table, (i // B,), (1,)))
        acc = tj.dot(tj.load(a, (0, i), (B, B)), tj.load(b, (row, 0), (B, B)), acc)
    tj.store(c, (0, 0), acc)
"""
    fn = compile_source(src, [BF16, BF16, I32, F32], {"B": 32})
    before = ir.print_function(fn)
    assert ir.print_function(prefetch_loads(fn)) == before


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_prefetched_loop_computes_the_same_values(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    ns = {"tj": tj}
    exec(SCALED.format(extra=""), ns)
    kernel = tj.kernel(ns["k"])
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 96)).astype(tj.bfloat16.np)
    b = rng.standard_normal((96, 32)).astype(tj.bfloat16.np)
    s = rng.random((32, 3)).astype(np.float32) + 0.5
    c = np.empty((32, 32), np.float32)
    kernel[(1,)](a, b, s, c, B=32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = sum((a64[:, 32 * j:32 * j + 32] @ b64[32 * j:32 * j + 32]) * s[:, j:j + 1] for j in range(3))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
