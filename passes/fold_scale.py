"""Softmax scores scaled by a positive scalar keep the scale off the scores (tile IR -> tile IR).

``s = tj.dot(q, k.T) * scale`` then ``m = max(m_i, max(s))`` and ``p = exp(s - m)``, after
``fold_exp`` turned the exponential into ``exp2(fma(s, L, -m*L))``, multiplies every score once
for the maximum and once in the FMA.  Where ``scale`` is known positive, the multiply moves:

    max(where(keep, d * c, -inf))      ->  max(where(keep, d, -inf)) * c     (exact: c > 0)
    fma(where(keep, d * c, -inf), K, nb)  ->  fma(where(keep, d, -inf), c * K, nb)

so a score costs one FFMA and its MUFU.EX2, as in Triton's tutorial spelling
(``m = max(m_i, max(s) * qk_scale)``, ``p = exp2(s * qk_scale - m)``), whichever way the kernel
writes it.  The maximum is the same float either way: rounding ``d * c`` is monotone for c > 0,
so the largest product is the product of the largest score (also through -inf masks and
overflow to inf).  The exponent rounds ``c * K`` once instead of ``d * c``: the same relative
error (2**-24 of the exponent, ``fold_exp``'s bound) in another place.

``c`` is positive when it is a finite float32 CONSTANT > 0 (through SPLAT) or a float32 parameter the
launch specialised as positive (``ScalarSpec.positive``: launches specialise float scalars on
it, as they do integers on their width).  The MUL must be float32, and every live use of the
scaled scores (through WHEREs that fill with -inf) a REDUCE(max) or ``fold_exp``'s FMA by
log2(e); anything else (a store of the scores, another product) leaves the kernel as it is.
Measured on the build machine (sm_90a SASS of ``examples/attention.py``, D128 128x128, 8 warps):
the loop from the first HGMMA to the last takes 635 / 772 instructions (full / causal) against
697 / 832 without, as many as the tutorial's spelling (634 / 769).  ``FOLD`` switches it off.
"""
from __future__ import annotations

from tilejit import dtypes, ir
from tilejit.ir import ReduceKind, TileOp
from tilejit.passes.fold_exp import LOG2E, apply, constant_of, positive_args, positive_scale, times

FOLD = True


def _is_neg_inf(v: ir.Value) -> bool:
    return constant_of(v) == float("-inf")


class _Scores:
    """The uses of one ``d * c`` (and of the WHEREs masking it) to rewrite; ``ok`` is False where
    any live use is not a mask, a maximum or fold_exp's FMA."""

    def __init__(self, mul: ir.Operation, d: ir.Value, c: ir.Value, users: dict):
        self.mul, self.d, self.c = mul, d, c
        self.wheres, self.reduces, self.fmas = [], [], []
        self.ok = self._visit(mul.result, users)

    def _visit(self, v: ir.Value, users: dict) -> bool:
        for u in users.get(v, []):
            if not any(users.get(r) for r in u.results):
                continue                                 # dead (fold_exp's SUB): dce takes it
            if u.op is TileOp.WHERE and u.operands[1] is v and u.operands[0] is not v and _is_neg_inf(u.operands[2]):
                self.wheres.append(u)
                if not self._visit(u.result, users):
                    return False
            elif u.op is TileOp.REDUCE and u.attrs.kind is ReduceKind.MAX:
                self.reduces.append(u)
            elif u.op is TileOp.FMA and u.operands[0] is v and u.operands[2] is not v \
                    and constant_of(u.operands[1]) == LOG2E:      # fold_exp's exponent
                self.fmas.append(u)
            else:
                return False
        return bool(self.reduces or self.fmas)


def _rewrite(s: _Scores, before: dict, replace: dict) -> None:
    for w in s.wheres:                      # the masks now select the unscaled scores
        if w.operands[1] is s.mul.result:
            w.operands[1] = s.d
    for r in s.reduces:                     # max(d) * c takes over the maximum's result value
        src = s.d if r.operands[0] is s.mul.result else r.operands[0]
        new = ir.Operation(TileOp.REDUCE, [src], [r.result.type], r.attrs, loc=r.loc)
        factor, c = times(s.c, 1.0, r.result.type, r.loc)
        mul = ir.Operation(TileOp.MUL, [new.result, c], [], loc=r.loc)
        mul.results = [r.result]
        r.result.owner = mul
        replace[r] = [new, *factor, mul]
    for f in s.fmas:                        # fma(d, c * log2(e), nb)
        factor, f.operands[1] = times(s.c, LOG2E, f.result.type, f.loc)
        if f.operands[0] is s.mul.result:
            f.operands[0] = s.d
        before.setdefault(f, []).extend(factor)


def _find(block: ir.Block, positive: set, users: dict, found: list) -> None:
    for o in block.ops:
        for r in o.regions:
            _find(r, positive, users, found)
        if o.op is not TileOp.MUL or o.result.type.dtype != dtypes.float32 or o.result.type.shape == ():
            continue
        for d, c in (o.operands, o.operands[::-1]):
            scale = positive_scale(c, positive)
            if scale is not None and d.type.shape == o.result.type.shape and d.type.dtype == dtypes.float32:
                scores = _Scores(o, d, scale, users)
                if scores.ok:
                    found.append(scores)
                break


def fold_scale(fn: ir.Function) -> ir.Function:
    """Move positive scales off softmax scores (in place; returns ``fn``).  The scaled MULs are
    left for ``dce``."""
    if not FOLD:
        return fn
    found: list[_Scores] = []
    _find(fn.body, positive_args(fn), ir.users(fn), found)
    before, replace = {}, {}
    for s in found:
        _rewrite(s, before, replace)
    apply(fn.body, replace, before=before)
    return fn
