"""Layer normalisation over the last axis with weight and bias, statistics in float32."""
import numpy as np

import tilejit as tj


@tj.kernel
def layernorm_kernel(x, weight, bias, y, eps, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    n = x.shape[1]
    t = tj.load(x, (row, 0), (1, BLOCK)).to(tj.float32)            # zeros past the row's end
    mean = tj.sum(t, axis=1, keepdims=True) / n
    inside = tj.arange(0, BLOCK)[None, :] < n
    centered = tj.where(inside, t - mean, 0.0)                      # padding must not count
    var = tj.sum(centered * centered, axis=1, keepdims=True) / n
    w = tj.load(weight, (0,), (BLOCK,)).to(tj.float32)[None, :]
    b = tj.load(bias, (0,), (BLOCK,)).to(tj.float32)[None, :]
    out = centered * tj.rsqrt(var + eps) * w + b
    tj.store(y, (row, 0), out.to(y.dtype))


def run(x, weight, bias, eps=1e-5):
    y = np.empty_like(x)
    layernorm_kernel[(x.shape[0],)](x, weight, bias, y, eps, BLOCK=tj.next_power_of_2(x.shape[1]))
    return y


def reference(x, weight, bias, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight.astype(np.float64) + bias.astype(np.float64)


def example_inputs(rng):
    n = 1000
    x = rng.standard_normal((300, n)).astype(np.float32) * 3 + 1
    return x, rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    print(f"layernorm {inputs[0].shape}: max error {np.abs(out - ref).max():.2e}")
