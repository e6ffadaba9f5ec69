"""``tj.testing``: assert_close tolerances and messages, the Hypothesis strategies, benchmark."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import dtypes
from tilejit.testing import arrays, assert_close, benchmark, shapes
from tilejit.testing import dtypes as dtype_strategy


def failure(out, ref, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        assert_close(out, ref, **kwargs)
    return str(info.value)


def test_assert_close_reports_the_worst_element():
    ref = np.zeros((3, 4), np.float32)
    out = ref.copy()
    out[1, 2], out[2, 3] = 0.5, 2.0
    text = failure(out, ref)
    assert "2 of 12 elements differ" in text
    assert "worst at index (2, 3): out=2.0 ref=0.0" in text and "|error|=2" in text
    assert "float32" in text


def test_tolerances_follow_the_dtype():
    ref = np.linspace(1, 2, 50)
    assert_close((ref * (1 + 5e-3)).astype(np.float16), ref)             # 0.5% is fine for float16
    assert_close((ref * (1 + 1e-2)).astype(dtypes.bfloat16.np), ref)     # 1% is fine for bfloat16
    assert "float32" in failure((ref * (1 + 5e-3)).astype(np.float32), ref)
    assert_close((ref * (1 + 5e-6)).astype(np.float32), ref)
    assert_close((ref * (1 + 5e-3)).astype(np.float32), ref, dtype=tj.float16)
    assert_close((ref * (1 + 5e-3)).astype(np.float32), ref, rtol=1e-2)
    assert "rtol=0.001" in failure((ref * (1 + 5e-3)).astype(np.float32), ref, rtol=1e-3, atol=0)


def test_integers_and_bools_are_exact():
    a = np.arange(10, dtype=np.int32)
    assert_close(a, a.astype(np.int64))
    b = a.copy()
    b[7] += 1
    assert "worst at index (7,): out=8 ref=7" in failure(b, a)
    flags = np.array([True, False])
    assert "1 of 2" in failure(flags, np.array([True, True]))


def test_nan_inf_and_shape_checks():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert_close(ref.astype(np.float32), ref)
    assert "index (0,)" in failure(np.array([0, np.inf, -np.inf, 1], np.float32), ref)
    assert "index (2,)" in failure(np.array([np.nan, np.inf, np.inf, 1], np.float32), ref)
    assert "shape mismatch" in failure(np.zeros(3), np.zeros((3, 1)))


@given(dt=dtype_strategy("fb"))
def test_dtypes_strategy_respects_kinds(dt):
    assert dt.kind in "fb" and not dt.name.startswith("float8")


@given(shape=shapes(3, min_side=2, max_side=40))
def test_shapes_strategy_respects_bounds(shape):
    assert len(shape) == 3 and all(2 <= s <= 40 for s in shape)


@given(data=st.data())
def test_arrays_strategy_draws_finite_nonzero_values(data):
    dt = data.draw(dtype_strategy())
    shape = data.draw(shapes(2, 1, 6))
    a = data.draw(arrays(dt, shape))
    assert a.shape == shape and a.dtype == dt.np and a.any()
    assert np.isfinite(a.astype(np.float64)).all()
    small = data.draw(arrays(tj.int8, (20,), min_value=-3, max_value=3))
    assert small.min() >= -3 and small.max() <= 3
    listed = data.draw(arrays(dtype_strategy("i"), st.just((4,)), elements=st.just(2)))
    assert (listed == 2).all()


def test_shapes_strategy_draws_ragged_sizes():
    found = set()

    @given(shape=shapes(1, 1, 300))
    def collect(shape):
        found.add(shape[0])
    collect()
    assert any(s & (s - 1) for s in found), found                     # not only powers of two


def test_benchmark_times_on_the_host_without_a_gpu():
    calls = []
    ms = benchmark(lambda: calls.append(sum(range(1000))), warmup=3, rep=7)
    assert len(calls) == 10 and ms > 0
