"""Typed plans: the decisions an analysis makes once, recorded as immutable values that later
passes read instead of deciding again.

    SharedTile    how a tensor-core operand tile is laid out in shared memory
    Staged        an operand tile already in shared memory (a ring slot, or staged before a loop)
    StagedOperand a loop-invariant DOT operand staged into shared memory once, before its loop
    RingPlan      one load of a pipelined loop, copied ahead into a ring of shared slots
    LoopPlan      how one FOR loop is lowered (``passes.plan_loops`` decides it)
    LoopPlans     the table FOR op -> LoopPlan (``fn.meta["loop_plans"]``)
    DotFamily     the instructions a DOT runs on: wgmma, mma.sync or the FMA fallback
    DotPlan       how one DOT is lowered (``passes.plan_dots`` decides it)
    DotPlans      the table DOT op -> DotPlan (``fn.meta["dot_plans"]``)
    StorePlan     a STORE copied out by TMA boxes from a shared staging tile (``passes.plan_stores``)
    StorePlans    the table STORE op -> StorePlan (``fn.meta["store_plans"]``; stores not in it
                  are written by the threads)

Plans are keyed by the op they concern in typed tables (``LoopPlans``), never by position in a
tuple nor by a string label.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tilejit import ir


class SharedTile(enum.Enum):
    """The layout of a DOT operand tile in shared memory.  The ldmatrix forms swizzle 16-byte
    chunks of each row over the banks (``mma_layouts.swizzled_offset``); the atom forms are
    wgmma's 128-byte SW128 atoms (``wgmma.atom_offsets``).  A row-major A and a K-major B of
    at most 128-byte rows are both at once, so wgmma reads them as they are."""
    A = "a"                        # A (M x K) row-major, ldmatrix
    B = "b"                        # B (K x N) row-major, ldmatrix.trans (16-bit) or element loads
    B_NK = "b_nk"                  # B stored N x K (a ``tj.trans(k)`` operand), plain ldmatrix
    A_ATOMS = "a_atoms"            # A in K-major atoms (rows wider than 128 bytes), wgmma only
    B_ATOMS = "b_atoms"            # B N-major in 64-column atoms, wgmma only
    B_NK_ATOMS = "b_nk_atoms"      # B stored N x K in atoms (rows wider than 128 bytes), wgmma only
    A_MN_ATOMS = "a_mn_atoms"      # A stored K x M (a ``tj.trans(x)`` operand) in 64-column atoms,
                                   # M-major, wgmma only (its transposed-A form)

    @property
    def atoms(self) -> bool:
        """Only wgmma can read it (ldmatrix cannot)."""
        return self in (SharedTile.A_ATOMS, SharedTile.B_ATOMS, SharedTile.B_NK_ATOMS, SharedTile.A_MN_ATOMS)

    @property
    def ldmatrix(self) -> "SharedTile":
        """The ldmatrix form of the same tile (itself for the ldmatrix forms, and for A_MN_ATOMS,
        which has none: such a ring is dropped where its DOT falls back to mma.sync)."""
        return _LDMATRIX.get(self, self)

    @property
    def k_major(self) -> bool:
        """Rows run along K: A, and a B stored N x K."""
        return self.ldmatrix in (SharedTile.A, SharedTile.B_NK)

    @property
    def wgmma_a(self) -> bool:
        """wgmma can read it as its A operand."""
        return self in (SharedTile.A, SharedTile.A_ATOMS, SharedTile.A_MN_ATOMS)

    @property
    def wgmma_b(self) -> bool:
        """wgmma can read it as its B operand."""
        return self in (SharedTile.B_ATOMS, SharedTile.B_NK, SharedTile.B_NK_ATOMS)


_LDMATRIX = {SharedTile.A_ATOMS: SharedTile.A, SharedTile.B_ATOMS: SharedTile.B,
             SharedTile.B_NK_ATOMS: SharedTile.B_NK}


@dataclass(frozen=True)
class Staged:
    """A DOT operand in shared memory: its tile's base address (an i32 SIMT value), the
    SHARED_ALLOC buffer id and the tile's layout."""
    base: ir.Value
    buffer: int
    tile: SharedTile


@dataclass(frozen=True)
class StagedOperand:
    """Loop-invariant operand ``value`` of ``dot``, stored once before the loop as ``tile``."""
    value: ir.Value
    tile: SharedTile
    dot: ir.Operation
    align: int                             # 128 (ldmatrix's bank spread) or 1024 (wgmma atoms)


@dataclass(frozen=True)
class RingPlan:
    """One load of a pipelined loop: copied ``LoopPlan.ahead`` iterations ahead into a ring of
    ``stages`` slots laid out as ``tile``, and read from there by ``dot``."""
    load: ir.Operation
    tile: SharedTile
    dot: ir.Operation
    operand: ir.Value                      # the DOT operand the ring stands in for
    chain: tuple[ir.Operation, ...]        # the reshapes / transpose between the load and it
    offsets: tuple[ir.Operation, ...]      # the body ops computing the load's offsets
    wgmma: bool                            # read by wgmma (atoms, 1024-byte aligned slots)


@dataclass(frozen=True)
class RowRingPlan:
    """One load of a loop without tensor cores, copied ``LoopPlan.ahead`` iterations ahead into
    a thread-private ring (``passes.row_rings``): each thread copies and reads its own chunks."""
    load: ir.Operation
    offsets: tuple[ir.Operation, ...]      # the body ops computing the load's offsets
    nibbles: object = None                 # a DotConfig: packed 4-bit B read by every warp with
    #                                        ldmatrix.trans from a shared, swizzled tile (not thread-private)


