"""Long rows split over a thread-block cluster: a row-reduction kernel whose rows are wider than
one CTA reads well is run by a cluster of CTAs (sm_90), each holding one part of the row in
registers, so the row is read from memory once and no loop re-reads it.

    cluster_rows(fn) -> fn          plan_cluster(fn) -> (width, ctas) | None

The kernel qualifies where ``passes.chunk_rows`` would cut its rows into loops (its largest
loaded or stored tile has more than ``chunk_rows.CHUNK_VALUES`` values, or its row loads together
more than ``chunk_rows.LOADS_BUDGET``), when it loads the row once (a softmax; norms with weights
measured slower split) and the row has at least ``CLUSTER_BYTES``, and with the same rules (``chunk_rows.splittable``: every
*wide* value, one whose last axis is the width ``W`` of that tile, is made at the top level by
loads and elementwise ops and used by them, by sums, maxima and minima over the last axis, or by
stores; ``W`` a power of two).  Then ``C`` CTAs share each program: the fewest (a power of two,
at most ``MAX_CTAS``) whose parts ``chunk_rows`` would leave whole:

    rank = cluster_rank()                 # 0 .. C-1: program_id(0) is the cluster's index
    each wide value: its part, columns [rank * W/C, (rank + 1) * W/C)
    each reduction of a wide value: reduce the part, then cluster_reduce: every CTA combines
        the C partial results in rank order (the same bits in every CTA; 16-bit float sums in
        float32, as the unsplit reduction accumulates them)
    a softmax's max and sum (``chunk_loops.softmax_pairs``): one exchange (``_softmax``,
        CLUSTER_SOFTMAX) instead of two
    each store of a wide value: the part, at its columns

The launch runs C times the CTAs along grid axis 0 in clusters of C (``SimtMeta.cluster_ctas``);
``program_id(0)`` and ``num_programs(0)`` count clusters.  Loads past the array read ``other``
and stores past it are dropped, as for the whole tile.  Parts still too wide for one CTA (rows
of more than ``MAX_CTAS`` times what one CTA holds) are then split into loops by ``chunk_rows``.
"""
from __future__ import annotations

from tilejit import dtypes, ir
from tilejit.ir import ClusterAttrs, ConstAttrs, ReduceKind, TileOp
from tilejit.passes.chunk_loops import ChunkPlan, _Chunk, softmax_pairs
from tilejit.passes import chunk_rows
from tilejit.passes.chunk_rows import _memory_tile, splittable
from tilejit.passes.shared_memory import DEDICATED_BYTES

MAX_CTAS = 8                        # the largest portable cluster
# Only kernels with one row load (a softmax) and rows of at least this many bytes are split.  H200
# (2026-12-04, gpu_cluster.sh: bench_sweep.py with and without clusters in one call, 2**26
# elements, ratio to copy at 16K / 32K / 64K / 128K columns): softmax float32 - / 0.80 / 0.78 /
# 0.73 against chunk loops' 0.97 (not split) / 0.73 / 0.62 / 0.48, bfloat16 - / 0.61 / 0.57 /
# 0.52 against 0.86 / 0.66 / 0.50 / 0.44: a gain from 128 KiB rows.  (Parts of 8192 values at
# 8 warps, the first rule, measured float32 0.83 / 0.82 / 0.78 at 16K / 32K / 64K and bfloat16
# 0.66 / 0.63 / 0.61: no better where it mattered, and worse at 16K.)  Rows of several loads lost:
# layernorm 0.17-0.39 against 0.35-0.78, RMSNorm bfloat16 0.34-0.58 against 0.51-0.72, RMSNorm
# float32 0.77 / 0.71 / 0.68 / 0.71 against 0.96 / 0.76 / 0.62 / 0.58.
CLUSTER_BYTES = 128 * 1024
ONE_LOAD = True                     # (False: rows of several loads too; the tests check them so)
# A softmax's max and sum in one exchange (else one each).  H200 (2026-12-04, same call, ratio to
# copy at 32K / 64K / 128K): float32 0.82 / 0.80 / 0.76 against 0.82 / 0.79 / 0.75 with two,
# bfloat16 (64K / 128K) 0.57 / 0.51 against 0.57 / 0.53: the barriers are not the limiter.
ONE_EXCHANGE = True
# In an exchange, lane r < C of each warp reads CTA r's values and the warp combines them by
# shuffles: C remote reads per warp and register.  Measured (H200, 2026-12-04, same call, ratio to
# copy) against every thread reading all C CTAs' (32 * C per warp): softmax bf16 64K / 128K 0.60 /
# 0.55 against 0.58 / 0.50, fp32 0.80 / 0.77 against 0.80 / 0.76, so that version is gone.  Norms
# over clusters stay slower than chunk loops with lane reads too (layernorm bf16 16K 0.24).
# The exit barrier is one barrier.cluster arrive.release + wait.acquire after the stores.  Split
# (H200, 2026-12-04, same call, ratio to copy at 32K / 64K / 128K): an arrive.release right after
# the exchange and the wait at the end gave softmax bf16 0.66 / 0.60 / 0.54 and fp32 0.80 / 0.76
# / 0.74, against 0.66 / 0.59 / 0.55 and 0.82 / 0.80 / 0.77 whole; an arrive.relaxed failed
# launches (a remote read passed it).  So the barrier stays whole.
# Threads per SM that a clustered kernel asks ptxas to fit (its ``min_ctas_per_sm``; None: the
# pipeline's hint, which kernels under 512 threads do not get), and the values each thread loads
# at most (``passes.warps`` gives the part more warps until it holds).  H200 (2026-12-04,
# switch_probe.py, 2**26 elements, ratio to copy): float32 softmax at 16384 / 65536 columns
# 0.74 / 0.75 with 1024 threads asked for, 0.61 / 0.53 without (96 registers: 2 CTAs of 8 warps
# per SM), 0.46 / 0.46 with 2048.
THREADS_PER_SM = 1024
VALUES_PER_THREAD = 32


