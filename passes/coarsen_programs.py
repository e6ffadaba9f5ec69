"""Several programs one after another in one CTA, their loads issued together: a row kernel
(one row per program, straight-line code) leaves its loads' latency exposed between rows, since
a CTA starts the next row only when it is done with this one.  This SIMT pass makes one CTA run
``k`` consecutive programs along grid axis 0 with the same threads, as ``k`` copies of the body:

    the loads of copy 0, of copy 1, ..., then the rest of copy 0, the rest of copy 1, ...

so the next rows' bytes are in flight while this row reduces.  The copies' address arithmetic
and loads (the longest prefix of each copy made only of such ops) move ahead; the rest keeps its
order.  Programs run in no set order on a GPU, so a later program's loads may pass an earlier
one's stores.

    coarsen_programs(fn, k) -> fn          coarsenable(fn) -> bool

The geometry is ``pack_programs``': ``program_id(0)`` of copy ``j`` is ``blockIdx.x * k + j``,
the launch runs ``ceil(grid0 / k)`` CTAs and passes ``grid0`` as one more parameter, and the
copies past it store nothing.  Each copy has its own shared buffers (``plan_shared_memory``
runs after this pass, so they may share bytes where their live ranges allow, and
``insert_barriers`` orders them).  Only straight-line kernels without tensor cores or async
copies are coarsened.
"""
from __future__ import annotations

import dataclasses

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.abi import ParamDesc, ParamKind
from tilejit.ir import TileOp
from tilejit.simt import RegType, SimtOp

I32 = D.int32
# Programs per CTA for the kernels pack_programs does not pack (1: off).  Measured (H200,
# 2026-12-04, switch_probe.py, ratio to copy, 1 / 2 / 4): softmax fp32 16K 0.77 / 0.87 / 0.52
# (32 warps, where one CTA per SM is all there is; 2 spills 32 bytes), but bf16 softmax 8K
# 0.86 / 0.82 / 0.59, bf16 RMSNorm 4K 0.84 / 0.64 / 0.76, fp32 RMSNorm 8K 0.97 / 0.60 / 0.29: the
# copies' registers halve the CTAs an SM holds.  Off until the next row is prefetched without
# holding a second row in registers (a persistent loop with cp.async into shared memory).
COARSEN = 1
# ops that may move ahead with the loads: no memory writes, no shared memory, no barriers
_AHEAD = (SimtOp.CONSTANT, SimtOp.PARAM, SimtOp.BLOCK_ID, SimtOp.GRID_DIM, SimtOp.THREAD_ID, SimtOp.SPLAT,
          SimtOp.ELEMENTWISE, SimtOp.GATHER, SimtOp.CONCAT, SimtOp.LOAD_GLOBAL, SimtOp.SHARED_ALLOC)
_WRITES = (SimtOp.STORE_GLOBAL, SimtOp.ATOMIC_GLOBAL)
_REFUSED = (SimtOp.FOR, SimtOp.IF, SimtOp.WHILE, SimtOp.LDMATRIX, SimtOp.MMA, SimtOp.CP_ASYNC,
            SimtOp.CP_ASYNC_COMMIT, SimtOp.CP_ASYNC_WAIT, SimtOp.WGMMA, SimtOp.WGMMA_FENCE,
            SimtOp.WGMMA_COMMIT, SimtOp.WGMMA_WAIT, SimtOp.FENCE_PROXY_ASYNC, *simt.TMA_OPS,
            *simt.TMA_STORE_OPS, SimtOp.CLUSTER_BARRIER,      # (a cluster's CTAs run one program together)
            SimtOp.GRID_DEPENDENCY)          # (loads moved ahead could pass a griddepcontrol.wait)


def coarsenable(fn: ir.Function) -> bool:
    """Straight-line code with no tensor cores or async copies, not packed, with a load."""
    ops = list(fn.walk())
    return (fn.meta.programs_per_cta == 1 and not any(o.op in _REFUSED for o in ops)
            and any(o.op is SimtOp.LOAD_GLOBAL for o in ops))


