"""passes/hoist_loads.py: each top-level load is issued as early as its operands allow, never
past a store, loads in their order; the values do not change."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import pipeline
from tilejit.passes.hoist_loads import hoist_loads

from examples import layernorm, rmsnorm


def tile_ir(kernel, *args, **consts) -> ir.Function:
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return pipeline.clone_function(kernel.tile_ir(specs, consts))


def order(fn: ir.Function) -> list[str]:
    """The top-level ops' names, with each load's array argument."""
    names = {id(a): n for a, n in zip(fn.body.args, fn.arg_names)}
    return [f"load {names[id(o.operands[0])]}" if o.op is TileOp.LOAD else
            "store" if o.op is TileOp.STORE else o.op.name.lower() for o in fn.body.ops]


def test_layernorm_parameters_are_loaded_before_the_reductions():
    x, w = np.zeros((2, 4096), np.float32), np.zeros(4096, np.float32)
    fn = tile_ir(layernorm.layernorm_kernel, x, w, w, x, 1e-5, BLOCK=4096)
    before = list(fn.body.ops)
    assert order(fn).index("load weight") > order(fn).index("reduce")
    after = hoist_loads(fn)
    ops = order(after)
    loads = [i for i, n in enumerate(ops) if n.startswith("load")]
    assert [ops[i] for i in loads] == ["load x", "load weight", "load bias"]
    assert loads[-1] < ops.index("reduce")
    # only scalar ops (the program id and the offsets' constants) precede the last load
    assert set(ops[:loads[-1]]) <= {"program_id", "constant", "load x", "load weight", "dim"}
    assert sorted(map(id, before)) == sorted(map(id, after.body.ops))
    defined = set(map(id, after.body.args))
    for o in after.body.ops:
        assert all(id(v) in defined or v.owner is not None and v.owner not in after.body.ops
                   for v in o.operands), o.op
        defined.update(id(r) for r in o.results)


@tj.kernel
def load_after_store(x, y, out, BLOCK: tj.constexpr):
    """Writes y, then reads it back: the read must stay after the write."""
    t = tj.load(x, (0,), (BLOCK,))
    s = tj.sum(t)
    tj.store(y, (0,), t * 2)
    u = tj.load(y, (0,), (BLOCK,))
    tj.store(out, (0,), u + s)


def test_a_load_never_passes_a_store(monkeypatch):
    x = np.arange(1, 33, dtype=np.float32)
    fn = hoist_loads(tile_ir(load_after_store, x, x.copy(), x.copy(), BLOCK=32))
    ops = order(fn)
    assert ops.index("load y") > ops.index("store")
    assert ops.index("load x") < ops.index("reduce") < ops.index("store")
    for backend in ("interpret", "emulate"):
        monkeypatch.setenv("TILEJIT_BACKEND", backend)
        y, out = np.zeros_like(x), np.zeros_like(x)
        load_after_store[(1,)](x, y, out, BLOCK=32)
        np.testing.assert_array_equal(out, 2 * x + x.sum())


@tj.kernel
def nothing_to_pass(x, out, BLOCK: tj.constexpr):
    acc = tj.zeros((BLOCK,), tj.float32) + 1
    tj.store(out, (0,), acc + tj.load(x, (0,), (BLOCK,)))


def test_a_load_with_no_reduction_or_loop_above_it_stays():
    x = np.ones(32, np.float32)
    fn = tile_ir(nothing_to_pass, x, x.copy(), BLOCK=32)
    before = order(fn)
    assert before.index("load x") > before.index("add")
    assert order(hoist_loads(fn)) == before


@tj.kernel
def loads_in_a_loop(x, out, n, BLOCK: tj.constexpr):
    acc = tj.zeros((BLOCK,), tj.float32)
    for i in range(n):
        acc = acc + tj.load(x, (i * BLOCK,), (BLOCK,))
    tj.store(out, (0,), acc)


def test_loop_bodies_are_left_as_written():
    x = np.ones(64, np.float32)
    fn = tile_ir(loads_in_a_loop, x, x.copy(), 2, BLOCK=32)
    loop = next(o for o in fn.body.ops if o.op is TileOp.FOR)
    body = [o.op for o in loop.regions[0].ops]
    hoist_loads(fn)
    assert [o.op for o in loop.regions[0].ops] == body


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("dtype", [np.float32, tj.bfloat16.np])
def test_hoisted_norms_match_numpy(backend, dtype, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 300)) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(300).astype(dtype), rng.standard_normal(300).astype(dtype)
    tol = 1e-5 if dtype is np.float32 else 3e-2
    tj.testing.assert_close(layernorm.run(x, w, b).astype(np.float64), layernorm.reference(x, w, b),
                            rtol=tol, atol=tol)
    tj.testing.assert_close(rmsnorm.run(x, w).astype(np.float64), rmsnorm.reference(x, w),
                            rtol=tol, atol=tol)


def test_the_pass_is_in_the_pipeline_after_uniform_masks():
    names = [s.name for s in pipeline.PIPELINE]
    assert names.index("hoist_loads") == names.index("uniform_masks") + 1


@tj.kernel
def rmsnorm_1d(x, w, y, n, eps, BLOCK: tj.constexpr):
    """The Triton tutorial's spelling: a flat row offset, 1-D tiles, a scalar reduction."""
    start = tj.program_id(0) * n
    t = tj.load(x, (start,), (BLOCK,)).to(tj.float32)
    rstd = tj.rsqrt(tj.sum(t * t) / n + eps)
    tj.store(y, (start,), (t * rstd * tj.load(w, (0,), (BLOCK,)).to(tj.float32)).to(y.dtype))


def test_the_1d_tutorial_spelling_loads_its_weight_early_too(monkeypatch):
    x, w = np.zeros(256, np.float32), np.zeros(64, np.float32)
    ops = order(hoist_loads(tile_ir(rmsnorm_1d, x, w, x.copy(), 64, 1e-6, BLOCK=64)))
    assert ops.index("load w") < ops.index("reduce")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(256).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    rows = x.reshape(4, 64)
    want = (rows / np.sqrt((rows.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6) * w).ravel()
    for backend in ("interpret", "emulate"):
        monkeypatch.setenv("TILEJIT_BACKEND", backend)
        y = np.zeros_like(x)
        rmsnorm_1d[(4,)](x, w, y, 64, 1e-6, BLOCK=64)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
