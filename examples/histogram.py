"""A histogram of integer values, two ways.

``histogram_kernel`` is the direct one: each program loads a block of values and
``tj.atomic_add``s a one into ``counts`` at each value (an index tile as the offset: a scatter),
so repeated values in a block and across programs all count; values outside ``[0, bins)`` are
masked off.  Every value is one atomic on a few hundred addresses, which the GPU serialises.

``histogram_blocks_kernel`` (what ``run`` uses) counts privately first: each program counts
``PER_PROGRAM`` values, ``CHUNK`` at a time, into a (``BINS``,) tile in registers with
``tj.histogram`` (values outside ``[0, BINS)`` are not counted), then adds that tile to
``counts`` with one atomic per bin.  On the H200 (2026-12-05), 16M values into 256 bins took
3.99 ms the direct way and 0.46 ms this way (``torch.bincount``: 0.21 ms)."""
import numpy as np

import tilejit as tj


@tj.kernel
def histogram_kernel(x, counts, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    v = tj.load(x, (i,), (BLOCK,), other=-1)                      # -1 past the end: not counted
    ok = (v >= 0) & (v < counts.shape[0])
    tj.atomic_add(counts, (v,), tj.full((BLOCK,), 1, tj.int32), mask=ok)


@tj.kernel
def histogram_blocks_kernel(x, counts, BINS: tj.constexpr, CHUNK: tj.constexpr, PER_PROGRAM: tj.constexpr):
    start = tj.program_id(0) * PER_PROGRAM
    h = tj.zeros((BINS,), tj.int32)
    for i in range(start, start + PER_PROGRAM, CHUNK):
        h += tj.histogram(tj.load(x, (i,), (CHUNK,), other=-1), BINS)      # -1 past the end
    tj.atomic_add(counts, (0,), h)                                       # one atomic per bin


def blocks(bins: int, size: int) -> dict:
    """The constexprs and warps of ``histogram_blocks_kernel`` for ``bins`` bins (a power of two) and
    ``size`` values: chunks of 65536 // bins values (tj.histogram's limit of compares), at
    most 64 chunks per program."""
    chunk = max(1, (1 << 16) // bins)
    return {"BINS": bins, "CHUNK": chunk, "PER_PROGRAM": chunk * min(64, tj.cdiv(size, chunk)),
            "num_warps": 4}     # the (CHUNK, BINS) compares: 512 a thread


def run(x, bins=256):
    counts = np.zeros(bins, np.int32)
    meta = blocks(bins, x.size)
    histogram_blocks_kernel[(tj.cdiv(x.size, meta["PER_PROGRAM"]),)](x, counts, **meta)
    return counts


def run_scatter(x, bins=256, BLOCK=1024):
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
    tj.testing.assert_close(run_scatter(*inputs).astype(np.float64), ref)
    print(f"histogram of {inputs[0].size} values in {out.size} bins: {int(out.sum())} counted")