def supports(target: str) -> bool:
    """Whether ``target`` has thread-block clusters (sm_90 and later; the emulator models them)."""
    if target == "emulate":
        return True
    digits = "".join(ch for ch in target.removeprefix("sm_") if ch.isdigit())
    return bool(digits) and int(digits) >= 90


def plan_cluster(fn: ir.Function) -> tuple[int, int] | None:
    """(W, C): the row width and the CTAs per cluster, or None when ``fn`` is not split."""
    plan = _plan(fn)
    return plan[:2] if plan else None


def _plan(fn: ir.Function) -> tuple[int, int, frozenset] | None:
    """(W, C, the wide values) of ``plan_cluster``."""
    if fn.meta.get("cluster_ctas", 1) > 1:
        return None
    tiles = [v for o in fn.walk() if (v := _memory_tile(o)) is not None]
    if not tiles:
        return None
    big = max(tiles, key=lambda v: v.type.numel)
    size, width = big.type.numel, big.type.shape[-1]
    if width & (width - 1) or any(o.op in (TileOp.DOT, TileOp.PRINT, TileOp.ASSERT) for o in fn.walk()):
        return None
    loads = sum(1 for v in tiles if v.owner is not None and v.owner.op is TileOp.LOAD and v.type.shape[-1] == width)

    def fits(part: int) -> bool:            # what chunk_rows leaves whole
        return part <= chunk_rows.CHUNK_VALUES and (not chunk_rows.COUNT_LOADS or part * loads <= chunk_rows.LOADS_BUDGET)
    if fits(size) or ONE_LOAD and loads != 1 or size * big.type.dtype.itemsize < CLUSTER_BYTES:
        return None
    wide = splittable(fn, width)
    if wide is None:
        return None
    if any(o.op is TileOp.REDUCE and o.operands[0] in wide and o.result.type.numel * 8 > DEDICATED_BYTES
           for o in fn.body.ops):
        return None             # cluster_reduce's buffers (of up to 8-byte values) stay small
    ctas = 2
    while ctas < min(MAX_CTAS, width) and not fits(size // ctas):
        ctas *= 2
    return width, ctas, frozenset(wide)


def cluster_rows(fn: ir.Function) -> ir.Function:
    plan = _plan(fn)
    if plan is None:
        return fn
    width, ctas, wide = plan
    part = width // ctas
    top, fn.body.ops = fn.body.ops, []
    b = ir.Builder(fn.body)
    i32 = dtypes.int32
    loc = fn.meta.get("loc", ir.UNKNOWN_LOC)       # the kernel's ``def`` line
    rank = b.create(TileOp.CLUSTER_RANK, [], [ir.scalar(i32)], ClusterAttrs(ctas), loc=loc).result
    step = b.create(TileOp.CONSTANT, [], [ir.scalar(i32)], ConstAttrs(part), loc=loc).result
    first = b.create(TileOp.MUL, [rank, step], [ir.scalar(i32)], loc=loc).result
    mapped: dict[ir.Value, ir.Value] = {}

    def remap(v: ir.Value) -> ir.Value:
        return mapped.get(v, v)

    parts = ChunkPlan(width, part, wide)
    chunk = _Chunk(b, parts, first, remap)
    pairs = softmax_pairs(top, parts) if ONE_EXCHANGE else {}
    deferred = set(pairs.values())
    for o in top:
        if o in pairs:
            mapped[pairs[o].result], mapped[o.result] = _softmax(b, pairs[o], o, chunk, ctas)
        elif o in deferred:
            continue                                # combined with its sum (_softmax)
        elif o.op is TileOp.REDUCE and o.operands[0] in wide:
            mapped[o.result] = _reduce(b, o, chunk.value(o.operands[0]), ctas)
        elif o.op is TileOp.STORE and o.operands[-1] in wide:
            tile = chunk.value(o.operands[-1])
            operands = [remap(x) for x in o.operands[:-1]]
            operands[-1] = chunk.offset(operands[-1], o.loc)
            b.create(TileOp.STORE, operands + [tile], [], o.attrs, loc=o.loc)
        elif any(r in wide for r in o.results):
            continue                                # made (its part) where it is first used
        else:
            o.operands = [remap(x) for x in o.operands]
            fn.body.ops.append(o)
    fn.meta["cluster_ctas"] = ctas
    return fn


def _reduce(b: ir.Builder, o: ir.Operation, value: ir.Value, ctas: int) -> ir.Value:
    """The reduction ``o`` of its part ``value``, combined over the cluster."""
    t, kind, loc = o.result.type, o.attrs.kind, o.loc
    narrow = kind is ReduceKind.SUM and t.dtype.is_float and t.dtype.bits < 32
    acc_t = ir.TileType(t.shape, dtypes.float32) if narrow else t
    partial = b.create(TileOp.REDUCE, [value], [acc_t], o.attrs, loc=loc).result
    total = b.create(TileOp.CLUSTER_REDUCE, [partial], [acc_t], ClusterAttrs(ctas, kind), loc=loc).result
    if acc_t != t:
        total = b.create(TileOp.CAST, [total], [t], loc=loc).result
    total.hint = o.result.hint
    return total


def _softmax(b: ir.Builder, r1: ir.Operation, r2: ir.Operation, chunk: _Chunk, ctas: int):
    """(max, sum) of ``m = max(x)`` and ``sum(exp(x - m))`` (``chunk_loops.softmax_pairs``) with one
    exchange: each CTA reduces its part with its own maximum ``m_r`` (read as 0 where the part
    is all -inf), ``e_r = exp(x_r - m_r)`` and ``s_r = sum(e_r)``; CLUSTER_SOFTMAX gives
    ``M = max(m_r)`` and ``S = sum(s_r * exp(m_r - M))``; the part of ``exp(x - m)`` becomes
    ``e_r * exp(m_r - M)`` (one multiply by a row scalar, no second exp).  A row that is -inf
    throughout gets S = 0 and 0 / 0 = NaN, as exp(-inf - -inf) gives it unsplit."""
    loc, x = r2.loc, r1.operands[0]
    exp = r2.operands[0].owner
    f32 = dtypes.float32
    mt, st = r1.result.type, r2.result.type
    ft = ir.TileType(mt.shape, f32)

    def ew(op, operands, t):
        return b.create(op, operands, [t], loc=loc).result

    def splat(value, t):
        c = b.create(TileOp.CONSTANT, [], [ir.scalar(t.dtype)], ConstAttrs(value), loc=loc).result
        return ew(TileOp.SPLAT, [c], t)

    def not_inf(v):
        empty = ew(TileOp.EQ, [v, splat(float("-inf"), v.type)], ir.TileType(v.type.shape, dtypes.bool_))
        return ew(TileOp.WHERE, [empty, splat(0.0, v.type), v], v.type)

    xc = chunk.value(x)
    m = b.create(TileOp.REDUCE, [xc], [mt], r1.attrs, loc=loc).result
    et = ir.TileType(xc.type.shape, exp.result.type.dtype)
    shifted = ew(TileOp.SUB, [xc, ew(TileOp.BROADCAST, [not_inf(m)], xc.type)], xc.type)
    e = ew(TileOp.EXP, [shifted], et)
    s_r = b.create(TileOp.REDUCE, [e], [ft], r2.attrs, loc=loc).result
    m32 = m if mt.dtype == f32 else ew(TileOp.CAST, [m], ft)
    big_m, total = b.create(TileOp.CLUSTER_SOFTMAX, [m32, s_r], [ft, ft], ClusterAttrs(ctas), loc=loc).results
    scale = ew(TileOp.EXP, [ew(TileOp.SUB, [m32, not_inf(big_m)], ft)], ft)
    if et.dtype != f32:
        scale = ew(TileOp.CAST, [scale], ir.TileType(mt.shape, et.dtype))
    chunk.done[exp.result] = ew(TileOp.MUL, [e, ew(TileOp.BROADCAST, [scale], et)], et)
    if mt.dtype != f32:
        big_m = ew(TileOp.CAST, [big_m], mt)
    if st.dtype != f32:
        total = ew(TileOp.CAST, [total], st)
    big_m.hint, total.hint = r1.result.hint, r2.result.hint
    return big_m, total
