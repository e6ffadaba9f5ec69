"""Compute a tile transposed instead of transposing it in registers, when a DOT reads it as
``x.T``.

    sink_transposes(fn) -> fn

FlashAttention's backward is often written as the forward is, ``S = Q Kᵀ``, and then reads
``p.T`` and ``ds.T`` in ``dV += Pᵀ dO`` and ``dK += dSᵀ Q``.  A transpose of a tile computed
in registers has no tensor-core form: the DOT ran on mma.sync behind a layout conversion.
Computed transposed from the start, ``Sᵀ = K Qᵀ`` (FlashAttention-2's own form), ``Pᵀ`` and
``dSᵀ`` come out of their DOTs in the layout the next DOTs read, and every DOT can take wgmma::

    s = dot(q, kᵀ) * c;  p = where(keep, exp(s - m[:, None]), 0);  dot(p.T, do)
    ->  sᵀ = dot(k, qᵀ) * c;  pᵀ = where(keepᵀ, exp(sᵀ - m[None, :]), 0);  dot(pᵀ, do)

A root is a ``TRANS`` (perm (1, 0)) of a 2-D tile computed in the same block whose readers are
DOT operands (through casts).  The pass gathers the tiles that would be computed transposed:
the root's operand, and, upward, operands of gathered elementwise ops, DOTs and broadcasts,
computed in that block, of which every reader is a gathered op or a ``TRANS`` of it.  Everything
else a gathered op reads must transpose for free: a transpose (its input), a scalar, a constant
or splat, a tile with a unit dim (a reshape: ``m[:, None]`` becomes ``m[None, :]``), a broadcast
of one, or a loaded tile read by a DOT (a transposed load: the ring copies it N-major).  If
anything else is read, nothing is rewritten (a transpose would only move, or multiply).  Then
each gathered op is made again with its result transposed (``dot(a, b, c)ᵀ = dot(bᵀ, aᵀ, cᵀ)``),
the ``TRANS`` readers read the new tiles, and the old ops, now unread, are removed.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import ELEMENTWISE_OPS, PermAttrs, TileOp, TileType
from tilejit.passes.dce import dce

# The switch (benchmarks/switch_probe.py): False leaves every transpose where the user wrote it.
SINK_TRANSPOSES = True
_GATHERED = ELEMENTWISE_OPS | {TileOp.DOT, TileOp.BROADCAST}


def sink_transposes(fn: ir.Function) -> ir.Function:
    if SINK_TRANSPOSES and _walk(fn.body):
        dce(fn)                                  # the user's transposes of loads the DOTs no longer read
    return fn


def _walk(block: ir.Block) -> bool:
    sunk = False
    for o in list(block.ops):
        for r in o.regions:
            sunk = _walk(r) or sunk
    changed = True
    while changed:
        changed = False
        for root in [o for o in block.ops if _is_root(o, block)]:
            if root in block.ops and _sink(block, root):
                changed = sunk = True
                break
    return sunk


def _is_2d_trans(o: ir.Operation) -> bool:
    return o.op is TileOp.TRANS and tuple(o.attrs.perm) == (1, 0) and len(o.result.type.shape) == 2


def _is_tile(v: ir.Value) -> bool:
    return isinstance(v.type, TileType)


def _is_root(o: ir.Operation, block: ir.Block) -> bool:
    """A transpose of a tile computed in ``block`` whose readers are DOT operands, through casts."""
    if not _is_2d_trans(o):
        return False
    src = o.operands[0].owner
    if src is None or src not in block.ops or src.op not in _GATHERED:
        return False
    uses = ir.users(block)

    def to_dots(v: ir.Value) -> bool:
        readers = uses.get(v, [])
        return bool(readers) and all(
            (r.op is TileOp.DOT and v in r.operands[:2] and v not in r.operands[2:])
            or (r.op is TileOp.CAST and to_dots(r.result)) for r in readers)
    return to_dots(o.result)


def _unit_dim(v: ir.Value) -> bool:
    return _is_tile(v) and len(v.type.shape) == 2 and 1 in v.type.shape


def _sink(block: ir.Block, root: ir.Operation) -> bool:
    uses = ir.users(block)
    in_block = set(block.ops)
    gathered: list[ir.Operation] = []           # ops whose results are computed transposed
    candidates = [root.operands[0].owner]
    while candidates:                            # upward: every computed operand of a gathered op
        o = candidates.pop()
        if o in gathered:
            continue
        gathered.append(o)
        for v in o.operands:
            src = v.owner
            if src is not None and src in in_block and src.op in _GATHERED and _is_tile(v) \
                    and len(v.type.shape) == 2 and not _unit_dim(v) and not _free(v, o):
                candidates.append(src)
    # drop ops with a reader that is neither gathered nor a transpose, until none is left
    while True:
        kept = set(gathered)
        bad = [o for o in gathered if any(not (r in kept or _is_2d_trans(r)) for r in uses.get(o.result, []))]
        if not bad:
            break
        gathered = [o for o in gathered if o not in bad]
    if root.operands[0].owner not in gathered:
        return False
    kept = set(gathered)
    for o in gathered:                           # what the rest reads must transpose for free
        for v in o.operands:
            if not (v.owner in kept or not _is_tile(v) or _free(v, o)):
                return False
    _rewrite(block, [o for o in block.ops if o in kept], uses)
    return True


def _free(v: ir.Value, reader: ir.Operation) -> bool:
    """``vᵀ`` costs nothing where ``reader`` reads it."""
    src = v.owner
    if src is None:
        return False                             # a block argument: a loop-carried tile
    if _is_2d_trans(src) or src.op in (TileOp.CONSTANT, TileOp.SPLAT) or _unit_dim(v):
        return True
    if src.op is TileOp.BROADCAST and _unit_dim(src.operands[0]):
        return True
    while src is not None and src.op is TileOp.RESHAPE:
        src = src.operands[0].owner
    return src is not None and src.op is TileOp.LOAD and reader.op is TileOp.DOT


def _transposed_type(t: TileType) -> TileType:
    rows, cols = t.shape
    return TileType((cols, rows), t.dtype)


def _rewrite(block: ir.Block, ops: list[ir.Operation], uses: dict) -> None:
    new_of: dict[ir.Value, ir.Value] = {}

    def insert(before: ir.Operation, op, operands, result_type, attrs, loc) -> ir.Value:
        made = ir.Operation(op, operands, [result_type], attrs, None, loc)
        block.ops.insert(block.ops.index(before), made)
        return made.result

    def transposed(v: ir.Value, at: ir.Operation) -> ir.Value:
        if v in new_of:
            return new_of[v]
        if not _is_tile(v):
            return v
        src = v.owner
        if _is_2d_trans(src):
            return src.operands[0]
        if src.op in (TileOp.CONSTANT, TileOp.SPLAT):
            return insert(at, src.op, src.operands, _transposed_type(v.type), src.attrs, src.loc)
        if _unit_dim(v):                         # (m, 1) <-> (1, m): the same elements in order
            return unit_transposed(v, at)
        if src.op is TileOp.BROADCAST:
            inner = transposed(src.operands[0], at)
            return insert(at, TileOp.BROADCAST, [inner], _transposed_type(v.type), src.attrs, src.loc)
        return insert(at, TileOp.TRANS, [v], _transposed_type(v.type), PermAttrs((1, 0)), src.loc)

    def unit_transposed(v: ir.Value, at: ir.Operation) -> ir.Value:
        """A (m, 1) tile as (1, m), rebuilt from its 1-D source where it is one (``rows[:, None]
        < n`` becomes ``rows[None, :] < n``: the form ``uniform_masks`` recognises)."""
        src = v.owner
        if src is not None and src.op is TileOp.RESHAPE and len(src.operands[0].type.shape) == 1:
            return insert(at, TileOp.RESHAPE, [src.operands[0]], _transposed_type(v.type), None, src.loc)
        if src is not None and src.op in (TileOp.CONSTANT, TileOp.SPLAT):
            return insert(at, src.op, src.operands, _transposed_type(v.type), src.attrs, src.loc)
        if src is not None and src.op in ELEMENTWISE_OPS and all(
                not _is_tile(x) or (_unit_dim(x) and x.type.shape == v.type.shape) for x in src.operands):
            operands = [unit_transposed(x, at) if _is_tile(x) else x for x in src.operands]
            return insert(at, src.op, operands, _transposed_type(v.type), src.attrs, src.loc)
        return insert(at, TileOp.RESHAPE, [v], _transposed_type(v.type), None, src.loc if src else None)

    for o in ops:
        if o.op is TileOp.DOT:
            a, b, acc = o.operands
            operands = [transposed(b, o), transposed(a, o), transposed(acc, o)]
        else:
            operands = [transposed(v, o) for v in o.operands]
        new_of[o.result] = insert(o, o.op, operands, _transposed_type(o.result.type), o.attrs, o.loc)
        new_of[o.result].hint = o.result.hint
    for o in ops:                                # the transposes now read the new tiles
        for t in [r for r in uses.get(o.result, []) if _is_2d_trans(r)]:
            for reader in block.walk():
                reader.operands = [new_of[o.result] if x is t.result else x for x in reader.operands]
            block.ops.remove(t)
    live = True
    while live:                                  # the old ops, unread now
        live = False
        read = {x for r in block.walk() for x in r.operands}
        for o in [x for x in block.ops if x in ops]:
            if o.result not in read:
                block.ops.remove(o)
                live = True
