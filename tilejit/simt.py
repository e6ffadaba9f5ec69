"""SIMT IR: the per-thread program of one CTA, produced by ``passes.lower_to_simt`` and consumed
by the NumPy emulator (``tilejit.backends.emulate``) and LLVM emission (``tilejit.codegen.llvm``).

Every value lives in each thread as a small register vector ``RegType(dtype, n)`` (``n == 1``
for a scalar).  Control flow is uniform across the CTA (structured FOR/IF/WHILE with the tile
IR's semantics), so the program has no divergence; per-element predication is done with
masks on memory ops and WHERE.  The ops reuse the tile IR's elementwise names so that one
table of NumPy/LLVM implementations serves both levels.

Kernel parameters are described by ``ParamDesc`` records (``tilejit.abi``: a ``ParamKind`` each) in ``Function.meta["params"]``: the
runtime packs arguments by that list and never needs to know how the code was made.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tilejit.abi import ParamDesc, ParamKind  # noqa: F401  (the kernel ABI, re-exported)
from tilejit.dtypes import DType
from tilejit.errors import CompileError
from tilejit.ir import UNKNOWN_LOC, AssertAttrs, AtomicAttrs, Attrs, PrintAttrs, AxisAttrs, Dialect, ForAttrs, Function, Loc, ParseError, TileOp  # noqa: F401  (Function re-exported for users of this module)


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
class MapType:
    """A TMA descriptor of an array of ``dtype`` elements (a TENSOR_MAP kernel parameter only)."""
    dtype: DType

    def __str__(self) -> str:
        return f"tmap<{self.dtype}>"


@dataclass
class SimtMeta:
    """The facts about a SIMT function that later stages, codegen and the backends read (the
    ``meta`` of a SIMT ``Function``): the lowering fills the first block, the SIMT passes and
    ``compile_to_simt`` the rest, so no stage reads an earlier stage's IR."""
    name: str                              # the kernel's name (PTX entry, error messages)
    params: list[ParamDesc]                # the kernel parameters, in launch order
    num_warps: int
    writes: list[int] = field(default_factory=list)     # runtime arguments the kernel stores to
    loc: Loc = UNKNOWN_LOC                 # the kernel's ``def`` line
    self_synced_ops: set = field(default_factory=set)   # shared accesses the pipeliner orders itself
    # plan_shared_memory / insert_barriers
    shared_bytes: int = 0                  # dynamic shared memory per CTA
    shared_buffers: dict = field(default_factory=dict)  # buffer id -> (offset, size)
    barriers: int = 0                      # barriers insert_barriers placed
    # compile_to_simt: what codegen is asked for
    target: str = "sm_90a"
    min_ctas_per_sm: int = 0               # occupancy hint (ptxas caps registers to fit); 0: none
    min_ctas_fallbacks: tuple = ()         # the hints to try in turn where that one spills (the
    #                                        backend assembles again; pipeline.set_occupancy)
    fast_math: bool = False                # approximate sin/cos (a launch option)
    programs_per_cta: int = 1              # pack_programs: programs along grid axis 0 per CTA
    lanes_per_program: int = 32            # pack_programs: 16 or 8 when several one-warp programs share a warp
    lane_bits: int = 31                    # the lowering: lane-id bits that place data (the rest are replicas)
    serial_programs: bool = False          # coarsen_programs: the CTA's programs run one after another
    persistent: bool = False               # persist_programs: each CTA loops over programs (grid0 passed)
    persistent_tiles: bool = False         # specialise_warps: each CTA loops over all programs (the grid passed)
    stream_k: int = 0                      # stream_k: words of a workspace slot (0: no stream-K, no workspace)
    producer_warps: int = 0                # specialise_warps: a warpgroup that only issues TMA copies,
    #                                        after the num_warps warps that compute
    max_registers: int = 0                 # registers per thread the kernel is compiled for (0: ptxas picks)
    ws_ctas_wishes: tuple = ()             # specialise_warps: CTAs an SM to compile a warp-specialised kernel
    #                                        for first, most first (the backend assembles each until one
    #                                        neither spills nor is refused; else the one CTA it is built for)
    ws_producer_registers: int = 0         # specialise_warps: what its producer warpgroup keeps
    tma_loops: list = field(default_factory=list)       # lowering: pipeline_loads.TmaLoop records
    cluster_ctas: int = 1                  # cluster_rows: CTAs per cluster along grid axis 0 (each program's)
    paired_ctas: bool = False              # specialise_warps (MULTICAST): clusters of 2 CTAs along axis 0, each
    #                                        its own program: the launch pads axis 0 to even and passes its extent
    scalar_dots: tuple = ()                # lowering: (Loc, why) of each DOT of a tensor-core dtype left on FMA

    @property
    def cta_threads(self) -> int:
        """Threads per CTA of a launch: each program's (a sub-warp program has fewer than 32)."""
        per_program = self.lanes_per_program if self.lanes_per_program < 32 else 32 * self.num_warps
        return per_program * (1 if self.serial_programs else self.programs_per_cta) + 32 * self.producer_warps

    def summary(self) -> str:
        """The line ``--emit`` of a SIMT stage prints under the IR."""
        return (f"num_warps={self.num_warps} shared_bytes={self.shared_bytes} writes={self.writes} "
                f"barriers={self.barriers}" + (f" programs_per_cta={self.programs_per_cta}"
                                               if self.programs_per_cta > 1 else "")
                + (f" lanes_per_program={self.lanes_per_program}" if self.lanes_per_program < 32 else "")
                + (" persistent" if self.persistent else "")
                + (" persistent_tiles" if self.persistent_tiles else "")
                + (f" stream_k={self.stream_k}" if self.stream_k else "")
                + (f" cluster_ctas={self.cluster_ctas}" if self.cluster_ctas > 1 else "")
                + (" paired_ctas" if self.paired_ctas else ""))


