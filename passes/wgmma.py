"""Hopper warpgroup mma (``wgmma.mma_async``, sm_90a) for pipelined GEMM and attention loops.

    wgmma_dots(fn, num_warps, target) -> set of DOTs  (read by the plan_dots analysis)
    lower_wgmma(lw, o, cfg, a_src, b_src) -> value     (SIMT lowering of one chosen DOT)

A DOT qualifies (``qualifies``) when it sits in a ``tj.range(..., stages>=2)`` loop, its inputs
are fp16/bf16, the CTA tile is one 64-row warpgroup slice per four warps (M = 16 * num_warps,
N <= 256), and its operands can reach wgmma: A loaded in the loop (a cp.async ring), loaded
before it (staged once: attention's q) or computed from another DOT's accumulator (registers:
attention's p, wgmma's A-in-registers form); B loaded in the loop, plain (k rows of n,
"N-major", whole 64-column atoms) or transposed (``tj.trans(k)``: K-major), or, with
``COMPUTED_B``, computed in the loop (a dequantised weight tile: stored
into B atoms each iteration, into two buffers by iteration parity with one group left in flight
(``COMPUTED_B_BUFFERS``), or into one with none).  Loads must be
ones ``pipeline_loads`` can ring (``ring_sources.ring_source``, the rule plan_loops uses).  The accumulator keeps the
mma.sync C-fragment layout with warps (num_warps, 1) -- wgmma's D fragment is that layout --
so everything after the DOT (epilogue, softmax, conversions) is shared with the mma.sync path.

A DOT before a loop whose product is the first value of a tile the loop carries and replaces with
a wgmma DOT's product each iteration (a rotated loop: ``rotate_products``, or the user's own
spelling) takes wgmma too (``first_products``), so the carried tile keeps the accumulator
layout: its A is staged by the threads where the loop stages it (the loop then reads it from
there), its B K-major where it is a transpose (``transposed``: attention's ``k.T``, weights
stored (N, K); float8 too), else N-major like a computed B.

Shared layouts (PTX ISA, "Shared Memory Matrix Layout" and "Matrix Descriptor Format"):
A K-major tile (A, or a transposed B) keeps the ldmatrix tile layout when its rows are R = 32,
64 or 128 bytes -- exactly the K-major SW32/64/128 layout (8-row groups 8R apart); wider rows
(D = 128 in attention) are split into 128-byte atoms along K, ``rows * 128`` bytes apart.
B (K x N) is stored as 64-column atoms: atom ``a`` holds columns 64a..64a+63 of all K rows,
128 bytes per row, SW128-swizzled, atoms ``K * 128`` bytes apart (the descriptor's LBO; SBO
is 1024, eight rows).  Tiles start on 1024-byte boundaries (the swizzle uses address bits).

Each DOT: ``wgmma.fence``, one ``wgmma`` per 16-wide k step (a K-major start moves 32 bytes
along its rows, an N-major B's 16 rows), ``commit_group``, then ``wait_group 1`` when the loop
has one wgmma DOT whose accumulator is only carried to the next iteration and the ring has 3
or more slots (one group stays in flight; ``pipeline_loads`` then copies a slot less ahead),
else ``wait_group 0``.  Where that product is carried and read in the next iteration after its
DOT (``p_next = dot(...); acc = f(p, acc); p = p_next``: the product computed one K step
ahead), the wait passes the carried product too and the loop is unrolled by two in codegen
(``carried_products``), so the wgmma in flight and the product being read never share
registers.  The ring's per-iteration barrier is preceded by
``fence.proxy.async`` so cp.async bytes are visible to the tensor cores.
Kernels with wgmma divide float32 with ``div.full.f32`` (IEEE division's slow path is a call,
and ptxas serialises every wgmma of a function with calls).  ``Options.wgmma=False``
(``TILEJIT_WGMMA=0``) turns the path off (mma.sync is used instead).
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes.assign_layouts import carried_yields, source_dot
from tilejit.passes.lower_memory import KnownMultiples
from tilejit.passes.mma_tiling import DEFAULT_STAGES, a_in_registers, pipeline_stages
from tilejit.passes.plans import DotFamily, SharedTile, Staged
from tilejit.passes.ring_sources import ring_source
from tilejit.simt import RegType, SimtOp

I32 = D.int32
ATOM_BYTES = 128                # an N-major B atom row: 64 fp16/bf16 columns
K_STEP_BYTES = 32               # one wgmma's K along a K-major row: 16 fp16/bf16 or 32 float8 elements
FP8 = (D.float8e4m3, D.float8e5m2)
KINDS = {"bfloat16": "bf16", "float16": "f16", "float8e4m3": "e4m3", "float8e5m2": "e5m2"}
A_ROW_BYTES = (32, 64, 128)     # K-major swizzle spans wgmma supports
# The switch: True lets a DOT whose A is a transposed load (``C^T = B^T A^T``) read it as
# wgmma's M-major A (``SharedTile.A_MN_ATOMS``, imm-trans-a); False keeps such DOTs on mma.sync.
# On since its H200 run (scripts/gpu_trans_a.sh, 2026-12-05): its GPU tests pass, and with
# swap_small_dots the example matmul reaches 1.00x cuBLAS at M16 / M32 N8192 K8192.
TRANSPOSED_A = True
# The switch: True lets a DOT whose B the loop computes (a quantised GEMM's dequantised weights)
# run on wgmma, B stored by the threads into wgmma's B atoms each iteration
# (``lower_dot.stage_registers``) and, with one buffer (``COMPUTED_B_BUFFERS``), no wgmma group
# left in flight across iterations (the next store would race its read); False keeps such DOTs on mma.sync (64 mma and ~32 ldmatrix a warp a
# K tile).  On since its H100 run (scripts/gpu_s21.sh, 2026-12-05, alternating, two rounds): W4A16
# at M 64 (64x128x128, 4 warps, split 4) 54.3-54.6 us against 63.8-64.3 at N 8192 and
# 176.8-177.6 against 206.9-208.6 at N 28672 (the best mma.sync config), -15%; its GPU tests pass.
COMPUTED_B = True
# The switch: 2 stores a computed B into two buffers, iteration t's into buffer t % 2, so its
# group may stay in flight while the next iteration computes and stores the next B (where one
# warpgroup reads it: with two, one warpgroup would overwrite a buffer the other's group still
# reads; plan_loops gives such a loop no more ring slots than keep two CTAs an SM,
# ``PAIR_CTA_BYTES``); 1 keeps one buffer and no group in flight.  Measured on the H100
# (2026-12-05, session 21, scripts/gpu_w4_ab.sh with COMPUTED_B_BUFFERS 1 / 2, alternating, two
# rounds each, W4A16 M 64): two
# buffers at 3 slots (113 KB, two CTAs) 50.0-50.3 against 51.0 us at N 8192 (64x128x128x4 split 4,
# the best of either) and 159.2-159.7 against 165.6-167.4 at N 28672 (split 2); 64x128x64x4 58.6-58.9
# against 61.7-62.0 (N 8192), 192-195 against 205-206 (N 28672); 64x64x128x4 the same; with 4
# slots (132 KB, one CTA) 67.5 against 51.0: hence the slot cap.
COMPUTED_B_BUFFERS = 2


def ring_layout(tile: SharedTile, cfg) -> SharedTile:
    """The layout a wgmma DOT's operand tile takes in shared memory, for the ldmatrix layout
    ``tile`` the mma.sync path would give it."""
    if tile is SharedTile.B:
        return SharedTile.B_ATOMS
    if tile is SharedTile.A_MN_ATOMS or cfg.k * cfg.ab_dtype.itemsize <= ATOM_BYTES:
        return tile
    return {SharedTile.A: SharedTile.A_ATOMS, SharedTile.B_NK: SharedTile.B_NK_ATOMS}[tile]


def sources_ready(lw, dot: ir.Operation, cfg, ringed: set, staged: dict) -> bool:
    """Every operand of wgmma DOT ``dot`` is in a ring (``ringed``), staged before the loop in
    a wgmma layout (``staged``: value -> SharedTile), or (A) already in registers as mma A
    fragments."""
    a_v, b_v = dot.operands[:2]
    a_ok = a_v in ringed or (a_v in staged and staged[a_v].wgmma_a) \
        or (cfg.ab_dtype not in FP8 and a_in_registers(lw, a_v, cfg))
    return a_ok and (b_v in ringed or computed_b(dot, cfg, ringed))


def computed_b(dot: ir.Operation, cfg, ringed: set) -> bool:
    """``COMPUTED_B`` and ``dot``'s B is no ring's (the loop computes it): staged each iteration."""
    return COMPUTED_B and dot.operands[1] not in ringed and b_atoms_fit(cfg.n, cfg.ab_dtype)


def b_atoms_fit(n: int, dtype) -> bool:
    """Whether a B of ``n`` columns of ``dtype`` fills whole N-major 64-column atoms (not float8,
    which wgmma reads K-major only)."""
    return dtype not in FP8 and n % (ATOM_BYTES // dtype.itemsize) == 0


def enabled(target: str, switch: bool = True) -> bool:
    """wgmma exists on sm_90a; ``switch`` is ``Options.wgmma``."""
    return switch and target == "sm_90a"


def kmajor_rows_ok(row_bytes: int) -> bool:
    """K-major rows wgmma can read: one swizzle span (32/64/128 bytes) or whole 128-byte atoms."""
    return row_bytes in A_ROW_BYTES or row_bytes % ATOM_BYTES == 0


def kmajor_span(row_bytes: int) -> int:
    return min(row_bytes, ATOM_BYTES)


def kmajor_step(kk: int, rows: int, row_bytes: int, item: int) -> int:
    """Byte offset of k step ``kk`` (32 bytes: 16 columns, 32 of float8) in a K-major tile of
    ``rows`` rows: inside the row for one swizzle span, else in atom ``kk*32 // 128``
    (``rows * 128`` bytes each)."""
    col = kk * K_STEP_BYTES
    if row_bytes <= ATOM_BYTES:
        return col
    return (col // ATOM_BYTES) * rows * ATOM_BYTES + col % ATOM_BYTES


def qualifies(fn: ir.Function, dot: ir.Operation, body: ir.Block, num_warps: int, inside: set,
              multiples, uses: dict) -> bool:
    """Whether ``dot`` (in loop ``body``) can run on wgmma: A a ring source of the loop
    (``ring_sources``; through a transpose too, as wgmma's M-major A, with ``TRANSPOSED_A``
    and not in float8),
    defined before it (staged once) or computed from another DOT's
    accumulator (registers); B a ring source, plain (N-major, whole 64-column atoms) or
    transposed (K-major)."""
    a_v, b_v = dot.operands[:2]
    a, b = a_v.type, b_v.type
    if a.dtype != b.dtype or a.dtype.name not in KINDS or len(a.shape) != 2:
        return False
    (m, k), n = a.shape, b.shape[1]
    item = a.dtype.itemsize
    if num_warps % 4 or m != 16 * num_warps or (k * item) % K_STEP_BYTES or n % 8 or n > 256:
        return False
    fp8 = a.dtype in FP8                # float8 wgmma reads both operands K-major from shared memory
    a_src = ring_source(fn, multiples, dot, a_v, body, uses)
    a_ok = (a_src is not None and (not a_src.n_major or (TRANSPOSED_A and not fp8))) or a_v not in inside \
        or (not fp8 and source_dot(a_v, a.shape, carried_yields(fn)) is not None)
    b_src = ring_source(fn, multiples, dot, b_v, body, uses)
    if b_src is not None:
        b_ok = kmajor_rows_ok(k * item) if b_src.n_major else b_atoms_fit(n, a.dtype)
    else:                                   # computed in the loop: staged into atoms each iteration
        b_ok = COMPUTED_B and b_v in inside and b_atoms_fit(n, a.dtype)
    return a_ok and b_ok and kmajor_rows_ok(k * item)


def wgmma_dots(fn: ir.Function, num_warps: int, target: str, switch: bool = True,
               default_stages: int = DEFAULT_STAGES) -> set[ir.Operation]:
    """The DOTs that take the wgmma path (``plan_dots`` records them, warps (num_warps, 1))."""
    out = set()
    if not enabled(target, switch):
        return out
    multiples = KnownMultiples(fn)
    for o in fn.walk():
        if pipeline_stages(o, default_stages) < 2:
            continue                      # (only pipelined loops feed wgmma from shared rings)
        body = o.regions[0]
        inside = {r for op in body.walk() for r in op.results} | set(body.args)
        uses = ir.users(body)
        out.update(dot for dot in body.ops
                   if dot.op is TileOp.DOT and qualifies(fn, dot, body, num_warps, inside, multiples, uses))
    out.update(first_products(fn, out))
    return out


def first_products(fn: ir.Function, dots: set) -> set[ir.Operation]:
    """The DOTs before a loop whose product is the first value of a tile the loop carries and
    replaces with the product of one of ``dots`` (wgmma) each iteration: a rotated loop's first
    product (``rotate_products``, or spelled so by hand).  They take wgmma too, so the carried
    tile keeps one layout; their operands are staged by the threads (A where the loop stages
    it; B K-major where it is a transpose, else N-major as a computed B, which float8 cannot
    be)."""
    out = set()
    loops = [o for o in fn.walk() if o.op is TileOp.FOR]
    in_loops = {x for o in loops for x in o.regions[0].walk()}     # (staged by the threads: no loop around)
    for o in loops:
        body = o.regions[0]
        for init, y in zip(o.operands[3:], body.ops[-1].operands):
            first, dot = init.owner, y.owner
            if first is None or first.op is not TileOp.DOT or dot not in dots or first in in_loops \
                    or [v.type for v in first.operands] != [v.type for v in dot.operands] \
                    or not (transposed(first.operands[1]) is not None or (COMPUTED_B and b_atoms_fit(
                        first.operands[1].type.shape[1], first.operands[1].type.dtype))) \
                    or source_dot(first.operands[0], first.operands[0].type.shape) is not None:
                continue
            out.add(first)
    return out


def transposed(v: ir.Value) -> ir.Value | None:
    """The 2-D tile that ``v`` is the transpose of (``tj.trans(t)``, ``t.T``), or None."""
    o = v.owner
    if o is None or o.op is not TileOp.TRANS or len(v.type.shape) != 2 or tuple(o.attrs.perm) != (1, 0):
        return None
    return o.operands[0]


def atom_offsets(lw, layout, item: int, k_rows: int) -> ir.Value:
    """Byte offset in a tile of 128-byte atoms of each register of the 2-D (row, column)
    ``layout`` (a prologue vector): atom ``col_byte // 128`` (``k_rows * 128`` bytes each, one
    per 64 columns), row ``r`` of 128 bytes in it, 16-byte chunk XOR ``r % 8`` (SW128).  An
    N-major B is k rows of n; a K-major tile wider than 128 bytes (attention's q and k with
    D = 128) is m or n rows of k.  ``atom_table`` is the NumPy twin."""

    def make():
        p, n = lw.prologue, layout.n
        rows, cols = tile_coords(lw, layout, item)

        def k(v):
            return lw.const(I32, [v] * n, p)

        def ew(op, x, y):
            return lw.ew(op, [x, y], I32, p)
        inner = ew(TileOp.AND, cols, k(127))
        chunk = ew(TileOp.XOR, ew(TileOp.SHR, inner, k(4)), ew(TileOp.AND, rows, k(7)))
        out = ew(TileOp.ADD, ew(TileOp.MUL, ew(TileOp.SHR, cols, k(7)), k(k_rows * ATOM_BYTES)),
                 ew(TileOp.SHL, rows, k(7)))
        out = ew(TileOp.ADD, out, ew(TileOp.SHL, chunk, k(4)))
        return ew(TileOp.ADD, out, ew(TileOp.AND, inner, k(15)))
    return lw.geo(("atoms", layout, item, k_rows), make)


def atom_table(rows, cols_bytes, k_rows: int):
    """NumPy twin of ``atom_offsets``."""
    inner = cols_bytes & 127
    return (cols_bytes >> 7) * k_rows * ATOM_BYTES + rows * ATOM_BYTES + \
        (((inner >> 4) ^ (rows & 7)) << 4) + (inner & 15)


def lower_wgmma(lw, o: ir.Operation, cfg, a_src: Staged | list, b_src: Staged) -> ir.Value:
    """The DOT ``o`` as wgmma over its k steps.  ``a_src`` is A's shared tile (K-major: A or
    A_ATOMS; M-major: A_MN_ATOMS) or ``[kk][0]`` register fragments; ``b_src`` is B's tile:
    B_ATOMS (N-major) or B_NK / B_NK_ATOMS (K-major)."""
    item = cfg.ab_dtype.itemsize
    kind = KINDS[cfg.ab_dtype.name]
    acc = lw.get(o.operands[2], cfg.acc_layout)
    k_row = cfg.k * item
    a_regs = isinstance(a_src, list)
    n_major = b_src.tile is SharedTile.B_ATOMS
    m_major = not a_regs and a_src.tile is SharedTile.A_MN_ATOMS
    b_span = ATOM_BYTES if n_major else kmajor_span(k_row)
    attrs = simt.WgmmaAttrs(kind, cfg.n, ATOM_BYTES if m_major else kmajor_span(k_row), n_major, b_span,
                            cfg.k * ATOM_BYTES if n_major else 0,
                            (None if a_regs else a_src.buffer, b_src.buffer), a_regs, m_major)
    if not a_regs:                 # warpgroup g reads rows 64g.. (each row one span apart; M-major:
        # atom g, k rows of 128 bytes)
        group = lw.ew(TileOp.SHR, [lw.thread_id("warp"), lw.const(I32, [2])], I32)
        per_group = cfg.k * ATOM_BYTES if m_major else 64 * kmajor_span(k_row)
        a_base = lw.ew(TileOp.ADD, [a_src.base, lw.ew(TileOp.MUL, [group, lw.const(I32, [per_group])], I32)], I32)
    # a product one iteration ahead that a later DOT's wait retires: skipped on the last trip
    guard = ahead_guard(lw, o) if not lw.in_flight_after(o) and _retired_later(lw, o) \
        and not lw.wgmma_pending.get(id(lw.tile_blocks[-1])) else None
    lw.emit(SimtOp.WGMMA_FENCE, [])
    for kk in range(cfg.k * item // K_STEP_BYTES):
        if a_regs:
            a = a_src[kk][0]
        else:
            step = kk * 16 * ATOM_BYTES if m_major else kmajor_step(kk, cfg.m, k_row, item)
            a = lw.ew(TileOp.ADD, [a_base, lw.const(I32, [step])], I32)
        step = kk * 16 * ATOM_BYTES if n_major else kmajor_step(kk, cfg.n, k_row, item)
        b = lw.ew(TileOp.ADD, [b_src.base, lw.const(I32, [step])], I32)
        acc = lw.emit(SimtOp.WGMMA, [acc, a, b] + ([guard] if guard is not None else []),
                      RegType(D.float32, cfg.n // 2), attrs).result
    lw.emit(SimtOp.WGMMA_COMMIT, [])
    n = lw.in_flight_after(o)
    carried = carried_products(lw, o) if n else []
    if not n and not carried and waits_past_next(lw, o) and not lw.wgmma_pending.get(id(lw.tile_blocks[-1])):
        # first read after the next wgmma DOT of the body (its accumulation one iteration
        # behind: defer_products): that DOT's wait retires it, leaving its own group in flight
        # (only where nothing else is pending: the pending list is replaced, not extended)
        lw.leave_pending([o.result])
        return acc
    pending = lw.take_pending()
    if pending and not n and _only_yielded(lw, o) and all(
            p.owner is not None and p.owner.op is TileOp.DOT and waits_past_next(lw, p.owner) for p in pending):
        # the earlier product's group retires here (wait_group 1); this accumulation stays in
        # flight under the body's work on it, retired by the wait at the body's end
        # (``lower.region``) before the ring's slots are released
        for a, v in zip(pending, wait_group(lw, [lw.get(a) for a in pending], 1)):
            lw.rebind(a, v)
        lw.leave_pending([o.result])
        return acc
    if not n and _retired_later(lw, o):
        # a product computed one iteration ahead whose group a later DOT of this body retires
        # (its wait_group 0): it stays in flight while the body works on the carried one
        # (attention's softmax of this block under the next block's QK^T)
        # (guarded: ptxas fills the group a skipped product leaves empty with one m64n8 wgmma
        # after the join, on both paths; waiting down to 2 keeps this product in flight past it.
        # Nothing older is in flight here: the later DOT's wait_group 0 retired it)
        n, carried = 1 if guard is None else 2, _carried_after(lw, o)
        lw.leave_pending([o.result])
        if UNROLL_AHEAD:       # the product ahead and the one read alternate registers: no copy
            lw.mark_rotated(next(x for x in lw.loop_plans if x.regions and x.regions[0] is lw.tile_blocks[-1]))
    out = wait_group(lw, [acc] + [lw.get(a) for a in carried + pending], n)
    for a, v in zip(carried + pending, out[1:]):   # read after the wait: their groups have retired
        lw.rebind(a, v)
    return out[0]


# The switch: True unrolls by two a loop whose product computed one iteration ahead a later DOT's
# wait retires (attention's rotated form), so that product and the one the body reads alternate
# registers instead of being copied at the back edge (a D64 128x128 loop: 64 moves a thread an
# iteration, after the wait).  False until timed: at D128 the unrolled loop spills (432 bytes).
UNROLL_AHEAD = False


def waits_past_next(lw, o: ir.Operation) -> bool:
    """DOT ``o``'s product is read in its body (at the top level or in a region there, not only
    by the YIELD), first after the body's next wgmma DOT: attention's QK^T with the previous
    block's PV issued after it (``defer_products``)."""
    if not lw.tile_blocks or o not in lw.tile_blocks[-1].ops:
        return False
    body = lw.tile_blocks[-1]
    at = body.ops.index(o)
    nxt = next((j for j in range(at + 1, len(body.ops)) if body.ops[j].op is TileOp.DOT
                and lw.dot_plans.family(body.ops[j]) is DotFamily.WGMMA), None)
    readers = [j for j, x in enumerate(body.ops[:-1])        # (a product only yielded: rotate_products')
               if any(o.result in z.operands for z in [x, *(w for r in x.regions for w in r.walk())])]
    return nxt is not None and bool(readers) and min(readers) > nxt and not lw.in_flight_after(body.ops[nxt])


