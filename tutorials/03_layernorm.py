"""Tutorial 3: layer normalisation. The one idea: *dtypes and broadcasting*. Inputs may be 16-bit;
the statistics are computed in float32, and per-column weights broadcast against the rows.

    python3 tutorials/03_layernorm.py

- ``t.to(tj.float32)`` converts a tile; ``out.to(y.dtype)`` converts back for the store.
- ``w[None, :]`` adds an axis, as in NumPy: a (BLOCK,) weight broadcasts over (1, BLOCK) rows.
- Padding past the row's end loads as 0, but ``t - mean`` is not 0 there: ``tj.where`` masks it
  out of the variance (``tj.arange(0, BLOCK) < n`` marks the real columns).
- ``eps`` is a runtime scalar argument: a Python float becomes a float32 parameter.
"""
import numpy as np

import tilejit as tj


@tj.kernel
def layernorm_kernel(x, weight, bias, y, eps, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    n = x.shape[1]                                           # array shapes are runtime values
    t = tj.load(x, (row, 0), (1, BLOCK)).to(tj.float32)
    mean = tj.sum(t, axis=1, keepdims=True) / n
    inside = tj.arange(0, BLOCK)[None, :] < n
    centered = tj.where(inside, t - mean, 0.0)
    var = tj.sum(centered * centered, axis=1, keepdims=True) / n
    w = tj.load(weight, (0,), (BLOCK,)).to(tj.float32)[None, :]
    b = tj.load(bias, (0,), (BLOCK,)).to(tj.float32)[None, :]
    tj.store(y, (row, 0), (centered * tj.rsqrt(var + eps) * w + b).to(y.dtype))


def layernorm(x, weight, bias, eps=1e-5):
    y = np.empty_like(x)
    layernorm_kernel[(x.shape[0],)](x, weight, bias, y, eps, BLOCK=tj.next_power_of_2(x.shape[1]))
    return y


def main():
    rng = np.random.default_rng(0)
    n = 700
    x = (rng.standard_normal((256, n)) * 3 + 1).astype(np.float16)
    w, b = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    out = layernorm(x, w, b)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    want = (x64 - mean) / np.sqrt(var + 1e-5) * w.astype(np.float64) + b.astype(np.float64)
    tj.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    print(f"layernorm of float16 {x.shape}: max error {np.abs(out - want).max():.1e} (float16 output)")


if __name__ == "__main__":
    main()