class SimtOp(enum.Enum):
    # thread geometry (all i32, n=1)
    THREAD_ID = enum.auto()      # threadIdx.x in [0, 32*num_warps); with VolatileAttrs(True) read
    #                              anew where it stands (LLVM may not hoist what is computed from it)
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
    # Memory ops are per register: offsets/addresses/mask have as many registers as the value.
    # With attrs.vec = v > 1, registers [g*v, g*v+v) have consecutive offsets and the group's
    # first element is v*itemsize aligned, so the group can be one vector access; a global
    # mask may still differ inside a group (a ragged edge): then only the in-bounds elements
    # may be touched (emit the vector access when the whole group is in bounds, else per element).
    # global memory; offsets are element offsets (i32 or i64) from the pointer
    LOAD_GLOBAL = enum.auto()    # (ptr, offsets, mask: bool) -> n values; masked-off read attrs.other  GlobalAttrs
    STORE_GLOBAL = enum.auto()   # (ptr, offsets, value, mask: bool) -> ()                   GlobalAttrs
    PRINT = enum.auto()          # (pid0, pid1, pid2, *coords, *values, mask) -> (): one line per
    #                              register where mask holds (vprintf)        ir.PrintAttrs
    ASSERT = enum.auto()         # (pid0, pid1, pid2, *coords, failed: bool) -> (): the first failed
    #                              register is reported (DeviceAssertError)   ir.AssertAttrs
    GRID_DEPENDENCY = enum.auto()  # () -> (): griddepcontrol.wait / .launch_dependents (sm_90+;
    #                              nothing on older targets, the emulator and the interpreter)  ir.GridDependencyAttrs
    ATOMIC_GLOBAL = enum.auto()  # (ptr, offsets, value, mask: bool[, cmp]) -> n old values (0 where
    #                              masked off): one atomic read-modify-write per element (cmp: cas)  ir.AtomicAttrs
    # shared memory; addresses are byte offsets into the CTA's one shared buffer (i32)
    LOAD_SHARED = enum.auto()    # (addr[, mask]) -> n values of the result dtype; every address is
    #   read, and with a mask, masked-off registers hold attrs.other  SharedAttrs / MaskedSharedAttrs
    STORE_SHARED = enum.auto()   # (addr, value) -> ()                                          SharedAttrs
    BARRIER = enum.auto()        # bar.sync 0 across the CTA; or (id: i32 n=1) -> (): named barrier
    #   ``id`` over attrs.threads threads (one program's warps when a CTA holds several)  BarrierAttrs
    BARRIER_ARRIVE = enum.auto()  # (id: i32 n=1) -> (): arrive at named barrier ``id`` (counted toward
    #   attrs.threads) without waiting (bar.arrive): the other side of a BARRIER that waits for it  BarrierAttrs
    CLUSTER_BARRIER = enum.auto()  # () -> (): barrier.cluster arrive (release) and wait (acquire): every
    #   thread of every CTA of the cluster; shared bytes written before it are seen by all of them
    LOAD_SHARED_CLUSTER = enum.auto()  # (addr, rank: i32 n=1, on: bool n=1) -> n values read at shared
    #   byte addresses ``addr`` of the cluster's CTA ``rank`` (mapa + ld.shared::cluster) where ``on``
    #   holds, attrs.other where it does not (nothing read)               ClusterSharedAttrs
    SHARED_ALLOC = enum.auto()   # () -> i32: byte address of shared buffer attrs.buffer   AllocAttrs
    #   (made by lowering; ``plan_shared_memory`` replaces each by a CONSTANT, so emitted code
    #   never contains one)
    # structured control flow: same as TileOp.FOR / IF / WHILE / YIELD
    FOR = enum.auto()
    IF = enum.auto()
    WHILE = enum.auto()
    YIELD = enum.auto()
    # tensor cores (warp-wide: every lane of every warp executes them; PTX ISA fragment maps in
    # ``passes.mma_layouts``).  A/B fragments and ldmatrix results are packed 32-bit registers
    # (dtype int32; two 16-bit or four 8-bit elements, lowest-numbered in the low bits).
    LDMATRIX = enum.auto()       # (addr: i32 n=1) -> <num x i32>: ldmatrix.sync.aligned.m8n8.x<num>
    #   {.trans}.shared.b16; lane i < 8*num supplies the shared byte address of row i%8 of
    #   matrix i//8; register m of a lane holds its 2 elements of matrix m     LdmatrixAttrs
    MMA = enum.auto()            # (a: <4 x i32>, b: <2 x i32>, c: <4 x f32|i32>) -> d like c:
    #   mma.sync.aligned.<shape>.row.col, D = A @ B + C per warp                   MmaAttrs
    PACK = enum.auto()           # (x: n elements of b bits) -> <n*b/32 x i32>: consecutive
    #   elements packed into 32-bit registers, lowest first (bitcast for 32-bit elements)
    UNPACK = enum.auto()         # (x: <n x i32>) -> <n*32/b x (b-bit dtype)>: the inverse of PACK
    # async copies (cp.async.cg, 16 bytes each); a copy writes shared memory only when a
    # CP_ASYNC_WAIT retires its group: reading its bytes before that is undefined
    CP_ASYNC = enum.auto()       # (ptr, offsets: n, addr: i32 n, src_bytes: i32 n[, issue: bool])
    #   -> (): for each register, copy 16 bytes from element offset ``offsets[i]`` of ptr to shared
    #   byte address ``addr[i]``; only ``src_bytes[i]`` (0..16) bytes are read, the rest are
    #   zero-filled (0: nothing read, the address may be out of bounds). A thread whose ``issue``
    #   is false copies nothing (replicas of a layout: one copy per byte)        SharedAttrs
    CP_ASYNC_COMMIT = enum.auto()  # () -> (): close the copies issued since the last commit into a group
    CP_ASYNC_WAIT = enum.auto()  # () -> (): wait until at most attrs.n newest groups are pending  WaitAttrs
    # Hopper warpgroup mma (sm_90a; ``passes.wgmma``): four consecutive warps (a warpgroup) run
    # it together, A and B straight from swizzled shared tiles described by their layouts
    WGMMA = enum.auto()          # (acc: <N/2 x f32>, a: i32 n=1 | <4 x i32>, b: i32 n=1) -> like acc:
    #   wgmma.mma_async m64nNk16: D(64 x N) += A(64 x 16 at shared byte a, or each warp's
    #   16 rows as mma.sync A fragments when attrs.a_regs) @ B(16 x N at b); the
    #   accumulator in the mma C-fragment order (warp w of the group: rows 16w..16w+15); a 4th
    #   operand (bool, warpgroup-uniform) guards it: false skips it, the result undefined  WgmmaAttrs
    WGMMA_FENCE = enum.auto()    # () -> (): wgmma.fence (registers and shared written before it are seen)
    WGMMA_COMMIT = enum.auto()   # () -> (): close the wgmmas issued since the last commit into a group
    WGMMA_WAIT = enum.auto()     # (*accs) -> (*accs): wait until at most attrs.n wgmma groups are
    #   pending; each operand comes back as a result, which later code reads (codegen ties the
    #   registers through the wait, so nothing reads an accumulator before it)  WaitAttrs
    FENCE_PROXY_ASYNC = enum.auto()  # () -> (): fence.proxy.async.shared::cta: shared bytes written
    #   by ordinary stores and cp.async become visible to wgmma (the async proxy)
    # Hopper TMA and mbarriers (sm_90a; ``passes.pipeline_loads``).  An mbarrier is 8 bytes of
    # shared memory at byte address ``bar``; ``issue`` (bool, n=1) is true in the one thread that
    # acts (the others do nothing).  A phase of an mbarrier completes when its attrs.n arrivals
    # have arrived and every transaction byte they announced has landed; then the next begins.
    MBARRIER_INIT = enum.auto()      # (bar, issue) -> (): a new mbarrier expecting attrs.n arrivals  MbarrierAttrs
    MBARRIER_EXPECT_TX = enum.auto()  # (bar, issue) -> (): arrive, announcing attrs.n bytes that
    #   TMA copies will complete in this phase (mbarrier.arrive.expect_tx)      MbarrierAttrs
    MBARRIER_WAIT = enum.auto()      # (bar, parity: i32) -> (): every thread waits until the phase
    #   of that parity (phase number & 1) has completed; its TMA bytes are then visible  MbarrierAttrs
    MBARRIER_INVAL = enum.auto()     # (bar, issue) -> (): the bytes stop being an mbarrier  MbarrierAttrs
    MBARRIER_ARRIVE = enum.auto()    # (bar, on: bool[, rank: i32]) -> (): every thread whose ``on`` holds
    #   arrives; with ``rank``, on the mbarrier at the same address in that CTA of the cluster
    #   (mapa, then mbarrier.arrive.release.cluster)                          MbarrierAttrs
    SETMAXNREG = enum.auto()         # () -> (): this warpgroup's registers per thread become attrs.n
    #   (setmaxnreg.inc / .dec; every thread of the warpgroup runs it)        RegCountAttrs
    FENCE_MBARRIER_INIT = enum.auto()  # () -> (): initialised mbarriers are seen by the async proxy
    TMA_LOAD = enum.auto()           # (map, dst, bar, issue, *coords: i32 n=1 each, in the array's
    #   dim order) -> (): cp.async.bulk.tensor of the map's box at element ``coords`` into shared
    #   byte address dst (the box row-major, swizzled over the map's span), completing its bytes
    #   on ``bar``; elements outside the array are zeros.  With ``attrs.multicast`` (a mask of the
    #   cluster's CTA ranks) the box lands at ``dst`` of each of those CTAs and completes its bytes
    #   on each one's mbarrier at ``bar`` (.multicast::cluster)                   TmaAttrs
    TMA_STORE = enum.auto()          # (map, src, issue, *coords: i32 n=1 each, in the array's dim
    #   order) -> (): cp.async.bulk.tensor of the map's box from shared byte address src (row-major,
    #   swizzled over the map's span) to the array at element ``coords``; elements outside the
    #   array are not written.  The copy reads the shared bytes until its thread's TMA_STORE_WAIT
    #   (``passes.lower_memory.tma_store``)                                        TmaAttrs
    TMA_STORE_WAIT = enum.auto()     # (issue) -> (): the issuing thread commits its TMA_STOREs as a
    #   bulk group and waits until they have read their shared bytes (cp.async.bulk.wait_group.read 0)


