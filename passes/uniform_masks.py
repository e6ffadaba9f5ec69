"""Skip block masks that are all true: ``WHERE(cond, x, y)`` on tiles, where ``cond`` is built
from comparisons of index ranges (``start + arange(n) < limit``, ``cols <= rows``, ...), becomes

    all_true = <scalar bound checks>            # e.g. start_n + BN - 1 < seq_k
    r = IF(all_true) { yield x } else { <ops computing cond>; yield WHERE(cond, x, y) }

so that in FlashAttention's key loop every block except the diagonal and the ragged last one
takes the fast path without computing the mask.

A value's *range* is a pair of affine bounds (sums of scalar values times integer coefficients,
plus a constant) on its elements.  ``a < b`` holds for every element when ``max(a) < min(b)``;
the checks compare the bounds after cancelling terms common to both sides.

Assumption (as in the kernel's own index math): the bounds do not overflow their dtype.  The
bounds are the extreme element values of the compared tiles (plus constant shifts across the
comparison), so the kernel's own per-element arithmetic would already overflow when they did.
Only signed int32/int64 ranges are analysed: unsigned wrap-around makes "max of start + arange"
meaningless.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import dtypes, ir
from tilejit.ir import ConstAttrs, TileOp

# ops that only compute values from their operands, cheap to re-home into the IF's else-region
MOVABLE_OPS = ir.ELEMENTWISE_OPS | {TileOp.SPLAT, TileOp.ARANGE, TileOp.CONSTANT, TileOp.BROADCAST,
                                    TileOp.RESHAPE, TileOp.TRANS}
# ops that keep a tile's set of element values (so its range)
SAME_ELEMENTS_OPS = frozenset({TileOp.BROADCAST, TileOp.RESHAPE, TileOp.TRANS})
# a > b is b < a; a >= b is b <= a
SWAPPED = {TileOp.GT: TileOp.LT, TileOp.GE: TileOp.LE}


# ------------------------------------------------------------------------------ affine bounds
@dataclass(frozen=True)
class Affine:
    """``sum(coef * value) + const`` over scalar int values; ``terms`` maps value -> coef."""
    terms: tuple[tuple[ir.Value, int], ...]
    const: int

    def __add__(self, other: "Affine") -> "Affine":
        coefs = dict(self.terms)
        for v, c in other.terms:
            coefs[v] = coefs.get(v, 0) + c
        return Affine(tuple((v, c) for v, c in coefs.items() if c), self.const + other.const)

    def __neg__(self) -> "Affine":
        return Affine(tuple((v, -c) for v, c in self.terms), -self.const)


def constant_affine(c: int) -> Affine:
    return Affine((), c)


@dataclass(frozen=True)
class Range:
    """Every element of a tile lies in ``[lo, hi]``."""
    lo: Affine
    hi: Affine


def _signed_index(t) -> bool:
    return isinstance(t, ir.TileType) and t.dtype.kind == "i" and t.dtype.bits in (32, 64)


def range_of(v: ir.Value) -> Range | None:
    """The affine range of int tile ``v``'s elements, or None when ``v`` is not an iota range."""
    o = v.owner
    if o is None or not _signed_index(v.type):
        return None
    if o.op is TileOp.ARANGE:
        start = o.attrs.value
        return Range(constant_affine(start), constant_affine(start + v.type.shape[0] - 1))
    if o.op is TileOp.CONSTANT and type(o.attrs.value) is int:
        return Range(constant_affine(o.attrs.value), constant_affine(o.attrs.value))
    if o.op is TileOp.SPLAT:
        s = o.operands[0]
        if s.type != ir.scalar(v.type.dtype):
            return None
        if s.owner is not None and s.owner.op is TileOp.CONSTANT and type(s.owner.attrs.value) is int:
            return Range(constant_affine(s.owner.attrs.value), constant_affine(s.owner.attrs.value))
        point = Affine(((s, 1),), 0)
        return Range(point, point)
    if o.op in SAME_ELEMENTS_OPS:
        return range_of(o.operands[0])
    if o.op in (TileOp.ADD, TileOp.SUB):
        a, b = range_of(o.operands[0]), range_of(o.operands[1])
        if a is None or b is None:
            return None
        if o.op is TileOp.ADD:
            return Range(a.lo + b.lo, a.hi + b.hi)
        return Range(a.lo + -b.hi, a.hi + -b.lo)
    return None