def _only_yielded(lw, o: ir.Operation) -> bool:
    """DOT ``o``'s product is read only by its body's YIELD (a carried accumulator)."""
    if not lw.tile_blocks or o not in lw.tile_blocks[-1].ops:
        return False
    body = lw.tile_blocks[-1]
    return all(x is body.ops[-1] for x in lw.users(o.result))


def ahead_guard(lw, o: ir.Operation) -> ir.Value | None:
    """For a product computed one iteration ahead (``rotate_products``, or the user's own
    rotated loop): ``o``'s product only carried to the next iteration, the loop's result for it
    unused, and the loop's step a positive constant: ``iv + step < end``, a bool register,
    false on the last trip, where the product would not be read; codegen branches around its
    wgmmas there (a rotated attention at 8 blocks a row would otherwise do 1/16 more tensor
    work).  ``lower_wgmma`` asks only where a later DOT's ``wait_group 0`` retires it
    (attention's form); a GEMM's product carried across the back edge keeps its every-trip
    wgmma.  None: issued on every trip."""
    if not lw.tile_blocks:
        return None
    body = lw.tile_blocks[-1]
    loop = next((x for x in lw.loop_plans if x.regions and x.regions[0] is body and x.op is TileOp.FOR), None)
    step = None if loop is None else loop.operands[2].owner
    if step is None or step.op is not TileOp.CONSTANT or not isinstance(step.attrs.value, int) \
            or step.attrs.value <= 0:
        return None
    carried = [i for i, y in enumerate(body.ops[-1].operands) if y is o.result]
    if not carried or any(lw.users(loop.results[i]) for i in carried) \
            or any(x is not body.ops[-1] for x in lw.users(o.result)):
        return None
    iv = body.args[0]
    nxt = lw.ew(TileOp.ADD, [lw.get(iv), lw.get(loop.operands[2])], iv.type.dtype)
    return lw.ew(TileOp.LT, [nxt, lw.get(loop.operands[1])], D.bool_)