class CopyEngine(enum.Enum):
    CP_ASYNC = "cp.async"                  # 16-byte copies issued by every thread
    TMA = "tma"                            # one thread's cp.async.bulk.tensor boxes, on mbarriers (passes.tma)


@dataclass(frozen=True)
class LoopPlan:
    """How a FOR loop is lowered: the operands staged before it, its rings (none: the loop is
    not pipelined), how many iterations ahead they are filled, and how many wgmma groups stay in
    flight across an iteration (for the loop's one wgmma DOT)."""
    stages: int
    rings: tuple[RingPlan, ...]
    wgmma_in_flight: int
    staged_before: tuple[StagedOperand, ...] = ()
    engine: CopyEngine = CopyEngine.CP_ASYNC
    row_rings: tuple[RowRingPlan, ...] = ()     # loads read from thread-private rings (beside cp.async ``rings``
    #                                             too: ``row_rings.dot_loop_row_rings``)
    replaced: frozenset = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # the ops the rings stand in for (each load and its chain): nothing is emitted for
        # them inside the pipelined loop
        object.__setattr__(self, "replaced", frozenset(op for r in self.rings for op in (r.load, *r.chain)))

    @property
    def pipelined(self) -> bool:
        return bool(self.rings)

    @property
    def ahead(self) -> int:
        """Iterations the copies run ahead of the DOTs that read them."""
        return self.stages - 1 - self.wgmma_in_flight

    @property
    def async_proxy(self) -> bool:
        """Ring bytes are read by wgmma (the async proxy): a proxy fence before the barrier."""
        return any(r.wgmma for r in self.rings)

    def in_flight_after(self, dot: ir.Operation) -> int:
        """wgmma groups ``dot`` leaves pending in the pipelined loop (its ``wait_group``)."""
        return self.wgmma_in_flight if any(r.dot is dot and r.wgmma for r in self.rings) else 0

    def describe(self, name) -> list[str]:
        """Lines for the IR dump (``name``: value -> its printed name)."""
        out = [f"stages={self.stages} pipelined={self.pipelined} "
               f"ahead={self.ahead if self.pipelined or self.row_rings else 0} "
               f"wgmma_in_flight={self.wgmma_in_flight} engine={self.engine.value}"]
        out += [f"  staged before: {name(s.value)} as {s.tile.name} (align {s.align}) for {name(s.dot.result)}"
                for s in self.staged_before]
        out += [f"  ring: {name(r.load.result)} as {r.tile.name}{' (wgmma)' if r.wgmma else ''} "
                f"for {name(r.dot.result)}" for r in self.rings]
        out += [f"  row ring: {name(r.load.result)} ({self.stages} slots, thread-private)" for r in self.row_rings]
        return out


class LoopPlans(dict):
    """FOR op -> its ``LoopPlan`` (every FOR loop of the function has one)."""


class DotFamily(enum.Enum):
    """The instructions a DOT runs on."""
    WGMMA = "wgmma"                        # Hopper warpgroup mma from shared tiles (passes.wgmma)
    MMA_SYNC = "mma.sync"                  # warp-level mma from ldmatrix fragments (lower_dot)
    FMA = "fma"                            # no tensor cores (lower_shared.dot_fallback)


@dataclass(frozen=True)
class DotPlan:
    """How a DOT is lowered: its instruction family and, on tensor cores, its ``DotConfig``
    (instruction shape, warp split, accumulator layout).  A WGMMA DOT falls back to mma.sync
    at lowering only where an operand did not reach a wgmma-readable shared tile."""
    family: DotFamily
    config: object = None                  # mma_tiling.DotConfig; None exactly for FMA
    why_fma: str = ""                      # FMA on a tensor-core dtype: why (mma_tiling.no_tensor_cores)

    def describe(self) -> str:
        if self.config is None:
            return self.family.value + (f" ({self.why_fma})" if self.why_fma else "")
        c = self.config
        return (f"{self.family.value} {c.kind.ab_type} m{c.m} n{c.n} k{c.k} "
                f"warps {c.warps[0]}x{c.warps[1]} acc {c.acc_dtype.name}" + (", B from nibbles" if c.nibbles else ""))


class DotPlans(dict):
    """DOT op -> its ``DotPlan`` (every DOT of the function has one)."""

    def config(self, dot: ir.Operation):
        """The tensor-core ``mma_tiling.DotConfig`` of ``dot``; None: the FMA fallback."""
        return self[dot].config

    def family(self, dot: ir.Operation) -> DotFamily:
        return self[dot].family


@dataclass(frozen=True)
class StorePlan:
    """A tile STORE that TMA copies out: the threads write the tile into a shared staging
    buffer in ``copies``' boxes (each ``rows`` rows of one 128-byte atom, SW128-swizzled, one
    after another), one thread issues a ``cp.async.bulk.tensor`` per box, and elements outside
    the array are dropped by the copy, as a STORE drops them."""
    copies: tuple                           # tma.TmaCopy per box, ``dst`` its byte offset in the staging tile
    rows: int
    item: int                               # bytes per element
    # the 2-D tile staged, where the STORE writes it reshaped with unit dims in front (an
    # attention output (1, 1, BM, BD) of a 4-D array); None: the stored tile itself
    tile: object = None

    @property
    def nbytes(self) -> int:
        return sum(c.elements for c in self.copies) * self.item

    def describe(self) -> str:
        return f"tma store: {len(self.copies)} box(es) of {'x'.join(map(str, self.copies[0].box))}, {self.nbytes} bytes staged"


class StorePlans(dict):
    """STORE op -> its ``StorePlan``, for the stores TMA copies out (the others are not in it)."""