# ------------------------------------------------------------------------------ mask analysis
@dataclass(frozen=True)
class Check:
    """One scalar condition: ``lhs OP 0`` for affine ``lhs`` in ``dtype`` (OP is LT or LE), or
    an existing scalar bool ``value``."""
    op: TileOp | None = None
    lhs: Affine | None = None
    dtype: dtypes.DType | None = None
    value: ir.Value | None = None


class CheckNeverPasses(Exception):
    """A bound check is statically false, so the guard could never take the fast path (the
    bounds are conservative: the mask itself may still be all true, the WHERE just stays)."""


def checks_of(cond: ir.Value) -> list[Check] | None:
    """Scalar checks whose conjunction implies "every element of bool tile ``cond`` is true";
    None when ``cond`` is not built from recognised pieces.  Statically true checks are
    dropped (an empty list: the mask is always all true); a statically false one raises
    CheckNeverPasses."""
    o = cond.owner
    if o is None:
        return None
    if o.op is TileOp.AND and cond.type.dtype.is_bool:
        a, b = checks_of(o.operands[0]), checks_of(o.operands[1])
        return None if a is None or b is None else a + b
    if o.op in SAME_ELEMENTS_OPS:
        return checks_of(o.operands[0])
    if o.op is TileOp.SPLAT and o.operands[0].type == ir.scalar(dtypes.bool_):
        return [Check(value=o.operands[0])]
    if o.op in (TileOp.LT, TileOp.LE, TileOp.GT, TileOp.GE):
        return _compare_checks(o)
    return None


def _compare_checks(o: ir.Operation) -> list[Check] | None:
    """``a < b`` on every element if ``hi(a) - lo(b) < 0`` (LE: ``<= 0``); exact (iff) when
    the bounds are attained, as for ``start + arange`` against a splat or another iota."""
    a, b = o.operands
    op = o.op
    if op in SWAPPED:
        a, b, op = b, a, SWAPPED[op]
    ra, rb = range_of(a), range_of(b)
    if ra is None or rb is None:
        return None
    lhs = ra.hi + -rb.lo
    if not lhs.terms:                  # both bounds constant after cancelling: decide now
        if (lhs.const < 0) if op is TileOp.LT else (lhs.const <= 0):
            return []
        raise CheckNeverPasses
    return [Check(op, lhs, a.type.dtype)]


# ------------------------------------------------------------------------ scalar materialising
class ScalarEmitter:
    """Builds the scalar ops of the checks into ``ops``, all at one ``loc``."""

    def __init__(self, loc: ir.Loc):
        self.b = ir.Builder(ir.Block(), loc)
        self.consts: dict[tuple, ir.Value] = {}      # one CONSTANT per (value, dtype)
        self.sums: dict[tuple, ir.Value] = {}        # one sum per (terms, const, dtype)

    @property
    def ops(self) -> list[ir.Operation]:
        return self.b.block.ops

    def const(self, value, dtype) -> ir.Value:
        key = (value, dtype)
        if key not in self.consts:
            self.consts[key] = self.b.create(TileOp.CONSTANT, [], [ir.scalar(dtype)], ConstAttrs(value)).result
        return self.consts[key]

    def binary(self, op, a: ir.Value, b: ir.Value, dtype) -> ir.Value:
        return self.b.create(op, [a, b], [ir.scalar(dtype)]).result

    def sum(self, terms, const: int, dtype) -> ir.Value:
        """``sum(coef * v) + const`` with positive coefs (0 when there is nothing); the bounds
        of a causal mask share ``start_n + BN - 1``, so sums are built once."""
        key = (tuple(terms), const, dtype)
        if key not in self.sums:
            self.sums[key] = self._build_sum(terms, const, dtype)
        return self.sums[key]

    def _build_sum(self, terms, const: int, dtype) -> ir.Value:
        total = None
        for v, coef in terms:
            x = v if coef == 1 else self.binary(TileOp.MUL, v, self.const(coef, dtype), dtype)
            total = x if total is None else self.binary(TileOp.ADD, total, x, dtype)
        if const or total is None:
            c = self.const(const, dtype)
            total = c if total is None else self.binary(TileOp.ADD, total, c, dtype)
        return total

    def check(self, check: Check) -> ir.Value:
        """``lhs OP 0`` as ``positive terms + const OP negative terms`` (no negations needed)."""
        if check.value is not None:
            return check.value
        left = [(v, c) for v, c in check.lhs.terms if c > 0]
        right = [(v, -c) for v, c in check.lhs.terms if c < 0]
        lhs = self.sum(left, check.lhs.const, check.dtype)
        rhs = self.sum(right, 0, check.dtype)
        return self.binary(check.op, lhs, rhs, dtypes.bool_)

    def all_of(self, checks: list[Check]) -> ir.Value:
        flags = [self.check(c) for c in checks]
        result = flags[0]
        for f in flags[1:]:
            result = self.binary(TileOp.AND, result, f, dtypes.bool_)
        return result