TMA_OPS = (SimtOp.MBARRIER_INIT, SimtOp.MBARRIER_EXPECT_TX, SimtOp.MBARRIER_WAIT, SimtOp.MBARRIER_INVAL,
           SimtOp.MBARRIER_ARRIVE, SimtOp.FENCE_MBARRIER_INIT, SimtOp.TMA_LOAD, SimtOp.SETMAXNREG)
TMA_STORE_OPS = (SimtOp.TMA_STORE, SimtOp.TMA_STORE_WAIT)


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
    prefix: bool = False          # in each group the registers whose mask holds are a prefix (bounds
    #   masks: the row tests are the same across a group, its columns consecutive from a multiple of
    #   vec), so the group is whole where its last register's mask holds and empty where its first's
    #   does not (one test each, not an AND / OR of every register's)


@dataclass(frozen=True)
class VolatileAttrs(Attrs):
    volatile: bool = True


@dataclass(frozen=True)
class BarrierAttrs(Attrs):
    threads: int                  # the threads a named barrier waits for (a multiple of 32)


@dataclass(frozen=True)
class SharedAttrs(Attrs):
    vec: int = 1                  # groups of `vec` registers are contiguous and vec*itemsize aligned
    buffer: int = -1              # which SHARED_ALLOC buffer the addresses point into (-1: unknown)


