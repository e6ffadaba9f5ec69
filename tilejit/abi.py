"""The kernel ABI the compiler and the runtime share: how a compiled kernel's parameters are laid
out.  The compiler lists them (``simt.Function.meta``'s params, in launch order); the runtime
packs host arguments by the list (``tilejit.runtime.packing``) without knowing the compiler."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from tilejit.dtypes import DType


# A kernel with ``tj.device_assert`` checks has a global record of ASSERT_WORDS int32s: the failed
# assert's number + 1 (0: none failed), the program id (3) and the element's coordinates.  Codegen
# fills it (``codegen.memory.device_assert``); the runtime reads and clears it after a launch.
ASSERT_SYMBOL = "tilejit_assert_record"
ASSERT_WORDS = 16


class ParamKind(enum.Enum):
    """What a kernel parameter carries (its value is the name the artifact cache stores)."""
    PTR = "ptr"                  # the data pointer of array argument ``arg``
    DIM = "dim"                  # its size along ``axis`` (i32, or i64 for arrays of 2^31+ elements)
    STRIDE = "stride"            # its stride along ``axis`` in elements (i32 or i64)
    SCALAR = "scalar"            # a scalar argument, of ``dtype``
    WORKSPACE = "workspace"      # a float32 scratch buffer the runtime owns and passes (its address; its
    #                              counters zero between launches): a stream-K kernel's (``workspace_words``)
    TENSOR_MAP = "tensor_map"    # a TMA descriptor of array argument ``arg`` (CUtensorMap, 128 bytes,
    #                              a ``__grid_constant__``): ``box`` elements per dim, ``swizzle`` bytes


@dataclass(frozen=True)
class ParamDesc:
    """One kernel parameter, in launch order: a ``ParamKind`` (its name is accepted too, as
    the artifact cache stores it), the runtime (non-constexpr) argument ``arg`` it comes from,
    the array ``axis`` of a DIM or STRIDE, and its ``dtype``.  A TENSOR_MAP also has the
    ``box`` it copies (elements per array dim, in the array's order) and its ``swizzle`` span
    in bytes (0, 32, 64 or 128)."""
    kind: ParamKind
    arg: int
    axis: int | None
    dtype: DType
    box: tuple = ()
    swizzle: int = 0

    def __post_init__(self):
        if not isinstance(self.kind, ParamKind):
            object.__setattr__(self, "kind", ParamKind(self.kind))
        object.__setattr__(self, "box", tuple(self.box))


TENSOR_MAP_BYTES = 128          # sizeof(CUtensorMap); the parameter is 64-byte aligned


def workspace_words(slot_words: int, ctas: int) -> int:
    """Float32 words of a stream-K kernel's workspace (``passes/stream_k.py``) for a launch of
    ``ctas`` CTAs: ``2 * ctas`` arrival counters, then two slots of ``slot_words`` a CTA."""
    return 2 * ctas * (1 + slot_words)
