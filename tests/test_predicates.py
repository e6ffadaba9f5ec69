"""tj.isnan, tj.isinf, tj.isfinite: bool tiles equal to NumPy's on every backend, specials and
16-bit floats included; integer and bool inputs give constants."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes
from tilejit.frontend import semantics
from tilejit.ir import Block, Builder, Loc, TileOp, TileType, Value

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, 3e38, 1e-40, 2.5, 65504.0,
            -7.0, np.nan, np.inf]


@tj.kernel
def predicates(x, y, BLOCK: tj.constexpr):
    t = tj.load(x, (0,), (BLOCK,))
    tj.store(y, (0, 0), tj.isnan(t)[None, :])
    tj.store(y, (1, 0), tj.isinf(t)[None, :])
    tj.store(y, (2, 0), tj.isfinite(t)[None, :])
    tj.store(y, (3, 0), (tj.where(tj.isfinite(t), t, 0.0) > 1)[None, :])     # the usual use: drop non-finite


def expected(x):
    return np.stack([np.isnan(x), np.isinf(x), np.isfinite(x), np.where(np.isfinite(x), x, 0) > 1])


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, tj.bfloat16.np])
def test_predicates_match_numpy(backend, dtype, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    with np.errstate(over="ignore"):
        x = np.array(SPECIALS, np.float32).astype(dtype)
    y = np.zeros((4, 16), np.bool_)
    predicates[(1,)](x, y, BLOCK=16)
    np.testing.assert_array_equal(y, expected(x))


def test_integer_inputs_give_constants_and_floats_the_ops():
    b = Builder(Block(), Loc("k.py", 1))
    for name, value in [("isnan", False), ("isinf", False), ("isfinite", True)]:
        out = semantics.predicate(b, name, Value(TileType((4,), dtypes.int32)))
        assert out.type == TileType((4,), dtypes.bool_) and out.owner.attrs.value is value
        out = semantics.predicate(b, name, Value(TileType((4,), dtypes.bfloat16)))
        assert out.owner.op is TileOp[name.upper()] and out.type.dtype == dtypes.bool_
    assert semantics.predicate(b, "isnan", 2.5).type == TileType((), dtypes.bool_)


def test_predicates_assemble_for_the_gpu():
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    x = np.zeros(16, np.float32)
    specs, consts, _ = predicates.specialise(predicates.bind((x, np.zeros((4, 16), np.bool_)), {"BLOCK": 16}))
    art = predicates.compile(specs, consts, None, "cuda").artifact
    assert "setp.nan.f32" in art.ptx and art.spills == 0


@tj.kernel
def clamped(x, lo, y, BLOCK: tj.constexpr):
    t = tj.load(x, (0,), (BLOCK,))
    tj.store(y, (0, 0), tj.clamp(t, -1.5, 2.0)[None, :])
    tj.store(y, (1, 0), tj.clamp(t, tj.load(lo, (0,), (BLOCK,)), 3.0)[None, :])


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_clamp_is_numpys_clip(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.array(SPECIALS, np.float32)
    lo = np.linspace(-3, 1, 16).astype(np.float32)
    y = np.zeros((2, 16), np.float32)
    with np.errstate(over="ignore"):
        clamped[(1,)](x, lo, y, BLOCK=16)
    np.testing.assert_array_equal(y, np.stack([np.clip(x, -1.5, 2.0), np.clip(x, lo, 3.0)]))
