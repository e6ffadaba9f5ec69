"""SIMT IR: the per-thread program of one CTA, produced by ``passes.lower_to_simt`` and consumed
by the NumPy emulator (``tilejit.emulator``) and LLVM emission (``tilejit.codegen``).

Every value lives in each thread as a small register vector ``RegType(dtype, n)`` (``n == 1``
for a scalar).  Control flow is uniform across the CTA (structured FOR/IF/WHILE with the tile
IR's semantics), so the program has no divergence; per-element predication is done with
masks on memory ops and WHERE.  The ops reuse the tile IR's elementwise names so that one
table of NumPy/LLVM implementations serves both levels.

Kernel parameters are described by ``ParamDesc`` records in ``Function.meta["params"]``: the
runtime packs arguments by that list and never needs to know how the code was made.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from tilejit.dtypes import DType
from tilejit.ir import Attrs, Function, TileOp  # noqa: F401  (Function re-exported for users of this module)


@dataclass(frozen=True)
class RegType:
    """``n`` registers of ``dtype`` held by every thread."""
    dtype: DType
    n: int = 1

    def __str__(self) -> str:
        return f"{self.dtype}" if self.n == 1 else f"<{self.n}x{self.dtype}>"


@dataclass(frozen=True)
class PtrType:
    """A global-memory pointer to ``dtype`` elements (kernel parameter only)."""
    dtype: DType

    def __str__(self) -> str:
        return f"ptr<{self.dtype}>"


@dataclass(frozen=True)
class ParamDesc:
    """One kernel parameter, in launch order.

    kind: "ptr" (data pointer of array argument ``arg``), "dim" (its size along ``axis``, i32),
    "stride" (its stride along ``axis`` in elements; ``dtype`` i32 or i64), or "scalar" (a scalar
    argument, of ``dtype``).  ``arg`` indexes the kernel's runtime (non-constexpr) arguments."""
    kind: str
    arg: int
    axis: int | None
    dtype: DType


class SimtOp(enum.Enum):
    # thread geometry (all i32, n=1)
    THREAD_ID = enum.auto()      # threadIdx.x in [0, 32*num_warps)
    BLOCK_ID = enum.auto()       # blockIdx along attrs.axis                   AxisAttrs
    GRID_DIM = enum.auto()       # gridDim along attrs.axis                    AxisAttrs
    PARAM = enum.auto()          # () -> the value of kernel parameter attrs.axis (index)  AxisAttrs
    # register vectors
    CONSTANT = enum.auto()       # () -> RegType(dtype, n) of attrs.values     VectorConstAttrs
    SPLAT = enum.auto()          # (x: n=1) -> n copies
    GATHER = enum.auto()         # (x) -> x[attrs.indices] (compile-time register selection)  IndicesAttrs
    CONCAT = enum.auto()         # (*xs) -> registers of xs one after another
    # elementwise: every TileOp in ir.ELEMENTWISE_OPS, same semantics, operands of equal n;
    # they appear here as ("ew", TileOp) through SimtOp.ELEMENTWISE with attrs EwAttrs.
    ELEMENTWISE = enum.auto()    # (*xs) -> apply attrs.op register by register    EwAttrs
    # warp level
    SHUFFLE_XOR = enum.auto()    # (x) -> x of lane (laneid ^ attrs.mask), register by register  MaskAttrs
    SHUFFLE_IDX = enum.auto()    # (x, lane: i32 n=1) -> x of lane `lane`
    # global memory; offsets are element offsets (i32 or i64) from the pointer
    LOAD_GLOBAL = enum.auto()    # (ptr, offsets, mask: bool) -> n values; masked-off read attrs.other  GlobalAttrs
    STORE_GLOBAL = enum.auto()   # (ptr, offsets, value, mask: bool) -> ()                   GlobalAttrs
    # shared memory; addresses are byte offsets into the CTA's one shared buffer (i32)
    LOAD_SHARED = enum.auto()    # (addr) -> n values of the result dtype                     SharedAttrs
    STORE_SHARED = enum.auto()   # (addr, value) -> ()                                          SharedAttrs
    BARRIER = enum.auto()        # bar.sync 0 across the CTA
    # structured control flow: same as TileOp.FOR / IF / WHILE / YIELD
    FOR = enum.auto()
    IF = enum.auto()
    WHILE = enum.auto()
    YIELD = enum.auto()
    # tensor cores and async copies (issue #4) are added here:
    # LDMATRIX, MMA, CP_ASYNC, CP_ASYNC_COMMIT, CP_ASYNC_WAIT


@dataclass(frozen=True)
class VectorConstAttrs(Attrs):
    values: tuple                 # one Python number per register


@dataclass(frozen=True)
class IndicesAttrs(Attrs):
    indices: tuple[int, ...]


@dataclass(frozen=True)
class EwAttrs(Attrs):
    op: TileOp                    # an elementwise TileOp (ADD, EXP, CAST, WHERE, ...)


@dataclass(frozen=True)
class MaskAttrs(Attrs):
    mask: int


@dataclass(frozen=True)
class GlobalAttrs(Attrs):
    vec: int = 1                  # groups of `vec` registers are contiguous and vec*itemsize aligned
    other: bool | int | float = 0


@dataclass(frozen=True)
class SharedAttrs(Attrs):
    vec: int = 1                  # groups of `vec` registers are contiguous and vec*itemsize aligned
