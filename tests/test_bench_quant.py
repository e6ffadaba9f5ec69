"""``benchmarks/bench_quant.py``'s accuracy comparison (its NumPy half, no GPU needed): the
rowwise float8 quantisation ``torch._scaled_mm`` takes, and the error measure both fp8 paths
are held to against the float64 product of the unquantised data (#20's error target)."""
import os
import sys

import numpy as np

import tilejit as tj

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


def test_rowwise_quantisation_scales_each_row_or_column_to_the_float8_range():
    import bench_quant
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 96)) * rng.uniform(0.1, 50, (64, 1))).astype(np.float32)
    for axis, shape in ((1, (64, 1)), (0, (1, 96))):
        q, scale = bench_quant.quantize_rowwise(x, axis)
        assert q.dtype == tj.float8e4m3.np and scale.shape == shape and scale.dtype == np.float32
        back = q.astype(np.float64) * scale
        assert np.abs(q.astype(np.float64)).max(axis=axis).min() == 448.0      # each row / column fills the range
        np.testing.assert_array_less(np.abs(back - x), 2**-3 * np.abs(x) + 2**-6 * scale)   # e4m3: 3 mantissa bits


def test_the_error_measure_is_relative_in_float64_and_infinite_for_a_nan():
    import bench_quant
    ref = np.array([[3.0, 4.0]])
    assert bench_quant.relative_error64(np.array([[3.0, 4.5]], np.float32), ref) == 0.1
    assert bench_quant.relative_error64(np.array([[np.nan, 4.0]]), ref) == float("inf")