@dataclass(frozen=True)
class ClusterSharedAttrs(SharedAttrs):
    other: float | int = 0        # the value of registers whose ``on`` is false


@dataclass(frozen=True)
class MaskedSharedAttrs(SharedAttrs):
    other: bool | int | float = 0  # a masked LOAD_SHARED's value where its mask is false


@dataclass(frozen=True)
class LdmatrixAttrs(Attrs):
    num: int                      # 1, 2 or 4 8x8 matrices
    trans: bool = False
    buffer: int = -1              # the SHARED_ALLOC buffer read


@dataclass(frozen=True)
class MmaAttrs(Attrs):
    kind: str                     # A/B type: "bf16", "f16", "tf32", "s8" (mma_layouts.MMA_KINDS)


@dataclass(frozen=True)
class WgmmaAttrs(Attrs):
    kind: str                     # A/B type: "bf16" or "f16"
    n: int                        # the instruction's N (8..256, a multiple of 8)
    a_row_bytes: int              # A in shared: K-major rows swizzled over 32, 64 or 128 bytes
    b_n_major: bool               # B stored k rows of n (N-major, 128-byte atoms) or n rows of k
    b_row_bytes: int              # bytes per swizzled row of B (its swizzle span)
    b_atom_bytes: int = 0         # N-major: bytes from one 64-column atom of B to the next
    buffers: tuple = ()           # the SHARED_ALLOC buffers read (A's, B's)
    a_regs: bool = False          # A from registers (4 x i32, the mma.sync A fragment) instead
    a_m_major: bool = False       # A stored k rows of m (M-major: one 128-byte atom of 64 rows per
    #   warpgroup, a_row_bytes 128, SW128; the transposed-A form, imm-trans-a 1)


