"""Hopper TMA copies and mbarriers for the ``emulate`` backend (PTX ISA: "Tensor Copy" and
"mbarrier").

    EmulatedMap(array, desc)       a TENSOR_MAP parameter: ``box(coords)`` reads one box
    swizzle(addr, span)            the shared byte address a TMA copy writes byte ``addr`` to
    Mbarriers()                    the mbarriers of one CTA batch, phase by phase

A copy reads its box when issued (elements outside the array read zero), writes the swizzled
bytes, and keeps them *pending* until a thread waits on the phase of the mbarrier the copy
completes: reading them before that is an error, as is waiting on a phase that can never
complete (a missing arrival or a byte count that does not match the copies), initialising a
live mbarrier or invalidating one with bytes in flight.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from tilejit.runtime.tensormap import tiled_args


class TmaError(Exception):
    """A TMA or mbarrier misuse (the emulator reports it with the op's source line)."""


def swizzle(addr: np.ndarray, span: int) -> np.ndarray:
    """Where the TMA unit puts byte ``addr`` under a ``span``-byte swizzle (0: none): the
    16-byte chunk index (bits 4..) is XORed with the address bits 7.. (CUTLASS's
    ``Swizzle<log2(span / 16), 4, 3>``)."""
    if not span:
        return addr
    mask = (span // 16 - 1) << 7
    return addr ^ ((addr & mask) >> 3)


class EmulatedMap:
    """A tensor map of host array ``array`` (an ``emulate.GlobalArray``) for ``desc`` (its
    ParamDesc).  ``usable`` is False where the runtime would pass zeros (TMA's rules broken):
    a kernel must not copy through it then."""

    def __init__(self, array, desc):
        self.array, self.desc = array, desc
        a = array.array
        strides = tuple(s // a.itemsize for s in a.strides)
        self.usable = tiled_args(array.address, a.shape, strides, desc.dtype, desc.box, desc.swizzle) is not None
        self.nbytes = int(np.prod(desc.box)) * a.itemsize

    def _clip(self, coords: tuple):
        """(the array's slices, the box's slices) of the part of the box at ``coords`` inside the
        array; None when none of it is."""
        src, dst = [], []
        for c, n, size in zip(coords, self.desc.box, self.array.array.shape):
            lo, hi = max(c, 0), min(c + n, size)
            if lo >= hi:
                return None
            src.append(slice(lo, hi))
            dst.append(slice(lo - c, hi - c))
        return tuple(src), tuple(dst)

    def store_box(self, coords: tuple, data: np.ndarray) -> None:
        """Write the box at element ``coords`` from ``data`` (its bytes, row-major); elements
        outside the array are dropped."""
        a = self.array.array
        if not a.flags.writeable:
            raise TmaError(f"argument '{self.array.name}' is stored to but is read-only")
        box = np.ascontiguousarray(data).view(a.dtype).reshape(self.desc.box)
        parts = self._clip(coords)
        if parts is not None:
            a[parts[0]] = box[parts[1]]

    def box(self, coords: tuple) -> np.ndarray:
        """The box at element ``coords`` as bytes, row-major; zeros outside the array."""
        a = self.array.array
        out = np.zeros(self.desc.box, a.dtype)
        parts = self._clip(coords)
        if parts is not None:
            out[parts[1]] = a[parts[0]]
        return np.ascontiguousarray(out).view(np.uint8).ravel()


@dataclass
class _Barrier:
    count: int
    arrivals: int
    tx: int = 0                       # announced minus completed transaction bytes
    phase: int = 0                    # phases completed
    copies: list = field(default_factory=list)     # (cta, byte addresses) of this phase's copies
    done: list = field(default_factory=list)       # ... of the last completed phase
    stamp: dict = field(default_factory=dict)      # CTA row: its consumers' latest epoch among this
    done_stamp: dict = field(default_factory=dict)  # phase's arrivals; ... of the last completed phase


class Mbarriers:
    """The mbarriers of a batch of CTAs, keyed by (CTA row, shared byte address)."""

    def __init__(self, shared_bytes: int, ctas: int):
        self.bars: dict[tuple, _Barrier] = {}
        self.pending = np.zeros((ctas, shared_bytes), bool)     # bytes of copies not yet waited for
        self.progress = 0                                       # state changes so far (hang detection)

    def _get(self, key) -> _Barrier:
        bar = self.bars.get(key)
        if bar is None:
            raise TmaError(f"mbarrier at shared byte {key[1]} is used before MBARRIER_INIT")
        return bar

    def arrive(self, key, count: int, stamp: int = -1, source: int | None = None) -> None:
        """``count`` threads arrive (mbarrier.arrive); ``stamp``: the consumer warps' epoch
        when they are the ones arriving (``ConsumerEpochs``), else -1; ``source``: the CTA row
        they run in (default: the mbarrier's own, ``key[0]``; another for a remote arrival)."""
        if count:
            bar = self._get(key)
            bar.arrivals -= count
            row = key[0] if source is None else source
            bar.stamp[row] = max(bar.stamp.get(row, -1), stamp)
            if bar.arrivals < 0:
                raise TmaError(f"more arrivals on the mbarrier at shared byte {key[1]} than its count")
            self._complete(bar)

    def init(self, key, count: int) -> None:
        if key in self.bars:
            raise TmaError(f"MBARRIER_INIT of the live mbarrier at shared byte {key[1]} (MBARRIER_INVAL it first)")
        self.bars[key] = _Barrier(count, count)

    def inval(self, key) -> None:
        bar = self._get(key)
        if bar.copies or bar.arrivals != bar.count:
            raise TmaError(f"MBARRIER_INVAL of the mbarrier at shared byte {key[1]} in the middle of a phase "
                           f"({len(bar.copies)} TMA copies not waited for)")
        del self.bars[key]

    def expect_tx(self, key, nbytes: int) -> None:
        bar = self._get(key)
        bar.arrivals -= 1
        bar.tx += nbytes
        if bar.arrivals < 0:
            raise TmaError(f"more arrivals on the mbarrier at shared byte {key[1]} than its count")
        self._complete(bar)

    def copy(self, key, cta: int, addrs: np.ndarray, nbytes: int) -> None:
        bar = self._get(key)
        bar.tx -= nbytes
        bar.copies.append((cta, addrs))
        self.pending[cta, addrs] = True
        self._complete(bar)

    def _complete(self, bar: _Barrier) -> None:
        self.progress += 1
        if bar.arrivals == 0 and bar.tx == 0:
            bar.phase += 1
            bar.arrivals = bar.count
            bar.done, bar.copies = bar.copies, []
            bar.done_stamp, bar.stamp = bar.stamp, {}

    def ready(self, key, parity: int) -> bool:
        """Whether the phase of ``parity`` has completed (a wait would return)."""
        return self._get(key).phase % 2 != parity % 2

    def wait(self, key, parity: int) -> int:
        """Returns when the phase of ``parity`` has completed (the current one has the other
        parity); its copies' bytes stop being pending.  The result: {CTA row: the consumers'
        epoch that phase's arrivals from that row carried} (empty for the phase before the first,
        which a wait on the other parity of a fresh mbarrier passes at once)."""
        bar = self._get(key)
        if bar.phase % 2 == parity % 2:
            raise TmaError(f"MBARRIER_WAIT would hang: phase {bar.phase} of the mbarrier at shared byte {key[1]} "
                           f"cannot complete ({bar.arrivals} arrivals missing, {bar.tx} transaction bytes "
                           f"announced but not copied)")
        for cta, addrs in bar.done:
            self.pending[cta, addrs] = False
        bar.done = []
        return bar.done_stamp if bar.phase else {}


class ConsumerEpochs:
    """Which shared bytes the consumer warps of a warp-specialised split touched that the
    producer has not been told they are done with.  The consumers' epoch (per CTA) advances at
    each of their mbarrier arrivals; every byte they read or write is stamped with it.  A
    producer's wait on a phase their arrival completed tells it the epoch of that arrival
    (``known``): bytes stamped later may still be in use, and a TMA copy into them is a race.
    (A CTA barrier among the consumers orders them among themselves, not with the producer.)"""

    def __init__(self, ctas: int, shared_bytes: int):
        self.stamp = np.full((ctas, shared_bytes), -1, np.int32)
        self.epoch = np.zeros(ctas, np.int32)
        self.known = np.full(ctas, -1, np.int32)

    def touch(self, rows, addr) -> None:
        self.stamp[rows, addr] = self.epoch[rows]

    def arrive(self, row: int) -> int:
        """The consumers of ``row`` arrive: the stamp their arrival carries."""
        self.epoch[row] += 1
        return int(self.epoch[row]) - 1

    def learn(self, row: int, stamp: int) -> None:
        self.known[row] = max(self.known[row], stamp)

    def in_use(self, row: int, addrs) -> bool:
        """Whether a byte of ``addrs`` was touched after the last arrival the producer knows of."""
        return bool((self.stamp[row, addrs] > self.known[row]).any())


class Baton:
    """Two sides of a warp-specialised IF (consumers, producer), each on its own Python thread,
    one running at a time: a side whose mbarrier wait cannot return yet hands the baton over.
    When the other side comes back without any mbarrier having changed, neither can go on:
    ``pause`` returns False (the wait would hang)."""

    def __init__(self, bars: Mbarriers):
        self.bars = bars
        self.cv = threading.Condition()
        self.turn = 0
        self.done = [False, False]
        self.failed = False

    def acquire(self, side: int) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.turn == side or self.failed)
            if self.failed:
                raise _Abandoned()

    def pause(self, side: int) -> bool:
        """Let the other side run until it waits or ends; False when nothing changed."""
        with self.cv:
            if self.done[1 - side]:
                return False
            before = self.bars.progress
            self.turn = 1 - side
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn == side or self.failed)
            if self.failed:
                raise _Abandoned()
            return self.bars.progress != before

    def finish(self, side: int, failed: bool = False) -> None:
        with self.cv:
            self.done[side] = True
            self.failed = self.failed or failed
            self.turn = 1 - side
            self.cv.notify_all()


class _Abandoned(Exception):
    """The other side failed: this side stops where it is."""
