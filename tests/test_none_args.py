"""A runtime parameter passed ``None`` specialises the kernel: it is bound to ``None`` at compile
time (``if bias is not None:`` folds), it is not a kernel parameter, and the same kernel with an
array there is another specialisation."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit.specs import NoneSpec


@tj.kernel
def scale_bias(x, bias, y, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    t = tj.load(x, (i,), (BLOCK,)) * 2
    if bias is not None:
        t = t + tj.load(bias, (i,), (BLOCK,))
    tj.store(y, (i,), t)


@tj.kernel
def maybe_scale(x, y, scale, BLOCK: tj.constexpr):
    t = tj.load(x, (0,), (BLOCK,))
    if scale is None:
        tj.store(y, (0,), t)
    else:
        tj.store(y, (0,), t * scale)


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_none_folds_the_branch_and_an_array_takes_it(backend, monkeypatch):
    """On cuda the second launch of each takes the re-launch fast path, None in its key."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(100, dtype=np.float32)
    b = np.full(100, 0.5, np.float32)
    for bias, want in [(None, 2 * x), (b, 2 * x + b), (None, 2 * x), (b, 2 * x + b)]:
        y = np.zeros_like(x)
        scale_bias[(4,)](x, bias, y, BLOCK=32)
        np.testing.assert_array_equal(y, want)
    y = np.zeros_like(x)
    scale_bias[(4,)](x, y=y, bias=None, BLOCK=32)          # by keyword too
    np.testing.assert_array_equal(y, 2 * x)
    for scale, want in [(None, x[:8]), (3.0, 3 * x[:8])]:
        y = np.zeros(8, np.float32)
        maybe_scale[(1,)](x, y, scale, BLOCK=8)
        np.testing.assert_array_equal(y, want)


def test_a_none_argument_is_a_specialisation_not_a_parameter():
    kernel = scale_bias
    x = np.zeros(64, np.float32)
    none_specs, _, none_values = kernel.specialise(kernel.bind((x, None, x), {"BLOCK": 32}))
    array_specs, _, array_values = kernel.specialise(kernel.bind((x, x, x), {"BLOCK": 32}))
    assert isinstance(none_specs[1], NoneSpec) and len(none_values) == 2 and len(array_values) == 3
    assert none_specs != array_specs
    fn = kernel.tile_ir(none_specs, {"BLOCK": 32})
    assert fn.arg_names == ["x", "y"] and len(fn.body.args) == 2 and len(fn.meta["specs"]) == 2
    assert sum(o.op.name == "LOAD" for o in fn.walk()) == 1
    assert sum(o.op.name == "LOAD" for o in kernel.tile_ir(array_specs, {"BLOCK": 32}).walk()) == 2
    from tilejit import fingerprint
    keys = {fingerprint.cache_key("k", list(s), {"BLOCK": 32}, 4, "sm_90a", 0) for s in (none_specs, array_specs)}
    assert len(keys) == 2


def test_a_read_only_output_after_a_none_is_named_right(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.zeros(32, np.float32)
    y = np.zeros(32, np.float32)
    y.flags.writeable = False
    with pytest.raises(tj.LaunchError, match="argument 'y' is a read-only"):
        scale_bias[(1,)](x, None, y, BLOCK=32)


def test_none_used_as_an_array_is_a_compile_error_at_the_line(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")

    @tj.kernel
    def uses_it(x, bias, BLOCK: tj.constexpr):
        tj.store(x, (0,), tj.load(x, (0,), (BLOCK,)) + tj.load(bias, (0,), (BLOCK,)))

    with pytest.raises(tj.CompileError, match="load: the first argument must be an array .* got NoneType None") as e:
        uses_it[(1,)](np.zeros(8, np.float32), None, BLOCK=8)
    assert "uses_it" in str(e.value) and "tj.load(bias" in str(e.value)


def test_none_on_the_cuda_path_drops_the_parameter():
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    kernel = scale_bias
    x = np.zeros(64, np.float32)
    counts = []
    for bias in (None, x):
        specs, consts, _ = kernel.specialise(kernel.bind((x, bias, x), {"BLOCK": 32}))
        counts.append(len(kernel.compile(specs, consts, None, "cuda").artifact.params))
    assert counts[0] < counts[1]


def test_the_cli_signature_takes_none():
    from tilejit import cli, dtypes
    from tilejit.specs import ArraySpec
    assert cli.parse_signature("float32[1], None, float32[1]") == [
        ArraySpec(dtypes.float32, 1), NoneSpec(), ArraySpec(dtypes.float32, 1)]