@dataclass(frozen=True)
class MbarrierAttrs(Attrs):
    n: int = 1                    # INIT: arrivals per phase; EXPECT_TX: transaction bytes
    buffer: int = -1              # the SHARED_ALLOC buffer holding the mbarrier


@dataclass(frozen=True)
class RegCountAttrs(Attrs):
    n: int                        # registers per thread (24..256, a multiple of 8)
    inc: bool                     # raise to n (consumers) or lower to n (a producer)


@dataclass(frozen=True)
class SplitAttrs(Attrs):
    """An IF whose condition is ``THREAD_ID < threads``: its first region runs on the threads
    below (the consumers), its second on the rest (the producer), at the same time; they hand
    work over only through mbarriers (``passes.specialise_warps``)."""
    threads: int


@dataclass(frozen=True)
class TmaAttrs(Attrs):
    box: tuple                    # elements per array dim (the map's box)
    swizzle: int                  # bytes (0, 32, 64, 128)
    buffer: int = -1              # the SHARED_ALLOC buffer written
    bar_buffer: int = -1          # the one holding the mbarrier
    multicast: int = 0            # TMA_LOAD: the cluster's CTA ranks it writes to (a bit each; 0: its own)


@dataclass(frozen=True)
class WaitAttrs(Attrs):
    n: int                        # groups allowed to stay pending
    hold: bool = False            # kept where it is: ptxas must not hoist it (``mma.hold_point``)


