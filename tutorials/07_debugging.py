"""Tutorial 7: debugging on the CPU. The one idea: every kernel also runs without a GPU, on two
CPU backends, with the same semantics, so bugs can be found with ordinary tools.

    TILEJIT_BACKEND=interpret python3 tutorials/07_debugging.py
    TILEJIT_BACKEND=emulate   python3 tutorials/07_debugging.py

- ``interpret`` runs the tile IR program by program with NumPy: the language's reference meaning.
- ``emulate`` runs the compiled SIMT program, the one the GPU gets, thread by thread in lockstep:
  layouts, shuffles, shared memory and barriers included; it reports shared-memory races.
- ``tj.static_print`` prints compile-time values (tile types) while the kernel is traced;
  ``tj.static_assert`` fails the compile at that line.
- ``tj.device_print`` prints values while the kernel runs (``vprintf`` on the GPU).
- ``tj.device_assert`` checks a condition when launched with ``debug=True`` (or
  ``TILEJIT_DEBUG=1``) and raises ``tj.DeviceAssertError`` naming the kernel, the line and the
  program; without debug it compiles to nothing.
- ``tilejit compile FILE::KERNEL --sig ... --emit simt|llvm|ptx`` prints any stage.
"""
import numpy as np

import tilejit as tj


@tj.kernel
def scale_rows(x, y, factor, BLOCK: tj.constexpr):
    tj.static_assert(BLOCK >= 16, "BLOCK must be at least 16")
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK))
    tj.static_print("the tile:", t)                         # once per compile: its type
    tj.device_assert(tj.abs(t) < 1000.0, "input out of range")
    if row == 0:
        tj.device_print("row 0 max:", tj.max(t, axis=1))
    tj.store(y, (row, 0), t * factor)


def main():
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    y = np.empty_like(x)
    scale_rows[(3,)](x, y, 2.0, BLOCK=16)
    np.testing.assert_array_equal(y, x * 2)
    x[2, 5] = 5000.0
    try:
        scale_rows[(3,)](x, y, 2.0, BLOCK=16, debug=True)
    except tj.DeviceAssertError as err:
        print("caught:", str(err).splitlines()[0])
    else:
        raise AssertionError("the device assert did not fire")
    try:
        scale_rows[(3,)](x, y, 2.0, BLOCK=8)
    except tj.CompileError as err:
        print("refused at compile time:", str(err).splitlines()[0])


if __name__ == "__main__":
    main()
