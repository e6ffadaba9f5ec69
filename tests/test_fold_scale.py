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