def _buffers(fn: ir.Function) -> int:
    return 1 + max((o.attrs.buffer for o in fn.walk() if o.op is SimtOp.SHARED_ALLOC), default=-1)


def coarsen_programs(fn: ir.Function, k: int) -> ir.Function:
    """``k`` programs of ``fn`` per CTA, one after another (see the module docstring)."""
    if k == 1 or not coarsenable(fn):
        return fn
    loc, head = fn.meta.loc, []

    def emit(op, operands, attrs=None, dtype=I32):
        o = ir.Operation(op, operands, [RegType(dtype, 1)], attrs, loc=loc)
        head.append(o)
        return o.result
    fn.meta.params = list(fn.meta.params) + [ParamDesc(ParamKind.SCALAR, len(fn.arg_names), None, I32)]
    count = emit(SimtOp.PARAM, [], ir.AxisAttrs(len(fn.meta.params) - 1))
    block = emit(SimtOp.BLOCK_ID, [], ir.AxisAttrs(0))
    base = emit(SimtOp.ELEMENTWISE, [block, emit(SimtOp.CONSTANT, [], simt.VectorConstAttrs((k,)))],
                simt.EwAttrs(TileOp.MUL))
    nbuf = _buffers(fn)
    aheads, rests = [], []
    for j in range(k):
        pid = emit(SimtOp.ELEMENTWISE, [base, emit(SimtOp.CONSTANT, [], simt.VectorConstAttrs((j,)))],
                   simt.EwAttrs(TileOp.ADD))
        real = emit(SimtOp.ELEMENTWISE, [pid, count], simt.EwAttrs(TileOp.LT), dtype=D.bool_)
        ops = _copy(fn.body.ops, pid, count, real, j * nbuf)
        cut = next((i for i, o in enumerate(ops) if o.op not in _AHEAD), len(ops))
        aheads += ops[:cut]
        rests += ops[cut:]
    fn.body.ops = head + aheads + rests
    fn.meta.programs_per_cta = k
    fn.meta.serial_programs = True
    return fn


def _copy(ops: list, pid: ir.Value, count: ir.Value, real: ir.Value, shift: int) -> list:
    """The ops of one copy: program id ``pid``, grid size ``count``, buffers moved by ``shift``,
    and its writes kept only when ``real`` (a program past the grid stores nothing)."""
    values: dict[ir.Value, ir.Value] = {}
    out = []
    splats: dict[int, ir.Value] = {}
    for o in ops:
        if o.op in (SimtOp.BLOCK_ID, SimtOp.GRID_DIM) and o.attrs.axis == 0:
            values[o.result] = pid if o.op is SimtOp.BLOCK_ID else count
            continue
        attrs = o.attrs
        if shift and attrs is not None and hasattr(attrs, "buffer") and isinstance(attrs.buffer, int):
            attrs = dataclasses.replace(attrs, buffer=attrs.buffer + shift)
        new = ir.Operation(o.op, [values.get(x, x) for x in o.operands], [r.type for r in o.results], attrs, [], o.loc)
        for r, nr in zip(o.results, new.results):
            nr.hint = r.hint
            values[r] = nr
        if o.op in _WRITES or o.op in (SimtOp.PRINT, SimtOp.ASSERT):
            at = 3 if o.op in _WRITES else len(new.operands) - 1
            mask = new.operands[at]
            n = mask.type.n
            if n not in splats:
                splat = ir.Operation(SimtOp.SPLAT, [real], [RegType(D.bool_, n)], None, loc=o.loc) if n > 1 else None
                if splat is not None:
                    out.append(splat)
                splats[n] = splat.result if splat is not None else real
            both = ir.Operation(SimtOp.ELEMENTWISE, [mask, splats[n]], [mask.type], simt.EwAttrs(TileOp.AND), loc=o.loc)
            out.append(both)
            new.operands[at] = both.result
        out.append(new)
    return out
