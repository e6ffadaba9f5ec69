"""A histogram of integer values: each program loads a block of values and ``tj.atomic_add``s a
one into ``counts`` at each value (an index tile as the offset: a scatter), so repeated values in
a block and across programs all count; values outside ``[0, bins)`` are masked off."""
import numpy as np

import tilejit as tj


@tj.kernel
def histogram_kernel(x, counts, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    v = tj.load(x, (i,), (BLOCK,), other=-1)                      # -1 past the end: not counted
    ok = (v >= 0) & (v < counts.shape[0])
    tj.atomic_add(counts, (v,), tj.full((BLOCK,), 1, tj.int32), mask=ok)


def run(x, bins=256, BLOCK=1024):
    counts = np.zeros(bins, np.int32)
    histogram_kernel[(tj.cdiv(x.size, BLOCK),)](x, counts, BLOCK=BLOCK)
    return counts


def reference(x, bins=256, **_):
    inside = x[(x >= 0) & (x < bins)]
    return np.bincount(inside, minlength=bins)[:bins].astype(np.float64)


def example_inputs(rng):
    return (np.clip(rng.normal(128, 50, 100_000), -20, 300).astype(np.int32),)


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out.astype(np.float64), ref)
    print(f"histogram of {inputs[0].size} values in {out.size} bins: {int(out.sum())} counted")