@dataclass(frozen=True)
class AllocAttrs(Attrs):
    buffer: int                   # id, unique in the function
    size: int                     # bytes
    align: int = 16


# ------------------------------------------------------------------------------------ text form
def parse_type(text: str):
    """``int32``, ``<4xfloat32>`` or ``ptr<bfloat16>`` back to its type."""
    from tilejit.dtypes import BY_NAME
    text = text.strip()
    try:
        if text.startswith("ptr<") and text.endswith(">"):
            return PtrType(BY_NAME[text[4:-1]])
        if text.startswith("tmap<") and text.endswith(">"):
            return MapType(BY_NAME[text[5:-1]])
        if text.startswith("<") and text.endswith(">"):
            n, dtype = text[1:-1].split("x", 1)
            return RegType(BY_NAME[dtype], int(n))
        return RegType(BY_NAME[text])
    except (KeyError, ValueError):
        raise ParseError(f"not a SIMT type: {text!r}") from None


def copy_engines(fn: Function) -> tuple:
    """How the kernel's pipelined loops fill their rings: "tma" and/or "cp.async", and "tma store"
    where an epilogue is copied out by TMA (``inspect()`` shows it: a launch whose arrays TMA
    cannot describe gets cp.async and the threads' stores)."""
    ops = {o.op for o in fn.walk()}
    return tuple(name for name, op in (("tma", SimtOp.TMA_LOAD), ("cp.async", SimtOp.CP_ASYNC),
                                       ("tma store", SimtOp.TMA_STORE)) if op in ops)


def waits_on_prior_kernels(fn) -> bool:
    """Whether the kernel has a ``griddepcontrol.wait`` (``tj.wait_prior_kernels``): then it may
    be launched with programmatic stream serialization (sm_90+)."""
    return any(o.op is SimtOp.GRID_DEPENDENCY and o.attrs.action == "wait" for o in fn.walk())


def assert_sites(fn: Function) -> list:
    """The ASSERT ops of a SIMT function in walk order: a failed assert is reported by its number
    here, and the runtime maps the number back to the message and source line."""
    return [o for o in fn.walk() if o.op is SimtOp.ASSERT]


DIALECT = Dialect(SimtOp, parse_type,
                  (AxisAttrs, ForAttrs, VectorConstAttrs, IndicesAttrs, EwAttrs, MaskAttrs, GlobalAttrs, VolatileAttrs, SharedAttrs,
                   MaskedSharedAttrs, ClusterSharedAttrs, LdmatrixAttrs, MmaAttrs, WgmmaAttrs, WaitAttrs, MbarrierAttrs, TmaAttrs, RegCountAttrs, SplitAttrs, AllocAttrs, BarrierAttrs, AtomicAttrs, PrintAttrs, AssertAttrs),
                  {"TileOp": TileOp}, lambda name: SimtMeta(name, [], 4))


def parse_function(text: str) -> Function:
    """The SIMT ``Function`` printed as ``text`` (``ir.print_function``): a SIMT pass test reads
    as IR text in -> IR text out.  Its ``meta`` starts as ``SimtMeta(name, [], 4)``: parameters,
    warps and shared buffers are not part of the text, a test sets what its pass reads."""
    from tilejit import ir
    return ir.parse_function(text, DIALECT)


# ------------------------------------------------------------------------------------ verifier
class SimtVerifyError(CompileError):
    """The SIMT IR breaks an invariant of this module (a compiler bug, never a user error); it
    shows the user's line the op came from."""


def _n(v) -> int:
    return v.type.n if isinstance(v.type, RegType) else 1


