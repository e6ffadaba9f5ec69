"""Float scalars specialised on their sign (``ScalarSpec.positive``) and ``passes/fold_scale``:
a softmax's scores scaled by a positive scalar have the scale moved onto the row maximum and
into the exponent's FMA, so ``s = dot * scale`` costs no multiply a score."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import cli
from tilejit.kernel import classify_argument
from tilejit.specs import ScalarSpec


@tj.kernel
def scaled_copy(x, y, scale, BLOCK: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (0,), (BLOCK,)) * scale)


def test_float_scalars_are_specialised_on_their_sign():
    assert classify_argument("s", 0.5)[0] == ScalarSpec(tj.float32, True)
    assert classify_argument("s", 3e38)[0].positive and classify_argument("s", 2e-38)[0].positive
    for value in (-0.5, 0.0, -0.0, float("nan"), float("inf"), 1e-40, 4e38):
        with np.errstate(over="ignore"):                             # 4e38 is inf in float32
            assert classify_argument("s", value)[0] == ScalarSpec(tj.float32, False), value
    assert classify_argument("s", np.float32(2.0))[0] == ScalarSpec(tj.float32, True)
    assert classify_argument("n", 3)[0] == ScalarSpec(tj.int32, False)          # ints: by width only
    assert cli.parse_signature("f32+, f32, i32") == [ScalarSpec(tj.float32, True), ScalarSpec(tj.float32),
                                                     ScalarSpec(tj.int32)]
    with pytest.raises(ValueError, match="only a float scalar"):
        cli.parse_signature("i32+")


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_each_sign_compiles_once_and_both_are_right(backend, monkeypatch):
    x = np.arange(1, 9, dtype=np.float32)
    kernel = scaled_copy.kernel if hasattr(scaled_copy, "kernel") else scaled_copy
    kernel._cache.clear()
    kernel._fast.clear()
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    for scale in (0.5, -2.0, 0.25, -1.0, np.float32(3.0)):
        y = np.zeros(8, np.float32)
        scaled_copy[(1,)](x, y, scale, BLOCK=8)
        np.testing.assert_array_equal(y, x * np.float32(scale))
    assert sorted(key[0][2].positive for key in kernel._cache) == [False, True]


@tj.kernel
def scaled_softmax(x, y, scale, n, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    s = tj.load(x, (row, 0), (1, BLOCK)) * scale
    s = tj.where(cols[None, :] < n, s, -tj.inf)
    p = tj.exp(s - tj.max(s, axis=1)[:, None])
    tj.store(y, (row, 0), p / tj.sum(p, axis=1)[:, None])


def _stage(kernel, args, consts, stage, num_warps=4, target="sm_90a"):
    from tilejit.passes.pipeline import compile_to_simt
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    stages = {}
    compile_to_simt(kernel.tile_ir(specs, consts), num_warps, target, dump=lambda name, text: stages.setdefault(name, text))
    return stages


def test_a_positive_scale_moves_onto_the_maximum_and_into_the_exponent():
    x = np.zeros((4, 64), np.float32)
    pos = _stage(scaled_softmax, (x, x, 0.5, 50), dict(BLOCK=64), "fold_scale")
    neg = _stage(scaled_softmax, (x, x, -0.5, 50), dict(BLOCK=64), "fold_scale")
    assert neg["fold_scale"] == neg["fold_exp"]                      # a scale of either sign: untouched
    lines = pos["fold_scale"].splitlines()
    scaled = {line.split(" = ")[0].strip() for line in lines if "= mul " in line and "1x64xfloat32" in line}
    assert len(scaled) == 1, lines                                   # the scores' multiply, now unused:
    for line in lines:                                               # masked, maximised and exponentiated
        if any(f" {op} " in line for op in ("where", "fma")) or "kind=max" in line:   # unscaled
            assert not any(f"{v}," in line or line.endswith(v) or f"{v} " in line.split("=", 1)[1]
                           for v in scaled), line
    assert any("= mul %2, " in line and ": float32" in line for line in lines), lines   # scale * log2(e), once
    assert not [line for line in pos["dce"].splitlines() if "= mul " in line and "x64xfloat32" in line]


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("scale", [0.37, 3.0, -0.37, 1e-30])
def test_the_folded_softmax_matches_numpy(backend, scale, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 64)).astype(np.float32) * 8
    y = np.full_like(x, np.nan)
    scaled_softmax[(5,)](x, y, scale, 50, BLOCK=64)
    s = x[:, :50].astype(np.float64) * np.float32(scale)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y[:, :50], p / p.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)
    np.testing.assert_array_equal(y[:, 50:], 0.0)


@tj.kernel
def const_scaled_softmax(x, y, n, SCALE: tj.constexpr, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    s = tj.load(x, (row, 0), (1, BLOCK)) * SCALE
    s = tj.where(cols[None, :] < n, s, -tj.inf)
    p = tj.exp(s - tj.max(s, axis=1)[:, None])
    tj.store(y, (row, 0), p / tj.sum(p, axis=1)[:, None])


@pytest.mark.parametrize("scale", [0.37, -0.37])
def test_a_constant_scale_folds_by_its_sign(scale, monkeypatch):
    x = np.random.default_rng(3).standard_normal((3, 32)).astype(np.float32) * 8
    stages = _stage(const_scaled_softmax, (x, x, 30), dict(SCALE=scale, BLOCK=32), "fold_scale")
    assert (stages["fold_scale"] != stages["fold_exp"]) == (scale > 0)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    y = np.full_like(x, np.nan)
    const_scaled_softmax[(3,)](x, y, 30, SCALE=scale, BLOCK=32)
    s = x[:, :30].astype(np.float64) * np.float32(scale)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y[:, :30], p / p.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)


@tj.kernel
def scaled_lse(x, y, scale, BLOCK: tj.constexpr):
    s = tj.load(x, (0,), (BLOCK,)) * scale                  # a whole-tile maximum: a scalar
    m = tj.max(s)
    tj.store(y, (0,), tj.full((1,), m + tj.log(tj.sum(tj.exp(s - m))), tj.float32))


@pytest.mark.parametrize("scale", [0.3, -0.3])
def test_a_whole_tile_maximum_folds_too(scale, monkeypatch):
    x = np.random.default_rng(5).standard_normal(64).astype(np.float32) * 10
    stages = _stage(scaled_lse, (x, x, scale), dict(BLOCK=64), "fold_scale")
    assert (stages["fold_scale"] != stages["fold_exp"]) == (scale > 0)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    y = np.zeros(1, np.float32)
    scaled_lse[(1,)](x, y, scale, BLOCK=64)
    s = x.astype(np.float64) * np.float32(scale)
    np.testing.assert_allclose(y[0], s.max() + np.log(np.exp(s - s.max()).sum()), rtol=1e-6)


@tj.kernel
def raw_softmax(x, y, scale, n, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    s = tj.where(cols[None, :] < n, tj.load(x, (row, 0), (1, BLOCK)), -tj.inf)
    p = tj.exp(scale * (s - tj.max(s, axis=1)[:, None]))         # scaled inside the exponential
    tj.store(y, (row, 0), p / tj.sum(p, axis=1)[:, None])


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("scale", [0.37, 5.0, 1e-30, -0.37])
def test_an_exponential_scaled_inside_takes_exp2_when_the_scale_is_positive(backend, scale, monkeypatch):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 64)).astype(np.float32) * 6
    stages = _stage(raw_softmax, (x, x, scale, 60), dict(BLOCK=64), "fold_exp")
    assert ("= exp2 " in stages["fold_exp"] and "= exp " not in stages["fold_exp"]) == (scale > 0)
    if scale < 0:
        return                   # exp(-c * (-inf)) = inf: not a softmax, nothing to compare
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    y = np.full_like(x, np.nan)
    raw_softmax[(4,)](x, y, scale, 60, BLOCK=64)
    s = x[:, :60].astype(np.float64)
    p = np.exp(np.float32(scale) * (s - s.max(axis=1, keepdims=True)))
    np.testing.assert_allclose(y[:, :60], p / p.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)
    np.testing.assert_array_equal(y[:, 60:], 0.0)


@tj.kernel
def raw2_softmax(x, y, scale, n, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    s = tj.where(cols[None, :] < n, tj.load(x, (row, 0), (1, BLOCK)), -tj.inf)
    p = tj.exp2((s - tj.max(s, axis=1)[:, None]) * scale)        # base 2, scaled inside
    tj.store(y, (row, 0), p / tj.sum(p, axis=1)[:, None])


@pytest.mark.parametrize("scale", [0.37, 5.0, -0.37])
def test_a_scaled_exp2_takes_one_fma_when_the_scale_is_positive(scale, monkeypatch):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 64)).astype(np.float32) * 6
    stages = _stage(raw2_softmax, (x, x, scale, 60), dict(BLOCK=64), "fold_exp")
    assert ("x64xfloat32" in stages["dce"].split("= fma ")[-1].split("\n")[0]) == (scale > 0)
    if scale < 0:
        assert stages["fold_exp"] == stages["canonicalize"]
        return
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    y = np.full_like(x, np.nan)
    raw2_softmax[(4,)](x, y, scale, 60, BLOCK=64)
    s = x[:, :60].astype(np.float64)
    p = np.exp2(np.float32(scale) * (s - s.max(axis=1, keepdims=True)))
    np.testing.assert_allclose(y[:, :60], p / p.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)
