"""Top-k per row (the values, largest first): each program sorts its row descending with
``tj.sort`` (a bitonic network in shared memory) and stores the first K.  Past the row's end the
load reads -inf, which sorts last."""
import numpy as np

import tilejit as tj


@tj.kernel
def topk_kernel(x, out, K: tj.constexpr, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf)
    best = tj.sort(t, axis=1, descending=True)
    keep = tj.arange(0, BLOCK)[None, :] < K
    tj.store(out, (row, 0), best, mask=keep)


def run(x, k=8):
    out = np.empty((x.shape[0], k), x.dtype)
    topk_kernel[(x.shape[0],)](x, out, K=k, BLOCK=tj.next_power_of_2(x.shape[1]))
    return out


def reference(x, k=8):
    return -np.sort(-x.astype(np.float64), axis=1)[:, :k]


def example_inputs(rng):
    return (rng.standard_normal((100, 300)).astype(np.float32),)


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref)
    print(f"top-8 of {inputs[0].shape[0]} rows of {inputs[0].shape[1]}: max error {np.abs(out - ref).max():.2e}")
