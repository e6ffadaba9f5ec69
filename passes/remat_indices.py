"""Recompute a global store's (or atomic's) per-element indices and mask next to it, from a fresh
read of the thread id.  Lowering computes a tile's column indices once (``tid``-derived integers: one
register per element) and a row kernel's load and store use the same ones, so LLVM keeps them
in registers from the first load to the last store, across every reduction in between: 16 of a
softmax's 55 registers at 8192 bf16 columns and 16 warps.  Cloning the store's index slice
with a ``THREAD_ID`` that is read again (``VolatileAttrs``: inline asm that LLVM may not merge
with the first read) lets both the slice and its reuse die early; the clone costs one integer op
per element, and with the group-wide bounds check a full row needs only one compare per vector.

    remat_indices(fn) -> fn                 (SIMT IR, in place)

Only pure integer and boolean ops that depend on ``THREAD_ID`` are cloned (``CHEAP``); values
that do not depend on the thread (parameters, block ids, loop counters) and anything computed
from data stay shared.  A kernel whose stores need no ``THREAD_ID`` is left as it is, and so is
one that holds ``CROWDED`` or more row loads in registers (not persistent: a layernorm's x,
weight and bias): measured on the H200, the float32 layernorm at 8192 columns, already at the
occupancy hint's register cap, spilled 96 bytes instead of 56 and lost 9%, while softmax in
16 bits gained 4-11% and the persistent layernorms 3-9%.  The pass runs after
``persist_programs``, whose loop body reads the thread id afresh already.
"""
from __future__ import annotations

from tilejit import dtypes, ir, simt
from tilejit.ir import TileOp
from tilejit.simt import SimtOp

# integer/boolean elementwise ops cheap enough to compute twice (no division: a call or many ops)
CHEAP_EW = frozenset({TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.SHL,
                      TileOp.SHR, TileOp.LT, TileOp.LE, TileOp.GT, TileOp.GE, TileOp.EQ, TileOp.NE,
                      TileOp.MINIMUM, TileOp.MAXIMUM, TileOp.WHERE, TileOp.CAST, TileOp.NEG, TileOp.INVERT})
CHEAP = (SimtOp.SPLAT, SimtOp.GATHER, SimtOp.CONSTANT)
# the writes whose (ptr, offsets, value, mask[, cmp]) get their offsets and mask recomputed
WRITES = (SimtOp.STORE_GLOBAL, SimtOp.ATOMIC_GLOBAL)
# The switch (benchmarks/switch_probe.py): False leaves every kernel as lowering made it.
REMAT = True
# Row loads (at least ROW_REGISTERS registers each) held in registers past which a kernel is left alone
CROWDED, ROW_REGISTERS = 3, 16


def _cheap(o: ir.Operation) -> bool:
    if o.op in CHEAP:
        return True
    if o.op is SimtOp.ELEMENTWISE and o.attrs.op in CHEAP_EW:
        return not (o.result.type.dtype.is_float or any(x.type.dtype.is_float for x in o.operands))
    return False


def remat_indices(fn: ir.Function) -> ir.Function:
    rows = sum(o.op is SimtOp.LOAD_GLOBAL and o.result.type.n >= ROW_REGISTERS for o in fn.walk())
    if rows >= CROWDED and not fn.meta.persistent:
        return fn
    defs = {r: o for o in fn.walk() for r in o.results}
    thread = {}                                 # value -> depends on THREAD_ID through CHEAP ops only

    def of_thread(v) -> bool:
        if v not in thread:
            o = defs.get(v)
            if o is None:
                thread[v] = False
            elif o.op is SimtOp.THREAD_ID:
                thread[v] = True
            else:
                thread[v] = _cheap(o) and any(of_thread(x) for x in o.operands) and all(
                    of_thread(x) or not _reads_thread(x) for x in o.operands)
        return thread[v]

    reads: dict = {}

    def _reads_thread(v) -> bool:
        """Does ``v`` depend on THREAD_ID at all (through any op)?  Iterative: a store's mask may
        hang off a long chain of float math."""
        stack = [v]
        while stack:
            x = stack[-1]
            if x in reads:
                stack.pop()
                continue
            o = defs.get(x)
            if o is None or o.op is SimtOp.THREAD_ID:
                reads[x] = o is not None
                stack.pop()
                continue
            todo = [y for y in o.operands if y not in reads]
            if todo:
                stack += todo
                continue
            reads[x] = any(reads[y] for y in o.operands)
            stack.pop()
        return reads[v]

    def rewrite(block: ir.Block) -> None:
        out = []
        for o in block.ops:
            for r in o.regions:
                rewrite(r)
            if o.op in WRITES and any(of_thread(x) for x in (o.operands[1], o.operands[3])):
                fresh: dict = {}
                tid = ir.Operation(SimtOp.THREAD_ID, [], [simt.RegType(dtypes.int32, 1)], simt.VolatileAttrs(True), loc=o.loc)
                out.append(tid)

                def clone(v):
                    if not of_thread(v):
                        return v
                    if v not in fresh:
                        src = defs[v]
                        if src.op is SimtOp.THREAD_ID:
                            fresh[v] = tid.result
                        else:
                            new = ir.Operation(src.op, [clone(x) for x in src.operands], [v.type], src.attrs, [], src.loc)
                            out.append(new)
                            fresh[v] = new.result
                    return fresh[v]
                o.operands = [o.operands[0], clone(o.operands[1]), o.operands[2], clone(o.operands[3]),
                              *o.operands[4:]]
            out.append(o)
        block.ops = out

    rewrite(fn.body)
    return fn

