"""Tutorial 1: vector addition. The one idea: a kernel is a Python function over *tiles*, run
once per *program*; the grid says how many programs, and each picks its block by its id.

    python3 tutorials/01_vector_add.py          # on the GPU if there is one, else the emulator

- ``@tj.kernel`` compiles the function on its first launch for the arguments' dtypes and
  shapes (a second launch with the same kinds of arguments reuses the compiled code).
- ``tj.program_id(0)`` is this program's index along grid axis 0.
- ``tj.load(x, offsets, shape)`` reads a tile of ``shape`` elements starting at ``offsets``
  (element offsets, one per dimension). Reads past the end give 0 (``other=``), writes past the
  end are dropped: the last, partial block needs no special code.
- ``BLOCK: tj.constexpr`` is a compile-time constant: tile shapes must be known when compiling.
- ``kernel[grid](...)`` launches; ``tj.cdiv(n, BLOCK)`` programs cover n elements.
"""
import numpy as np

import tilejit as tj


@tj.kernel
def add_kernel(x, y, out, BLOCK: tj.constexpr):
    start = tj.program_id(0) * BLOCK                 # this program's first element
    a = tj.load(x, (start,), (BLOCK,))
    b = tj.load(y, (start,), (BLOCK,))
    tj.store(out, (start,), a + b)


def add(x, y, BLOCK=1024):
    out = np.empty_like(x)
    add_kernel[(tj.cdiv(x.size, BLOCK),)](x, y, out, BLOCK=BLOCK)
    return out


def main():
    rng = np.random.default_rng(0)
    n = 98_765                                       # not a multiple of BLOCK: the edge is masked
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = add(x, y)
    np.testing.assert_array_equal(out, x + y)
    info = add_kernel.inspect(x, y, out, BLOCK=1024)      # compiles for the GPU, runs nothing
    print(f"vector add of {n} float32: equal to NumPy's x + y ({tj.cdiv(n, 1024)} programs of "
          f"{info.num_warps} warps, the number of warps chosen by the compiler)")


if __name__ == "__main__":
    main()
