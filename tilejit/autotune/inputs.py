"""Arrays an autotuned kernel overwrites: snapshots taken before tuning, put back before each
timed run (``restore=``) or zeroed (``reset=``), and put back as the user gave them afterwards,
so tuning leaves no trace and the one real launch sees the user's inputs. Works on NumPy, torch,
CuPy and ``tj.DeviceArray`` arrays."""
from __future__ import annotations

import numpy as np

from tilejit.errors import LaunchError

class InputGuard:
    """Snapshots the ``restore`` and ``reset`` arrays before tuning; before each timed run
    restores the first and zeroes the second; after tuning puts both back as the user gave them."""

    def __init__(self, bound: dict, restore, reset):
        self.restore = [(bound[n], _snapshot(n, bound[n])) for n in restore]
        self.reset = [(bound[n], _snapshot(n, bound[n])) for n in reset]

    def before_run(self) -> None:
        for array, saved in self.restore:
            _copy_into(array, saved)
        for array, _ in self.reset:
            _zero(array)

    def __enter__(self) -> "InputGuard":
        return self

    def __exit__(self, *exc) -> None:
        for array, saved in self.restore + self.reset:
            _copy_into(array, saved)


def _snapshot(name: str, array):
    if hasattr(array, "clone"):                        # torch
        return array.clone()
    if hasattr(array, "copy_from_host"):               # tj.DeviceArray
        return array.numpy()
    if hasattr(array, "copy") and hasattr(array, "shape"):   # NumPy, CuPy
        return array.copy()
    raise LaunchError(f"tj.autotune restore/reset: argument '{name}' is not an array "
                      f"({type(array).__name__})")


def _copy_into(array, saved) -> None:
    if hasattr(array, "copy_"):
        array.copy_(saved)
    elif hasattr(array, "copy_from_host"):
        array.copy_from_host(saved)
    else:
        array[...] = saved


def _zero(array) -> None:
    if hasattr(array, "zero_"):
        array.zero_()
    elif hasattr(array, "copy_from_host"):
        array.copy_from_host(np.zeros(array.shape, array.dtype.np))
    else:
        array[...] = 0
