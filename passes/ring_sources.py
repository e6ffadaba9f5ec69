"""Which DOT operands a pipelined loop can copy ahead into a ring of shared slots: the one rule
``plan_dots`` (through ``wgmma.qualifies``) and ``plan_loops`` share, so a DOT is planned on
wgmma only when the loads it reads will be ringed.

    ring_source(fn, multiples, dot, v, body, uses) -> RingSource | None

A source is a LOAD of the loop body whose only use is ``dot`` (seen through unit-dim reshapes
and at most one 2-D transpose, each used once), of an array with a unit-stride, 16-byte aligned
last dim, ``other`` 0, a last offset that is a multiple of 16 bytes, and offsets computed from
the induction variable and loop-invariant values only, or from loads of at most ``SMALL_LOAD``
elements in a body that writes no memory (a paged cache's page number: the copy issued ahead
reads the table ahead too).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes.assign_layouts import array_spec, is_tile


@dataclass(frozen=True)
class RingSource:
    load: ir.Operation
    chain: tuple[ir.Operation, ...]        # the reshapes / transpose between the load and the operand
    n_major: bool                          # through a transpose: B lands as B^T (N x K)
    offsets: tuple[ir.Operation, ...]      # the body ops computing the load's offsets


def ring_source(fn: ir.Function, multiples, dot: ir.Operation, v: ir.Value, body: ir.Block,
                uses: dict) -> RingSource | None:
    """DOT ``dot``'s operand ``v`` as a load the pipeliner can copy ahead, or None
    (``multiples``: ``lower_memory.KnownMultiples`` of ``fn``; ``uses``: ``ir.users(body)``)."""
    if uses.get(v) != [dot]:
        return None
    found = _load_chain(v, uses, body)
    if found is None:
        return None
    load, chain, n_major = found
    offsets = ringable_offsets(fn, multiples, load, body)
    return None if offsets is None else RingSource(load, tuple(chain), n_major, tuple(offsets))


def ringable_offsets(fn: ir.Function, multiples, load: ir.Operation, body: ir.Block) -> list[ir.Operation] | None:
    """The body ops computing ``load``'s offsets when a ring can copy it ahead (the array and
    offset rules above), else None."""
    spec = array_spec(fn, load.operands[0])
    if not (spec.unit_inner_stride and spec.aligned16) or (load.attrs and load.attrs.other != 0):
        return None
    if (multiples.of(load.operands[-1]) * spec.dtype.itemsize) % 16:
        return None
    return offset_slice(body, load, small_loads=True)


SMALL_LOAD = 16          # elements of a load an offset may be computed from (a page table's entry)


def offset_slice(body: ir.Block, load: ir.Operation, small_loads: bool = False) -> list[ir.Operation] | None:
    """The body ops (in order) that compute ``load``'s offsets, or None when they read a
    loop-carried value or have effects (then the load cannot be issued ahead).  With
    ``small_loads``, the offsets may also come from loads of at most ``SMALL_LOAD`` elements
    (a paged cache's page number) in a body that writes no memory: the copy issued ahead reads
    them ahead too."""
    if ir.gathers(load):
        return None                           # per-element indices: not a block a copy can fetch ahead
    small_loads = small_loads and not any(o.op in (TileOp.STORE, TileOp.ATOMIC) or o.regions for o in body.ops)

    def allowed(o: ir.Operation, v: ir.Value) -> bool:
        small = small_loads and (not is_tile(v) or v.type.numel <= SMALL_LOAD)
        return not (o.regions or (is_tile(v) and not small) or o.op in (TileOp.STORE, TileOp.ATOMIC) or
                    (o.op is TileOp.LOAD and not (small and not ir.gathers(o))))
    return body_slice(body, load.operands[1:], allowed)


def body_slice(body: ir.Block, values, allowed) -> list[ir.Operation] | None:
    """The ops of ``body``'s top level (in order) that ``values`` are computed from, or None when
    they read a loop-carried value or ``allowed(op, value)`` refuses one of them."""
    in_body = {r: o for o in body.ops for r in o.results}
    carried = set(body.args[1:])
    needed, stack = set(), list(values)
    while stack:
        v = stack.pop()
        if v in carried:
            return None
        o = in_body.get(v)
        if o is None or o in needed:
            continue
        if not allowed(o, v):
            return None
        needed.add(o)
        stack.extend(o.operands)
    return [o for o in body.ops if o in needed]


def _load_chain(v: ir.Value, uses: dict, body: ir.Block):
    """(LOAD op, ops between it and ``v``, n_major) when DOT operand ``v`` is a load seen
    through unit-dim reshapes (``tj.load(k, (b, h, n, 0), (1, 1, BN, D)).reshape(...)``) and
    at most one 2-D transpose (``tj.trans(k)``: the tile lands as B^T, n-major), each used
    once; else None."""
    chain, n_major = [], False
    while v.owner is not None and v.owner.op in (TileOp.RESHAPE, TileOp.TRANS):
        o = v.owner
        if o not in body.ops or len(uses.get(v, ())) != 1:
            return None
        if o.op is TileOp.TRANS:
            if n_major or tuple(o.attrs.perm) != (1, 0):
                return None
            n_major = True
        elif [d for d in o.operands[0].type.shape if d != 1] != [d for d in o.result.type.shape if d != 1]:
            return None
        chain.append(o)
        v = o.operands[0]
    load = v.owner
    if load is None or load.op is not TileOp.LOAD or load not in body.ops or len(uses.get(v, ())) != 1:
        return None
    return load, chain, n_major