def _retired_later(lw, o: ir.Operation) -> bool:
    """``o``'s product is carried to the next iteration and read there (``_carried_after``), and
    a later wgmma DOT of the same body waits for every group (``wait_group 0``) before the
    iteration ends, so no group is in flight across the loop's back edge."""
    if not lw.tile_blocks or not _carried_after(lw, o):
        return False
    body = lw.tile_blocks[-1]
    return any(d.op is TileOp.DOT and lw.dot_plans.family(d) is DotFamily.WGMMA and not lw.in_flight_after(d)
               for d in body.ops[body.ops.index(o) + 1:])


def _carried_after(lw, o: ir.Operation) -> list:
    """The loop-carried tiles ``o``'s product becomes that the body reads after ``o``."""
    if not lw.tile_blocks:
        return []
    body = lw.tile_blocks[-1]
    loop = next((x for x in lw.loop_plans if x.regions and x.regions[0] is body and x.op is TileOp.FOR), None)
    if loop is None:
        return []
    at = body.ops.index(o)
    out = []
    for i, y in enumerate(body.ops[-1].operands):
        arg = body.args[1 + i]
        readers = [j for j, x in enumerate(body.ops) if x.op is not TileOp.YIELD
                   and any(arg in z.operands for z in [x, *(w for r in x.regions for w in r.walk())])]
        if y is o.result and readers and min(readers) > at:
            out.append(arg)
    return out