def _check_memory(o) -> str | None:
    n = _n(o.results[0]) if o.results else _n(o.operands[2 if o.op is SimtOp.STORE_GLOBAL else 1])
    if o.op is SimtOp.ATOMIC_GLOBAL:
        ok = isinstance(o.attrs, AtomicAttrs) and isinstance(o.operands[0].type, PtrType) \
            and all(_n(x) == n for x in o.operands[1:]) and o.results[0].type.dtype == o.operands[2].type.dtype
        return None if ok else "ATOMIC_GLOBAL: (ptr, offsets, value, mask), one register each per old value"
    regs = {SimtOp.LOAD_GLOBAL: o.operands[1:], SimtOp.STORE_GLOBAL: o.operands[1:],
            SimtOp.LOAD_SHARED: o.operands, SimtOp.STORE_SHARED: o.operands}[o.op]
    if any(_n(x) != n for x in regs):
        return "offsets/addresses, mask and value must have one register each per element"
    if o.op is SimtOp.LOAD_SHARED and len(o.operands) > 1 and not (
            len(o.operands) == 2 and o.operands[1].type.dtype.is_bool and isinstance(o.attrs, MaskedSharedAttrs)):
        return "a masked LOAD_SHARED takes (addr, mask: bool) and MaskedSharedAttrs"
    if o.op in (SimtOp.LOAD_GLOBAL, SimtOp.STORE_GLOBAL) and not isinstance(o.operands[0].type, PtrType):
        return "the first operand must be a pointer PARAM"
    if n % o.attrs.vec:
        return f"vec={o.attrs.vec} does not divide {n} registers"
    return None


