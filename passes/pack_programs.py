"""Several programs per CTA: a short-row kernel (one row per program, one or two warps) leaves
the GPU idle on CTA launches, so the launch packs ``P`` consecutive programs along grid axis 0
into one CTA of ``P * num_warps`` warps.  Each group of ``num_warps`` warps runs one program
exactly as before: this SIMT pass, the last of the pipeline, rewrites only the geometry.

    pack_programs(fn, programs) -> fn
    packable(fn) -> bool

- ``THREAD_ID`` becomes the thread's index inside its group (``tid % (32 * num_warps)``), so
  every layout, shuffle and replica test is unchanged; a volatile one (a store's fresh read,
  ``remat_indices``) stays where it is, masked the same way, so it is still read afresh;
- ``program_id(0)`` is ``blockIdx.x * P + group``; the launch runs ``ceil(grid0 / P)`` CTAs and
  passes ``grid0`` as one more scalar parameter after the runtime arguments (the backends'
  ``launch_geometry``), which is
  ``num_programs(0)``; the programs past it (the last CTA's spare groups) store nothing;
- a one-warp program whose layouts place data on only 16 or 8 lanes (``program_lanes``: the
  other lanes would replicate it) shares its warp: its group is ``lanes`` threads, ``THREAD_ID``
  becomes ``tid % lanes``, and its barriers are the warp's (named barrier ``1 + warp`` over 32
  threads: the warp's programs run in step);
- each group gets its own ``shared_bytes`` (rounded to 128) of shared memory, every shared
  address is moved by ``group * that``, and each ``BARRIER`` syncs only its group (named
  barrier ``1 + group`` over ``32 * num_warps`` threads).

A packed kernel's programs each keep one short row's bytes in flight, so the bytes in flight
per SM grow with the CTAs it holds: the pipeline asks ptxas to fit 2048, then 1536 threads per
SM (``pipeline.PACKED_THREADS_PER_SM``, ``SimtMeta.min_ctas_fallbacks``), and the cuda backend
keeps the first hint that assembles without spills (``backends.cuda.assemble_hinted``).  bf16
layernorm at 128 columns: 47 registers (5 CTAs of 256 threads) become 40 (6 CTAs), +6%.  Long-
row kernels of 512 threads or more make the same wishes (``pipeline.ROW_THREADS_PER_SM``).

Only kernels without tensor cores or async copies (their rings and descriptors hold shared
addresses this pass does not move) and whose control flow is the same for every program are
packed: the emulator runs a CTA's threads in lockstep, so it could not run programs of one CTA
down different branches.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.abi import ParamDesc, ParamKind
from tilejit.simt import RegType, SimtOp

I32 = D.int32
WARP = 32
_CONTROL = (SimtOp.FOR, SimtOp.IF, SimtOp.WHILE)
_ASYNC = (SimtOp.LDMATRIX, SimtOp.MMA, SimtOp.CP_ASYNC, SimtOp.CP_ASYNC_COMMIT, SimtOp.CP_ASYNC_WAIT,
          SimtOp.WGMMA, SimtOp.WGMMA_FENCE, SimtOp.WGMMA_COMMIT, SimtOp.WGMMA_WAIT, SimtOp.FENCE_PROXY_ASYNC,
          *simt.TMA_OPS, *simt.TMA_STORE_OPS)
MAX_PROGRAMS = 15               # named barriers 1..15 (0 is the CTA-wide one)
PACK_BYTES = 1024               # programs that move more per load run one to a CTA (small_program)
PACK_LOADED = 1024              # ... and so do programs that load more values in all


def packable(fn: ir.Function) -> bool:
    """Whether ``pack_programs`` may put several programs of ``fn`` into one CTA: no tensor
    cores or async copies, and control flow that every program of a CTA takes alike (its
    conditions and bounds come from constants, parameters and the grid, not from the program,
    the thread or memory: e.g. ``uniform_masks``' "is the whole tile inside the row")."""
    alike: set[ir.Value] = set()
    for o in fn.walk():
        if o.op in _ASYNC or o.op is SimtOp.WHILE:        # a WHILE's condition comes from its body
            return False
        if o.op in _CONTROL and not all(x in alike for x in o.operands[:3 if o.op is SimtOp.FOR else 1]):
            return False
        same = o.op in (SimtOp.CONSTANT, SimtOp.PARAM, SimtOp.GRID_DIM) \
            or (o.op is SimtOp.BLOCK_ID and o.attrs.axis != 0) \
            or (o.op in (SimtOp.ELEMENTWISE, SimtOp.SPLAT, SimtOp.GATHER, SimtOp.CONCAT)
                and all(x in alike for x in o.operands))
        if same:
            alike.update(o.results)
    return True


def program_lanes(fn: ir.Function) -> int:
    """The lanes one program of a one-warp ``fn`` needs: the lanes its layouts place data on
    (``SimtMeta.lane_bits``) and its shuffles reach, at least 8 (32 for wider kernels).  A 128-
    column bf16 row is 16 lanes of 16 bytes; the other 16 lanes would only replicate them."""
    if fn.meta.num_warps != 1:
        return WARP
    reach = fn.meta.lane_bits
    for o in fn.walk():
        if o.op is SimtOp.SHUFFLE_XOR:
            reach |= o.attrs.mask
        elif o.op is SimtOp.SHUFFLE_IDX:
            reach = WARP - 1
    lanes = 8
    while lanes < WARP and reach >= lanes:
        lanes *= 2
    return lanes


def choose_programs(fn: ir.Function, pack: bool) -> tuple[int, int]:
    """(programs per CTA, lanes per program) for ``fn`` when the launch does not say: CTAs of 8
    warps for packable programs of one or two warps, each warp holding 32 / ``program_lanes``
    one-warp programs, else (1, 32).  ``pack`` is off unless ``warps.small_program`` holds
    (``compile_to_simt`` decides from the tile IR: tiles of at most 1 KiB for one warp, 512 bytes
    for two, and at most 1024 values loaded).  On the
    H200 (2026-12-03, 2**26 elements, ratio to copy, unpacked -> 4 packed 2-warp programs):
    fp32 softmax 128 columns 0.41 -> 0.70, bf16 256 0.42 -> 0.52, RMSNorm fp32 128 0.41 -> 0.68;
    but fp32 256 0.80 -> 0.67, bf16 512 0.81 -> 0.65, bf16 1024 0.94 -> 0.84: a CTA holds its
    slot until its slowest program ends, which costs more than launches save once a 2-warp program
    moves a kilobyte.  One-warp programs of 1 KiB gain instead (fp32 256 columns 0.80 -> 0.97,
    bf16 512 0.80 -> 0.93 softmax): their reductions need no shared memory or barrier."""
    if not pack or fn.meta.num_warps > 2 or not packable(fn):
        return 1, WARP
    lanes = program_lanes(fn)
    return 8 // fn.meta.num_warps * (WARP // lanes), lanes


def pack_programs(fn: ir.Function, programs: int, lanes: int = WARP) -> ir.Function:
    """``programs`` programs of ``fn`` per CTA (see the module docstring), each on ``lanes``
    lanes of one warp when ``lanes`` < 32 (``program_lanes``)."""
    if programs == 1:
        return fn
    if fn.meta.cluster_ctas > 1:
        raise ValueError(f"kernel '{fn.meta.name}' splits its rows over a cluster of CTAs (cluster_rows): "
                         "it cannot also pack several programs to a CTA")
    threads = WARP * fn.meta.num_warps if lanes == WARP else lanes
    if lanes != WARP and (fn.meta.num_warps != 1 or program_lanes(fn) > lanes):
        raise ValueError(f"kernel '{fn.meta.name}' needs more than {lanes} lanes per program")
    barriers = programs if lanes == WARP else -(-programs * lanes // WARP)
    if not 1 < programs or barriers > MAX_PROGRAMS or threads * programs > 1024 or not packable(fn):
        raise ValueError(f"cannot pack {programs} programs of {fn.meta.num_warps} warps of kernel "
                         f"'{fn.meta.name}' into one CTA")
    loc, prologue = fn.meta.loc, []

    def emit(op, operands, attrs=None, n=1, dtype=I32):
        o = ir.Operation(op, operands, [RegType(dtype, n)], attrs, loc=loc)
        prologue.append(o)
        return o.result

    def const(v):
        return emit(SimtOp.CONSTANT, [], simt.VectorConstAttrs((v,)))

    def ew(op, a, b):
        return emit(SimtOp.ELEMENTWISE, [a, b], simt.EwAttrs(op))
    tid = emit(SimtOp.THREAD_ID, [])
    local = ew(TileOp.AND, tid, const(threads - 1))
    group = ew(TileOp.SHR, tid, const(threads.bit_length() - 1))
    pid = ew(TileOp.ADD, ew(TileOp.MUL, emit(SimtOp.BLOCK_ID, [], ir.AxisAttrs(0)), const(programs)), group)
    fn.meta.params = list(fn.meta.params) + [ParamDesc(ParamKind.SCALAR, len(fn.arg_names), None, I32)]
    count = emit(SimtOp.PARAM, [], ir.AxisAttrs(len(fn.meta.params) - 1))
    new = {(SimtOp.BLOCK_ID, 0): pid, (SimtOp.GRID_DIM, 0): count}
    real = emit(SimtOp.ELEMENTWISE, [pid, count], simt.EwAttrs(TileOp.LT), dtype=D.bool_)
    per_program = -(-fn.meta.shared_bytes // 128) * 128
    base = ew(TileOp.MUL, group, const(per_program))
    # a named barrier per program, or per warp for programs that share one (they run in step)
    barrier = ew(TileOp.ADD, group if lanes == WARP else ew(TileOp.SHR, tid, const(5)), const(1))
    synced = threads if lanes == WARP else WARP
    splats: dict[tuple, ir.Value] = {}

    def splat_of(x: ir.Value, n: int) -> ir.Value:
        if n == 1:
            return x
        if (x, n) not in splats:
            splats[x, n] = emit(SimtOp.SPLAT, [x], n=n, dtype=x.type.dtype)
        return splats[x, n]

    def base_of(n: int) -> ir.Value:
        return splat_of(base, n)
    renamed: dict[ir.Value, ir.Value] = {}
    fresh: dict[ir.Operation, ir.Operation] = {}    # a volatile THREAD_ID (remat_indices) -> its own local id
    for o in fn.walk():
        if o.op is SimtOp.THREAD_ID and getattr(o.attrs, "volatile", False):
            fresh[o] = ir.Operation(SimtOp.ELEMENTWISE, [o.result, const(threads - 1)], [o.result.type],
                                    simt.EwAttrs(TileOp.AND), loc=o.loc)
            renamed[o.result] = fresh[o].result
        elif o.op is SimtOp.THREAD_ID:
            renamed[o.result] = local
        elif o.op in (SimtOp.BLOCK_ID, SimtOp.GRID_DIM) and o.attrs.axis == 0:
            renamed[o.result] = new[(o.op, 0)]

    def rewrite(block: ir.Block) -> None:
        ops = []
        for o in block.ops:
            if o in fresh:                  # read again here, so its values need not be kept
                ops += [o, fresh[o]]
                continue
            o.operands = [renamed.get(x, x) for x in o.operands]
            if o.op in (SimtOp.LOAD_SHARED, SimtOp.STORE_SHARED):
                addr = o.operands[0]
                moved = ir.Operation(SimtOp.ELEMENTWISE, [addr, base_of(addr.type.n)],
                                     [addr.type], simt.EwAttrs(TileOp.ADD), loc=o.loc)
                ops.append(moved)
                o.operands[0] = moved.result
            elif o.op in (SimtOp.STORE_GLOBAL, SimtOp.ATOMIC_GLOBAL, SimtOp.PRINT, SimtOp.ASSERT):   # a spare
                at = 3 if o.op in (SimtOp.STORE_GLOBAL, SimtOp.ATOMIC_GLOBAL) else len(o.operands) - 1  # program writes nothing
                mask = o.operands[at]
                both = ir.Operation(SimtOp.ELEMENTWISE, [mask, splat_of(real, mask.type.n)],
                                    [mask.type], simt.EwAttrs(TileOp.AND), loc=o.loc)
                ops.append(both)
                o.operands[at] = both.result
            elif o.op is SimtOp.BARRIER:
                o.operands, o.attrs = [barrier], simt.BarrierAttrs(synced)
            ops.append(o)
            for r in o.regions:
                rewrite(r)
        block.ops = ops
    rewrite(fn.body)
    fn.body.ops = prologue + fn.body.ops
    fn.meta.programs_per_cta = programs
    fn.meta.lanes_per_program = lanes
    fn.meta.shared_bytes = per_program * programs if fn.meta.shared_bytes else 0
    return fn