# ---------------------------------------------------------------------------------- rewriting
def _replace_uses(fn: ir.Function, old: ir.Value, new: ir.Value) -> None:
    for o in fn.walk():
        o.operands = [new if x is old else x for x in o.operands]


def _sink_into(fn: ir.Function, block: ir.Block, where: ir.Operation, region: ir.Block) -> None:
    """Move the ops of ``block`` whose results only feed ``where`` (directly or through other
    moved ops) to the front of ``region``, so the fast path does not compute them."""
    uses = ir.users(fn)
    moved = {where}
    for o in reversed(block.ops):
        if o.op in MOVABLE_OPS and not o.regions and o.results and all(
                uses.get(r) and all(u in moved for u in uses[r]) for r in o.results):
            moved.add(o)
    sunk = [o for o in block.ops if o in moved]
    block.ops = [o for o in block.ops if o not in moved]
    region.ops[:0] = sunk


def _guard(fn: ir.Function, block: ir.Block, where: ir.Operation, checks: list[Check]) -> None:
    """Put ``where`` under ``IF(all checks)``; the IF takes over the WHERE's result value, so
    its users need no rewriting."""
    x = where.operands[1]
    emitter = ScalarEmitter(where.loc)
    flag = emitter.all_of(checks)
    fast = ir.Block([], [ir.Operation(TileOp.YIELD, [x], loc=where.loc)])
    slow = ir.Block([], [where])
    guard = ir.Operation(TileOp.IF, [flag], [], regions=[fast, slow], loc=where.loc)
    result = where.result
    masked = ir.Value(result.type, result.hint, owner=where)
    where.results, guard.results, result.owner = [masked], [result], guard
    slow.ops.append(ir.Operation(TileOp.YIELD, [masked], loc=where.loc))
    pos = block.ops.index(where)
    block.ops[pos:pos + 1] = emitter.ops + [guard]
    _sink_into(fn, block, where, slow)


def _rewrite_where(fn: ir.Function, block: ir.Block, where: ir.Operation) -> None:
    try:
        checks = checks_of(where.operands[0])
    except CheckNeverPasses:
        return
    if checks is None:
        return
    if not checks:                     # statically all true: the WHERE is just x
        _replace_uses(fn, where.result, where.operands[1])
        _sink_into(fn, block, where, ir.Block())      # drop it and the mask computing ops
        return
    _guard(fn, block, where, checks)


def _rewrite_block(fn: ir.Function, block: ir.Block) -> None:
    for o in list(block.ops):          # a snapshot: rewriting edits block.ops
        for region in o.regions:
            _rewrite_block(fn, region)
        if o.op is TileOp.WHERE and not o.result.type.is_scalar:
            _rewrite_where(fn, block, o)


def uniform_masks(fn: ir.Function) -> ir.Function:
    """Guard each recognised tile WHERE by a scalar "mask is all true" check (in place)."""
    _rewrite_block(fn, fn.body)
    return fn