_SPECS = {
    SimtOp.ELEMENTWISE: lambda o: None if all(_n(x) == _n(o.results[0]) for x in o.operands)
    else "operands and result must have the same register count",
    SimtOp.SPLAT: lambda o: None if _n(o.operands[0]) == 1 else "SPLAT takes one register",
    SimtOp.GATHER: lambda o: None if all(0 <= i < _n(o.operands[0]) for i in o.attrs.indices)
    and len(o.attrs.indices) == _n(o.results[0]) else "GATHER indices out of range",
    SimtOp.CONCAT: lambda o: None if sum(map(_n, o.operands)) == _n(o.results[0]) else "CONCAT size",
    SimtOp.SHUFFLE_XOR: lambda o: None if 0 < o.attrs.mask < 32 and o.results[0].type == o.operands[0].type
    else "SHUFFLE_XOR mask must be in 1..31 and keep the type",
    SimtOp.LOAD_GLOBAL: _check_memory, SimtOp.STORE_GLOBAL: _check_memory, SimtOp.ATOMIC_GLOBAL: _check_memory,
    SimtOp.LOAD_SHARED: _check_memory, SimtOp.STORE_SHARED: _check_memory,
    SimtOp.LOAD_SHARED_CLUSTER: lambda o: None if len(o.operands) == 3 and _n(o.operands[0]) == _n(o.results[0])
    and _n(o.operands[1]) == 1 and _n(o.operands[2]) == 1 and o.operands[2].type.dtype.is_bool
    and isinstance(o.attrs, ClusterSharedAttrs)
    else "LOAD_SHARED_CLUSTER takes one address per register, a rank, a bool and ClusterSharedAttrs",
    SimtOp.CONSTANT: lambda o: None if len(o.attrs.values) == _n(o.results[0]) else "CONSTANT size",
    SimtOp.LDMATRIX: lambda o: None if _n(o.operands[0]) == 1 and _n(o.results[0]) == o.attrs.num
    and o.attrs.num in (1, 2, 4) else "LDMATRIX takes one address and gives attrs.num registers",
    SimtOp.MMA: lambda o: None if [_n(x) for x in o.operands] == [4, 2, 4] and _n(o.results[0]) == 4
    else "MMA takes 4 + 2 + 4 registers and gives 4",
    SimtOp.PACK: lambda o: None if _n(o.operands[0]) * o.operands[0].type.dtype.bits == 32 * _n(o.results[0])
    else "PACK must fill whole 32-bit registers",
    SimtOp.UNPACK: lambda o: None if _n(o.results[0]) * o.results[0].type.dtype.bits == 32 * _n(o.operands[0])
    and o.operands[0].type.dtype.bits == 32 else "UNPACK must split whole 32-bit registers",
    SimtOp.BARRIER: lambda o: None if not o.operands or (len(o.operands) == 1 and _n(o.operands[0]) == 1
                                                         and o.attrs.threads % 32 == 0)
    else "BARRIER takes nothing, or a named barrier's id and attrs.threads (a multiple of 32)",
    SimtOp.BARRIER_ARRIVE: lambda o: None if len(o.operands) == 1 and _n(o.operands[0]) == 1
    and isinstance(o.attrs, BarrierAttrs) and o.attrs.threads % 32 == 0
    else "BARRIER_ARRIVE takes a named barrier's id and attrs.threads (a multiple of 32)",
    SimtOp.CP_ASYNC: lambda o: None if len({_n(x) for x in o.operands[1:4]}) == 1
    and isinstance(o.operands[0].type, PtrType) and len(o.operands) in (4, 5)
    and (len(o.operands) == 4 or (_n(o.operands[4]) == 1 and o.operands[4].type.dtype.name == "bool"))
    else "CP_ASYNC needs a pointer, equal register counts and an optional bool to issue",
    SimtOp.TMA_LOAD: lambda o: None if isinstance(o.operands[0].type, MapType)
    and len(o.operands) == 4 + len(o.attrs.box) and all(_n(x) == 1 for x in o.operands[1:])
    and o.operands[3].type.dtype.is_bool else "TMA_LOAD takes (map, dst, bar, issue: bool, *coords), one register each",
    SimtOp.TMA_STORE: lambda o: None if isinstance(o.operands[0].type, MapType)
    and len(o.operands) == 3 + len(o.attrs.box) and all(_n(x) == 1 for x in o.operands[1:])
    and o.operands[2].type.dtype.is_bool else "TMA_STORE takes (map, src, issue: bool, *coords), one register each",
    SimtOp.TMA_STORE_WAIT: lambda o: None if len(o.operands) == 1 and _n(o.operands[0]) == 1
    and o.operands[0].type.dtype.is_bool else "TMA_STORE_WAIT takes (issue: bool)",
    **{op: (lambda o: None if len(o.operands) == 2 and all(_n(x) == 1 for x in o.operands)
            else f"{o.op.name} takes (bar, issue or parity), one register each")
       for op in (SimtOp.MBARRIER_INIT, SimtOp.MBARRIER_EXPECT_TX, SimtOp.MBARRIER_WAIT, SimtOp.MBARRIER_INVAL)},
    SimtOp.MBARRIER_ARRIVE: lambda o: None if len(o.operands) in (2, 3) and all(_n(x) == 1 for x in o.operands)
    else "MBARRIER_ARRIVE takes (bar, on[, rank]), one register each",
    SimtOp.WGMMA_WAIT: lambda o: None if [x.type for x in o.operands] == [r.type for r in o.results]
    else "WGMMA_WAIT gives back its operands, one result each",
    SimtOp.WGMMA: lambda o: None if _n(o.operands[0]) == o.attrs.n // 2 == _n(o.results[0])
    and _n(o.operands[1]) == (4 if o.attrs.a_regs else 1) and _n(o.operands[2]) == 1
    and len(o.operands) in (3, 4) and all(_n(x) == 1 and x.type.dtype.name == "bool" for x in o.operands[3:])
    else "WGMMA takes N/2 accumulators, A (an address or 4 registers), B's address and optionally a "
         "guard (one bool register: false skips it, its accumulators then undefined)",
}


def verify(fn: Function) -> None:
    """Check every op against its spec and that each operand is defined before use."""
    def block(b, defined: set) -> None:
        defined = defined | set(b.args)
        for o in b.ops:
            missing = [x for x in o.operands if x not in defined]
            if missing:
                raise SimtVerifyError(f"internal error, the SIMT IR is invalid: {o.op.name} uses a "
                                      "value not defined before it", o.loc, fn.name)
            problem = _SPECS.get(o.op, lambda o: None)(o)
            if problem:
                raise SimtVerifyError(f"internal error, the SIMT IR is invalid: {o.op.name}: {problem}",
                                      o.loc, fn.name)
            for r in o.regions:
                block(r, defined)
            defined |= set(o.results)
    block(fn.body, set())
