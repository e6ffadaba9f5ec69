"""An accumulating product issued one iteration behind: in a pipelined loop with a DOT whose
product the body works on (attention's ``s = q @ k.T``) and a later DOT that accumulates into a
carried tile (``acc = acc * alpha[:, None] + p @ v``), each iteration issues this block's first
product, then the previous block's accumulation, and works on its product while the
accumulation runs (FlashAttention-3's overlap within a warpgroup).

    defer_products(fn, num_warps, target="sm_90a", wgmma_switch=True) -> fn

    before:  for k: s = dot(Q, K(k)); p, x = f(s, k); acc = dot(p, V(k), acc * g(x))
    after:   p', x' = zeros, ones
             for k: s = dot(Q, K(k)); acc = dot(p', V(k - step), acc * g(x')); p, x = f(s, k)
                    p', x' = p, x; last = k
             acc = dot(p', V(last), acc * g(x'))

The first trip's accumulation adds a product of zeros (``p'`` starts at zeros, ``x'`` at ones,
and the block before the loop's start is read through the load's mask, or a TMA box's zero
fill, where it lies outside the array): ``acc`` keeps its start value.  The last block's
accumulation runs after the loop (its B staged by the threads, on mma.sync); with no trip it
adds zeros too.  What the loop carries across its back edge is the accumulation's bf16 A
``p`` (32 registers a thread for a 64x128 warpgroup slice) and the row vector ``x``, where
``rotate_products`` carries the next float32 product (64): no copy of a product at the back
edge.  The accumulator's rescale is issued before the first product (ptxas retires every
wgmma group in flight before a wgmma whose accumulator the threads wrote after that group's
issue).  With ``CARRY_FLOAT`` the loop carries p in float32 instead and converts it before the
next accumulation (64 + 32 registers: D128 128x128 tiles spill).

On wgmma (``lower_wgmma``) the first product's wait moves past the accumulation's issue
(``wait_group 1``: it retires the first product and leaves the accumulation in flight under
the body's work on that product); the accumulation is retired by a ``wait_group 0`` at the end
of the body, before the ring's slots are released.  That wait is held there
(``WaitAttrs.hold``: a branch ptxas cannot decide just before it, ``mma.hold_point``):
without it ptxas hoists the wait above the softmax, since the body's next p goes into the
registers the accumulation in flight reads.

A loop qualifies when ``wgmma.enabled``, it is pipelined (``pipeline_stages`` >= 2), writes no
memory, and holds at its top level exactly two DOTs that will take wgmma: the first starts from
zeros and its product is read in the body, not yielded; the second comes after it, its product
is only yielded (for carried tile ``acc``), its accumulator is ``acc`` or ``acc * X`` with
``X`` broadcast from a body value (``x``), its B a load the pipeliner rings
(``ring_sources.ring_source``) and its A a body value; and the tiles a thread holds fit
``MAX_VALUES`` registers.  ``DEFER`` switches the pass on (off: measured below); where it
takes a loop, ``rotate_products`` leaves it alone.

Measured on the H100 with ``CARRY_FLOAT`` (the form first built; session 36, ``scripts/gpu_s36c.sh``,
off / on in one series): head dim 128
with 128x64x8 tiles 493 -> 535 TFLOP/s full, 454 -> 478 causal (+5-9%), 64x64x4 +7% / equal;
but the rotated 128x128x8 (``rotate_products``: 611 / 539) stays the best D128 tiling, and the
deferred 128x128x8 (spilling, ``MAX_VALUES`` raised) measured 607 / 516.  At head dim 64 it is
12-29% slower: the carried float32 p lifts a thread's registers (128x64x8: 80 -> 149), so the
kernel loses its 2-3 CTAs an SM (``specialise_warps.CTAS_PER_SM``).  The bfloat16 carry with
the held wait (the default form, not yet timed) keeps them at 64x64x4 (80 registers, 3 CTAs;
128x64x8 still needs 128 at one CTA) and takes D128 128x128x8 without spills (its loop 683 SASS
instructions a warp an iteration against the rotated loop's 723).  Without the hold the
bfloat16 carry had no overlap (the wait hoisted to the mask's join), also with the loop
unrolled by two.  Skipping the first trip's PV (a branch on ``iv > start``) made ptxas
serialise every wgmma (C7514: the skipped path has one group fewer than the wait counts on).
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import ConstAttrs, TileOp
from tilejit.passes import wgmma
from tilejit.passes.dce import dce
from tilejit.passes.lower_memory import KnownMultiples
from tilejit.passes.ring_sources import ring_source
from tilejit.passes.rotate_products import pipelined_loops

DEFER = False
# A thread's registers for the loop's tiles at most (``deferrable``): at head dim 128, 128x128 tiles
# hold 224 a thread (product 64, p 64 and its bf16 fragments 32, accumulator 64) and spill 176 bytes
# of the consumers' 240 (whole-program ptxas); 128x64 (144) and head dim 64 (112-192) do not.
MAX_VALUES = 200
# True carries p in float32 and converts it before the next trip's PV (measured, below); False
# carries the PV's bf16 A itself, converted at the body's end after the PV's wait, which is held
# there (``WaitAttrs.hold``) so ptxas cannot hoist it above the softmax.
CARRY_FLOAT = False
SHAPE_OPS = (TileOp.RESHAPE, TileOp.BROADCAST)


def defer_products(fn: ir.Function, num_warps: int, target: str = "sm_90a", wgmma_switch: bool = True) -> ir.Function:
    if not (DEFER and wgmma.enabled(target, wgmma_switch)):
        return fn
    if pipelined_loops(fn, fn.body, num_warps, KnownMultiples(fn), deferrable, _defer):
        dce(fn)
    return fn


def deferrable(fn: ir.Function, loop: ir.Operation, num_warps: int, multiples=None) -> dict | None:
    """What ``_defer`` moves when ``loop`` qualifies (see the module docstring), else None."""
    multiples = multiples or KnownMultiples(fn)
    body = loop.regions[0]
    walked = list(body.walk())
    if any(x.op in (TileOp.STORE, TileOp.ATOMIC) for x in walked) \
            or any(x.op is TileOp.DOT and x not in body.ops for x in walked):
        return None
    dots = [x for x in body.ops if x.op is TileOp.DOT]
    if len(dots) != 2:
        return None
    first, acc_dot = dots
    uses = ir.users(body)
    yields = body.ops[-1].operands
    zeros = first.operands[2].owner
    if zeros is None or zeros.op is not TileOp.CONSTANT or zeros.attrs.value != 0 \
            or first.result in yields or not uses.get(first.result):
        return None
    if uses.get(acc_dot.result) != [body.ops[-1]] or yields.count(acc_dot.result) != 1:
        return None
    slot = yields.index(acc_dot.result)
    carried = body.args[1 + slot]
    a, b, acc = acc_dot.operands[:3]
    scale = None                                   # acc * X: (the MUL, X's shape ops, x)
    if acc is not carried:
        mul = acc.owner
        if mul is None or mul.op is not TileOp.MUL or mul not in body.ops or uses.get(acc) != [acc_dot] \
                or carried not in mul.operands or mul.operands.count(carried) != 1:
            return None
        x = mul.operands[1 - mul.operands.index(carried)]
        chain = []
        while x.owner is not None and x.owner.op in SHAPE_OPS and x.owner in body.ops and len(uses.get(x, ())) == 1:
            chain.append(x.owner)
            x = x.owner.operands[0]
        if x.owner is None or x.owner not in body.ops or x in body.args:
            return None
        scale = (mul, chain[::-1], x)
    if uses.get(carried) != [scale[0] if scale else acc_dot]:
        return None
    cast = None             # A converted from the body's value: with CARRY_FLOAT the conversion moves with the DOT
    if CARRY_FLOAT and a.owner is not None and a.owner.op is TileOp.CAST and a.owner in body.ops \
            and uses.get(a) == [acc_dot]:
        cast = a.owner
        a = cast.operands[0]
    if a.owner is None or a.owner not in body.ops or a in body.args or body.ops.index(acc_dot) < body.ops.index(first):
        return None
    # registers a thread: the product in flight, the carried p (float32), its A fragments while the
    # accumulation reads them, the accumulator (a rotated loop holds two products instead)
    threads = 32 * num_warps
    values = (first.result.type.numel + a.type.numel * (a.type.dtype.itemsize / 4 + (cast is not None) / 2)
              + acc_dot.result.type.numel) / threads
    if values > MAX_VALUES:
        return None
    src = ring_source(fn, multiples, acc_dot, b, body, uses)
    if src is None:
        return None
    inside = {r for x in walked for r in x.results} | set(body.args)
    if not all(wgmma.qualifies(fn, d, body, num_warps, inside, multiples, uses) for d in (first, acc_dot)):
        return None
    return {"first": first, "dot": acc_dot, "slot": slot, "scale": scale, "a": a, "cast": cast,
            "b_ops": list(src.offsets) + [src.load] + list(src.chain)[::-1]}


def _const(value, type_, loc) -> ir.Operation:
    return ir.Operation(TileOp.CONSTANT, [], [type_], ConstAttrs(value), loc=loc)


def _stage_b(found: dict, subst: dict) -> tuple[list[ir.Operation], list[ir.Operation]]:
    """Clones of the accumulation, their inputs mapped through ``subst``: (X's shape ops and
    the MUL; B's load and shape ops and the DOT)."""
    dot, scale, cast = found["dot"], found["scale"], found["cast"]
    rescale = ir.clone_ops((scale[1] + [scale[0]] if scale is not None else []) + ([cast] if cast else []), subst)
    return rescale, ir.clone_ops(list(found["b_ops"]) + [dot], subst)


def _defer(parent: ir.Block, loop: ir.Operation, found: dict) -> None:
    body = loop.regions[0]
    dot, scale, slot = found["dot"], found["scale"], found["slot"]
    iv, start, step = body.args[0], loop.operands[0], loop.operands[2]
    a = found["a"]
    carried = body.args[1 + slot]
    loc = dot.loc
    # before the loop: what the first trip's accumulation reads (zeros, ones, the block before)
    before = [_const(0.0 if a.type.dtype.is_float else 0, a.type, loc)]
    if scale is not None:
        x = scale[2]
        before.append(_const(1.0 if x.type.dtype.is_float else 1, x.type, loc))
    first_last = ir.Operation(TileOp.SUB, [start, step], [iv.type], None, None, loc)
    before.append(first_last)
    at = parent.ops.index(loop)
    parent.ops[at:at] = before
    # the loop carries p, x and the trip's induction variable
    a_prev = ir.Value(a.type, a.hint)
    subst = {a: a_prev, carried: carried}
    new_args, inits, yielded = [a_prev], [before[0].result], [a]
    if scale is not None:
        x_prev = ir.Value(scale[2].type, scale[2].hint)
        subst[scale[2]] = x_prev
        new_args.append(x_prev)
        inits.append(before[1].result)
        yielded.append(scale[2])
    last = ir.Value(iv.type, iv.hint)
    new_args.append(last)
    inits.append(first_last.result)
    yielded.append(iv)
    # in the body, after the first product: the previous block's accumulation
    # (the rescale before the first product: ptxas retires every wgmma group in flight before
    # one whose accumulator the threads wrote after that group's issue)
    prev = ir.Operation(TileOp.SUB, [iv, step], [iv.type], None, None, loc)
    subst[iv] = prev.result
    rescale, stage = _stage_b(found, subst)
    at = body.ops.index(found["first"])
    body.ops[at:at] = rescale
    at = body.ops.index(found["first"]) + 1
    body.ops[at:at] = [prev] + stage
    y = body.ops[-1]
    y.operands[slot] = stage[-1].result
    y.operands.extend(yielded)
    body.args.extend(new_args)
    loop.operands.extend(inits)
    results = [ir.Value(v.type, owner=loop) for v in new_args]
    loop.results.extend(results)
    # after the loop: the last block's accumulation, which the loop's users read instead
    out = loop.results[slot]
    subst = {a: results[0], carried: out, iv: results[-1]}
    if scale is not None:
        subst[scale[2]] = results[1]
    after = sum(_stage_b(found, subst), [])
    for o in parent.walk():
        o.operands = [after[-1].result if v is out else v for v in o.operands]
    at = parent.ops.index(loop) + 1
    parent.ops[at:at] = after