def carried_products(lw, o: ir.Operation) -> list:
    """The loop-carried tiles that DOT ``o``'s product becomes in the next iteration and that
    the loop body reads otherwise than by yielding (a product computed one iteration ahead and
    worked on in the next: ``p_next = dot(...); acc = f(p, acc); p = p_next``).  Their group is
    the one ``wait_group 1`` retires, so they are passed through the wait (nothing reads them
    before it), and the loop is marked ``lw.rotated``: its codegen unrolls it by two, so the
    product in flight and the one being read alternate registers instead of being copied at
    the back edge (ptxas serialises every wgmma that a copy of an in-flight accumulator
    follows)."""
    out = _carried_after(lw, o)
    if out:
        lw.mark_rotated(next(x for x in lw.loop_plans if x.regions and x.regions[0] is lw.tile_blocks[-1]))
    return out


def wait_group(lw, accs: list, n: int, hold: bool = False) -> list:
    """``wgmma.wait_group n``, giving back ``accs`` (the accumulators read after it); ``hold``:
    ptxas keeps it where it is (``WaitAttrs.hold``)."""
    wait = lw.emit(SimtOp.WGMMA_WAIT, list(accs), None, simt.WaitAttrs(n, hold))
    wait.results = [ir.Value(a.type, owner=wait) for a in accs]
    return wait.results


def tile_coords(lw, layout: L.Layout, item: int):
    """(row, byte column) i32 vectors of each register of a 2-D ``layout`` (prologue values)."""
    p = lw.prologue
    n = layout.n
    row = lw.ew(TileOp.ADD, [lw.splat(lw.bitfield_sum(layout.terms[0]), n, p),
                             lw.const(I32, [c[0] for c in layout.regs], p)], I32, p)
    col_terms = [L.BitTerm(t.src, t.shift, t.bits, t.scale * item) for t in layout.terms[1]]
    col = lw.ew(TileOp.ADD, [lw.splat(lw.bitfield_sum(col_terms), n, p),
                             lw.const(I32, [c[1] * item for c in layout.regs], p)], I32, p)
    return row, col
