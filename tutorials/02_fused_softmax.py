"""Tutorial 2: fused softmax. The one idea: *reductions* over a tile. One program handles one
row in registers: read once, max, exp, sum, divide, write once (NumPy makes five passes).

    python3 tutorials/02_fused_softmax.py

- A 2-D tile ``(1, BLOCK)`` holds a row; ``BLOCK`` is the row length rounded up to a power of
  two (``tj.next_power_of_2``), because tile shapes are powers of two.
- ``other=-tj.inf`` makes the padding past the row's end neutral for the maximum, and exp(-inf)
  = 0 makes it neutral for the sum.
- ``tj.max(t, axis=1, keepdims=True)`` and ``tj.sum`` reduce across the row; the compiler picks
  how threads share the work (warp shuffles, then shared memory between warps).
"""
import numpy as np

import tilejit as tj


@tj.kernel
def softmax_kernel(x, y, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf)
    t = tj.exp(t - tj.max(t, axis=1, keepdims=True))          # subtract the max: no overflow
    tj.store(y, (row, 0), t / tj.sum(t, axis=1, keepdims=True))


def softmax(x):
    y = np.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, BLOCK=tj.next_power_of_2(x.shape[1]))
    return y


def main():
    x = np.random.default_rng(0).standard_normal((500, 781)).astype(np.float32) * 5
    want = np.exp(x - x.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    out = softmax(x)
    tj.testing.assert_close(out, want)
    print(f"softmax of {x.shape} rows: max error {np.abs(out - want).max():.1e}, rows sum to 1")


if __name__ == "__main__":
    main()
