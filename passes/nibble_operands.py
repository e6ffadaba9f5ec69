"""4-bit B operands taken into mma fragments straight from their packed bytes.

    nibble_source(dot) -> NibbleSource | None       (``plan_dots`` asks it once per mma.sync DOT)
    pin_nibble_operands(fn, assigner, pin_row) -> bool       (``assign_layouts``)

A W4A16 GEMM's B is ``tj.unpack`` of a uint8 (K x N/2) tile (two 4-bit values a byte along N),
cast to bfloat16 and shifted (``q.to(bf16) - z``).  Without this, the unpacked values are
stored to shared memory as bfloat16 and read back with ``ldmatrix.trans``, two bytes of shared
traffic and a handful of instructions a weight.  Here the DOT takes the interleaved fragment
layouts of ``mma_layouts.nibble_*`` instead: each lane holds 4 neighbouring columns of 2 rows
of each k16 step, so the packed bytes it needs are 16-bit pairs of bytes (what ``ldmatrix.trans``
of the packed tile delivers), every elementwise op between the bytes and the DOT stays inside
the thread, and the accumulator has its columns interleaved the same way
(``nibble_c_layout``: the epilogue converts or stores it like any layout).

The chain must be: B <- elementwise ops (their other tile operands broadcast rows, or values
built from constants) and unit-dim reshapes <- the reshape ``(K, N/2, 2) -> (K, N)`` that
``tj.unpack`` ends with <- elementwise ops, broadcasts and unit-dim reshapes <- a uint8 tile of
(K, N/2) (a load), every value of it used only inside the chain, and A has at most
``NIBBLE_ROWS`` rows.  ``NIBBLE_B`` switches it off.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import dtypes as D
from tilejit import ir
from tilejit.ir import ELEMENTWISE_OPS, TileOp
from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML

NIBBLE_B = True
# DOTs of at most this many rows (decode: M 1-16 padded to 16).  With 64 rows (mma.sync, TILEJIT_WGMMA=0)
# the whole K tile of B and a 64-row accumulator live in registers at once: 255 registers, and on the
# H100 70-291 us at M64 N = K = 8192 against 46.6 for the default wgmma (2026-12-06): such DOTs keep
# the staged B.
NIBBLE_ROWS = 32
_PASS = frozenset(ELEMENTWISE_OPS) | {TileOp.BROADCAST, TileOp.RESHAPE}


@dataclass(frozen=True)
class NibbleSource:
    merge: ir.Operation            # the RESHAPE (K, N/2, 2) -> (K, N) of ``tj.unpack``
    packed: ir.Value               # the uint8 (K, N/2) tile (modulo unit dims) it unpacks


def _is_merge(o: ir.Operation, shape) -> bool:
    if o is None or o.op is not TileOp.RESHAPE:
        return False
    src = o.operands[0].type.shape
    return len(src) == 3 and tuple(o.result.type.shape) == tuple(shape) and src[-1] == 2 \
        and src[0] == shape[0] and 2 * src[1] == shape[1]


def _unit_squeezed(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


def nibble_source(dot: ir.Operation) -> NibbleSource | None:
    """The unpacking that DOT ``dot``'s B comes from (see the module docstring), or None."""
    if not NIBBLE_B or dot.operands[0].type.shape[0] > NIBBLE_ROWS:
        return None
    b = dot.operands[1]
    shape = tuple(b.type.shape)
    k, n = shape
    merge, todo, seen = None, [b], set()
    while todo:                                   # B's side of the merge: same-shape elementwise ops
        v = todo.pop()
        if v in seen or v.owner is None:
            continue
        seen.add(v)
        o = v.owner
        if _is_merge(o, shape):
            if merge is not None and merge is not o:
                return None
            merge = o
        elif o.op in ELEMENTWISE_OPS and o.op is not TileOp.WHERE or o.op is TileOp.RESHAPE \
                and _unit_squeezed(o.operands[0].type.shape) == _unit_squeezed(v.type.shape):
            todo += [x for x in o.operands if isinstance(x.type, ir.TileType) and x.type.shape == v.type.shape]
    if merge is None:
        return None
    packed, todo, seen = None, [merge.operands[0]], set()
    while todo:                                   # the bytes' side: down to a uint8 (K, N/2) tile
        v = todo.pop()
        if v in seen or not isinstance(v.type, ir.TileType):
            continue
        seen.add(v)
        if v.type.dtype == D.uint8 and _unit_squeezed(v.type.shape) == (k, n // 2) \
                and (v.owner is None or v.owner.op is TileOp.LOAD):
            if packed is not None and packed is not v:
                return None
            packed = v
            continue
        o = v.owner
        if o is not None and o.op in _PASS:
            todo += list(o.operands)
    return None if packed is None else NibbleSource(merge, packed)


def pin_nibble_operands(fn: ir.Function, assigner, pin_row) -> bool:
    """Pin the layouts of each nibble DOT's B chain (``plans.DotPlan`` configs with
    ``nibbles``): ``nibble_b_layout`` from B down to the cast of the unpacked values, and the
    unpacking itself in the layouts that keep every byte's two nibbles in its thread
    (``nibble_bytes_layout`` for the bytes).  Returns whether anything changed.  Where a chain
    does not fit (a value used outside it), nothing is pinned and the DOT converts B.
    ``pin_row(v, layout, found)``: ``assign_layouts``' rule for a row broadcast into B (a zero
    point per column, loaded in the loop or carried in by ``prefetch_loads``)."""
    changed = False
    users = ir.users(fn)
    carried_by = {o.regions[0].ops[-1]: o.regions[0].args[1:] for o in fn.walk() if o.op is TileOp.FOR}
    for o in fn.walk():
        cfg = assigner.dot_plans.config(o) if o.op is TileOp.DOT else None
        if cfg is None or not getattr(cfg, "nibbles", False):
            continue
        source = nibble_source(o)
        if source is None:
            continue
        found: dict[ir.Value, L.Layout] = {}
        b = ML.nibble_b_layout(cfg.kind, (cfg.k, cfg.n), cfg.warps)
        merged = _merged_bytes_layout(cfg)
        ok = _pin_b_side(o.operands[1], b, source, merged, assigner, found, pin_row) \
            and _pin_inside(source.merge.operands[0], L.split_last(merged, 2), assigner, found)
        if not ok or any(v in assigner.pinned and assigner.pinned[v] != lay for v, lay in found.items()):
            continue
        if any(u.op is not TileOp.DOT and not any(r in found for r in u.results) and not _carried_in(v, u, carried_by, found)
               for v in found for u in users.get(v, [])):
            continue                              # some value of the chain is used elsewhere
        changed = changed or any(assigner.layouts.get(v) != lay for v, lay in found.items())
        assigner.pinned.update(found)
        if source.packed.owner is not None:       # ``row_rings`` reads it with ldmatrix.trans
            fn.meta.setdefault("nibble_loads", {})[source.packed.owner] = cfg
    return changed


def _carried_in(v, user, carried_by, found) -> bool:
    """``user`` is the YIELD that carries ``v`` into a loop arg of the chain (a zero-point row
    that ``prefetch_loads`` loads an iteration ahead)."""
    args = carried_by.get(user)
    return args is not None and all(a in found for a, x in zip(args, user.operands) if x is v)


def _merged_bytes_layout(cfg) -> L.Layout:
    """The unpacked (K, N) tile in the byte layout's register order (each byte's low nibble,
    then its high one): ``tj.unpack``'s merge moves no data in it."""
    w = ML.nibble_bytes_layout((cfg.k, cfg.n // 2), cfg.warps)
    return L.merged_last(L.expanded_last(L.unit_dims_changed(w, (cfg.k, cfg.n // 2, 1)), 2))


def _deferred_constant(v: ir.Value, assigner, depth: int = 16) -> bool:
    """Built from constants alone (lowering materialises it in whatever layout a use wants)."""
    if not isinstance(v.type, ir.TileType) or v.type.shape == ():
        return True
    if v not in assigner.deferred or depth == 0:
        return False
    return v.owner is None or all(_deferred_constant(x, assigner, depth - 1) for x in v.owner.operands)


def _pin_b_side(v, lay, source, merged, assigner, found, pin_row) -> bool:
    if v in found:
        return found[v] == lay
    if v is source.merge.result:
        found[v] = merged
        return True
    if _deferred_constant(v, assigner):
        return True
    o = v.owner
    if o is None:
        return False
    if o.op is TileOp.RESHAPE:
        inner = L.unit_dims_changed(lay, o.operands[0].type.shape)
        if inner is None or not _pin_b_side(o.operands[0], inner, source, merged, assigner, found, pin_row):
            return False
    elif o.op in ELEMENTWISE_OPS and o.op is not TileOp.WHERE:
        for x in o.operands:
            if not isinstance(x.type, ir.TileType) or x.type.shape == () or _deferred_constant(x, assigner):
                continue
            if x.type.shape == v.type.shape and (x.owner is None or x.owner.op is not TileOp.BROADCAST):
                if not _pin_b_side(x, lay, source, merged, assigner, found, pin_row):
                    return False
            elif x.owner is None or x.owner.op is not TileOp.BROADCAST or not pin_row(x, lay, found):
                return False            # (a row broadcast in, a zero point per column: loaded collapsed,
                # or carried ahead by prefetch_loads: ``assign_layouts``' rule for broadcast loads)
    else:
        return False
    found[v] = lay
    return True


def _pin_inside(v, lay, assigner, found) -> bool:
    """``v`` and what it is computed from in ``lay`` (collapsed through broadcasts, re-dimmed
    through unit-dim reshapes), down to loads: the unpacking from the merge's source (K, N/2, 2)
    to the packed bytes (each byte's two nibbles stay in the thread that holds the byte), or a
    row broadcast into B (``z + 128``)."""
    if v in found:
        return found[v] == lay
    if _deferred_constant(v, assigner):
        return True
    o = v.owner
    if o is None:
        return False
    if o.op is TileOp.LOAD:
        found[v] = lay
        return True
    if o.op is TileOp.BROADCAST:
        src = o.operands[0]
        dims = [d for d, (a, b) in enumerate(zip(src.type.shape, v.type.shape)) if a != b]
        inner = L.unit_dims_changed(L.collapsed(lay, dims), src.type.shape)
    elif o.op is TileOp.RESHAPE:
        inner = L.unit_dims_changed(lay, o.operands[0].type.shape)
    elif o.op in ELEMENTWISE_OPS:
        inner = None
        for x in o.operands:
            if not isinstance(x.type, ir.TileType) or x.type.shape == () or _deferred_constant(x, assigner):
                continue
            if x.type.shape != v.type.shape or not _pin_inside(x, lay, assigner, found):
                return False
        found[v] = lay
        return True
    else:
        return False
    if inner is None or not _pin_inside(o.operands[0], inner, assigner, found):
        return False
    found[v] = lay
    return True
