"""prefetch_loads: a tensor-core loop's small loads (scales) are issued one iteration ahead and
carried; the IR in and out, the loops it leaves alone (a store in the body, a load feeding a
DOT or another load's offsets), and the same values on every backend."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import prefetch_loads as prefetch_module
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


DEQUANTISED = """
def k(a, b, s, c, B: tj.constexpr):
    acc = tj.zeros((B, B), tj.float32)
    for i in range(0, a.shape[1], B):
        w = tj.load(b, (i, 0), (B, B)) * tj.load(s, (i // B, 0), (1, B))
        acc = tj.dot(tj.load(a, (0, i), (B, B)), w.to(tj.bfloat16), acc)
    tj.store(c, (0, 0), acc)
"""


def loop_of(fn):
    return next(o for o in fn.walk() if o.op is TileOp.FOR)


@pytest.mark.parametrize("ahead", [1, 2])
def test_a_scale_load_is_issued_iterations_ahead(ahead, monkeypatch):
    monkeypatch.setattr(prefetch_module, "PREFETCH_AHEAD", ahead)
    fn = prefetch_loads(compile_source(SCALED.format(extra=""), [BF16, BF16, F32, F32], {"B": 32}))
    loop = loop_of(fn)
    body = loop.regions[0]
    assert len(body.args) == 2 + ahead and len(loop.results) == 1 + ahead and len(loop.operands) == 4 + ahead
    firsts = [x.owner for x in loop.operands[4:]]       # before the loop: the first iterations'
    assert all(o.op is TileOp.LOAD and o in fn.body.ops for o in firsts)
    ahead_load = body.ops[-1].operands[-1].owner       # in the body: iteration i + ahead's
    assert ahead_load.op is TileOp.LOAD and ahead_load in body.ops
    assert body.ops[-1].operands[1:-1] == body.args[3:]          # the copies shift down one a step
    steps, v = 0, ahead_load.operands[2].owner.operands[0]     # its column offset: (i + ahead * step) // B
    while v is not body.args[0]:
        assert v.owner.op is TileOp.ADD and v.owner.operands[1] is loop.operands[2]
        v, steps = v.owner.operands[0], steps + 1
    assert steps == ahead
    users = [o for o in body.walk() if body.args[2] in o.operands]
    assert users and all(o.op is not TileOp.YIELD for o in users)     # the value read is the carried one
    assert ir.print_function(fn).count("load %2") == 1 + ahead


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
@pytest.mark.parametrize("ahead", [1, 2])
def test_the_prefetched_loop_computes_the_same_values(backend, ahead, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))          # (the cache key does not see the switch)
    monkeypatch.setattr(prefetch_module, "PREFETCH_AHEAD", ahead)
    ns = {"tj": tj}
    exec(SCALED.format(extra=""), ns)
    kernel = tj.kernel(ns["k"])
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 128)).astype(tj.bfloat16.np)
    b = rng.standard_normal((128, 32)).astype(tj.bfloat16.np)
    s = rng.random((32, 4)).astype(np.float32) + 0.5
    c = np.empty((32, 32), np.float32)
    kernel[(1,)](a, b, s, c, B=32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = sum((a64[:, 32 * j:32 * j + 32] @ b64[32 * j:32 * j + 32]) * s[:, j:j + 1] for j in range(4))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("dequantised", [False, True])
def test_a_scale_dequantised_into_a_dot_operand_is_prefetched_with_the_switch(dequantised, monkeypatch):
    """``dot(x, w * s)``: ``s`` reaches the DOT only through arithmetic (a quantised GEMM's
    group scales), so with ``PREFETCH_DEQUANTISED`` it is loaded ahead; ``x`` is a ring's (a
    plain operand) and ``w`` too big.  Without the switch nothing is."""
    monkeypatch.setattr(prefetch_module, "PREFETCH_DEQUANTISED", dequantised)
    fn = prefetch_loads(compile_source(DEQUANTISED, [BF16, BF16, BF16, F32], {"B": 64}))
    loop = loop_of(fn)
    first = [x.owner for x in loop.operands[4:]]
    if not dequantised:
        assert first == []
    else:
        assert len(first) == 1 and first[0].operands[0] is fn.args[2]      # only s, from before the loop



@pytest.mark.parametrize("target, warps, switch, computed_b, ahead", [
    ("sm_90a", 4, True, True, True), ("sm_80", 4, True, True, False), ("sm_90a", 8, True, True, False),
    ("sm_90a", 4, False, True, False), ("sm_90a", 4, True, False, False)])
def test_the_loads_of_a_b_computed_for_wgmma_are_prefetched(target, warps, switch, computed_b, ahead, monkeypatch):
    """``dot(x, (w * s).to(bf16))`` with 64 rows and 4 warps on sm_90a runs on wgmma with its B
    computed in the loop (``wgmma.COMPUTED_B``), so ``WGMMA_DEQUANTISED`` loads ``w`` (4096
    elements, past ``PREFETCH_ELEMENTS``) and ``s`` an iteration ahead; ``x`` stays a ring's.  Not
    on sm_80, not where the rows are not a warpgroup's 64 per four warps, not with either switch
    off."""
    from tilejit.passes import wgmma
    monkeypatch.setattr(prefetch_module, "PREFETCH_DEQUANTISED", False)     # (which prefetches wherever the DOT runs)
    monkeypatch.setattr(prefetch_module, "WGMMA_DEQUANTISED", switch)
    monkeypatch.setattr(wgmma, "COMPUTED_B", computed_b)
    fn = prefetch_loads(compile_source(DEQUANTISED, [BF16, BF16, BF16, F32], {"B": 64}), warps, target)
    first = [x.owner for x in loop_of(fn).operands[4:]]
    assert sorted(fn.args.index(f.operands[0]) for f in first) == ([1, 2] if ahead else [])     # b and s
