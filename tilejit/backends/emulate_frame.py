"""The emulator's smallest shared pieces, one floor below ``emulate`` and its op mixins: the
error it raises, a batch of CTAs' values (``Frame``) and the uniform-control check."""
from __future__ import annotations

import numpy as np

from tilejit.errors import LaunchError

WARP = 32
FENCED = -2     # Machine.unfenced: shared bytes fenced by their writer, not yet published by a barrier


class EmulatorError(LaunchError):
    """The SIMT program did something the hardware would not do correctly (race, misaligned
    vector access, divergent control flow): always a compiler bug."""



class Frame:
    """The values of a set of CTAs of the batch (``ids`` index the batch)."""

    def __init__(self, env: dict, ids: np.ndarray):
        self.env, self.ids = env, ids

    def subset(self, sel: np.ndarray) -> "Frame":
        env = {k: (v[sel] if isinstance(v, np.ndarray) else v) for k, v in self.env.items()}
        return Frame(env, self.ids[sel])

    def __getitem__(self, v):
        return self.env[v]

    def __setitem__(self, v, x):
        self.env[v] = x


def uniform(x: np.ndarray, what: str) -> np.ndarray:
    """The per-CTA value of a control operand, which every thread must agree on."""
    first = x[:, 0, 0]
    if not (x == first[:, None, None]).all():
        raise EmulatorError(f"{what} differs between threads of a CTA")
    return first

