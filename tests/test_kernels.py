"""End-to-end kernels (the examples) through the frontend on every backend, on ragged shapes,
against float64 NumPy references: ``interpret`` and ``emulate`` here, ``cuda`` under ``-m gpu``.
TILEJIT_TEST_BACKEND=NAME restricts the run to one backend."""
import importlib
import os

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit.demo import run_demo

ONLY = os.environ.get("TILEJIT_TEST_BACKEND")
BACKENDS = [b for b in ("interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu))
            if ONLY is None or getattr(b, "values", (b,))[0] == ONLY]


def load(name):
    return importlib.import_module(f"tilejit.examples.{name}")


softmax, layernorm, rmsnorm, matmul, attention = (load(n) for n in ("softmax", "layernorm", "rmsnorm", "matmul",
                                                                    "attention"))
FLOAT_TILES = st.sampled_from([tj.float32, tj.float16, tj.bfloat16])


@pytest.fixture(autouse=True, scope="module", params=BACKENDS)
def backend(request):
    with pytest.MonkeyPatch.context() as mp:       # module scope: Hypothesis reuses it across examples
        mp.setenv("TILEJIT_BACKEND", request.param)
        yield request.param


@given(shape=tj.testing.shapes(2, 1, 300), dt=FLOAT_TILES, data=st.data())
def test_softmax(shape, dt, data):
    x = data.draw(tj.testing.arrays(dt, shape)) * dt.np.type(4)
    tj.testing.assert_close(softmax.run(x), softmax.reference(x))


@given(shape=tj.testing.shapes(2, 1, 300), dt=FLOAT_TILES, data=st.data())
def test_layernorm(shape, dt, data):
    x = data.draw(tj.testing.arrays(dt, shape))
    w, b = (data.draw(tj.testing.arrays(dt, (shape[1],))) for _ in range(2))
    out = layernorm.run(x, w, b)
    # float32 statistics, then one rounding to x's dtype
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dt == tj.float32 else {}
    tj.testing.assert_close(out, layernorm.reference(x, w, b), dtype=dt, **tolerance)


@given(shape=tj.testing.shapes(2, 1, 300), dt=FLOAT_TILES, data=st.data())
def test_rmsnorm(shape, dt, data):
    x = data.draw(tj.testing.arrays(dt, shape))
    w = data.draw(tj.testing.arrays(dt, (shape[1],)))
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dt == tj.float32 else {}
    tj.testing.assert_close(rmsnorm.run(x, w), rmsnorm.reference(x, w), dtype=dt, **tolerance)


@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 90),
       dt=st.sampled_from([tj.float16, tj.bfloat16]), data=st.data())
def test_matmul_half_inputs_accumulate_in_float32(m, n, k, dt, data):
    a = data.draw(tj.testing.arrays(dt, (m, k)))
    b = data.draw(tj.testing.arrays(dt, (k, n)))
    out = matmul.run(a, b, BM=32, BN=16, BK=16)
    assert out.dtype == np.float32
    # float32 accumulation of exact products: error grows at most with k * eps * sum|a||b|
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    err = np.abs(out - matmul.reference(a, b))
    assert (err <= 1e-6 + k * 2**-23 * scale).all(), err.max()


def test_matmul_writes_the_output_dtype():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 33)).astype(np.float16)
    b = rng.standard_normal((33, 20)).astype(np.float16)
    out = matmul.run(a, b, out_dtype=np.float16, BM=16, BN=16, BK=16)
    assert out.dtype == np.float16
    tj.testing.assert_close(out, matmul.reference(a, b), dtype=tj.float16)


@given(batch=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.sampled_from([1, 2]),
       seq=st.integers(1, 70), dim=st.sampled_from([16, 24]), causal=st.booleans(),
       dt=st.sampled_from([tj.float16, tj.float32]), seed=st.integers(0, 2**16))
def test_flash_attention(batch, kv_heads, group, seq, dim, causal, dt, seed):
    q, k, v = attention.example_inputs(np.random.default_rng(seed), batch, kv_heads * group, kv_heads,
                                       seq, dim, dt.np)
    out = attention.run(q, k, v, causal, BM=16, BN=16)
    ref = attention.reference(q, k, v, causal)
    tj.testing.assert_close(out, ref, dtype=dt, **({"rtol": 1e-4, "atol": 1e-5} if dt == tj.float32 else {}))


def test_attention_causal_differs_and_first_row_attends_to_itself():
    q, k, v = attention.example_inputs(np.random.default_rng(3), 1, 2, 1, 33, 16, np.float32)
    full, causal = attention.run(q, k, v, False, BM=16, BN=16), attention.run(q, k, v, True, BM=16, BN=16)
    assert not np.allclose(full, causal)
    np.testing.assert_allclose(causal[0, :, 0], np.repeat(v[0, :, 0], 2, axis=0), rtol=1e-6)


def test_demo_passes_and_prints_a_table(backend, capsys):
    assert run_demo(backend)
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["kernel", "shape", "backend"]
    from tilejit.demo import CASES
    assert len(CASES) == 16 and out.count("pass") == len(CASES) and "FAIL" not in out
