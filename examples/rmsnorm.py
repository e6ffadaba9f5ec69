"""RMS normalisation over the last axis with a weight (LLaMA's RMSNorm), statistics in float32."""
import numpy as np

import tilejit as tj


@tj.kernel
def rmsnorm_kernel(x, weight, y, eps, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK)).to(tj.float32)            # zeros past the row's end
    mean_square = tj.sum(t * t, axis=1, keepdims=True) / x.shape[1]
    w = tj.load(weight, (0,), (BLOCK,)).to(tj.float32)[None, :]
    tj.store(y, (row, 0), (t * tj.rsqrt(mean_square + eps) * w).to(y.dtype))


def run(x, weight, eps=1e-6):
    y = np.empty_like(x)
    rmsnorm_kernel[(x.shape[0],)](x, weight, y, eps, BLOCK=tj.next_power_of_2(x.shape[1]))
    return y


def reference(x, weight, eps=1e-6):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight.astype(np.float64)


def example_inputs(rng):
    n = 1000
    return rng.standard_normal((300, n)).astype(np.float32) * 3 + 1, rng.standard_normal(n).astype(np.float32)


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    print(f"rmsnorm {inputs[0].shape}: max error {np.abs(out - ref).max():.2e}")
