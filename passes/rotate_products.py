"""Products issued one iteration ahead: in a pipelined loop with one DOT that starts from zeros
and whose product the same iteration works on (a block-scaled GEMM's ``acc += dot(a, b) * scale``:
``tj.dot_scaled``; attention's ``s = q @ k.T`` before its softmax), the loop computes the next
iteration's product while it works on this one's.

    rotate_products(fn, num_warps, target="sm_90a", wgmma_switch=True) -> fn

    before:  for k: p = dot(A(k), B(k)); acc = f(p, acc, k)
    after:   p = dot(A(start), B(start))
             for k: p_next = dot(A(k + step), B(k + step)); acc = f(p, acc, k); p = p_next

On wgmma the product of iteration k + 1 then stays in flight while iteration k's is worked on:
with one DOT (the GEMM) across the loop's back edge (``wgmma.carried_products``: ``wait_group
1``, the loop unrolled by two so the two products alternate registers); with a later wgmma DOT
that waits for every group (attention's ``p @ v``) until that wait, so the softmax of block k
runs under block k + 1's QK^T (FlashAttention-3's overlap within a warpgroup).  ``A(k)`` and
``B(k)`` are the DOT's operands as the body computes them (loads, transposes, reshapes, offset
arithmetic) from the induction variable and loop invariants only; they are cloned before the
loop with ``start`` and in the body with ``k + step``.  On the last trip the next product reads
the block past the loop's end (zeros where that is past the array, a load's ``other``), and is
not used: in attention's form its wgmmas are skipped there (``wgmma.ahead_guard``: a branch on
``k + step < end`` around the group; the copies still land, so the rings keep their count),
in the GEMM's form it is one tile of extra work.  The first product takes wgmma too (``wgmma.first_products``,
its operands staged by the threads), and a warp-specialised loop keeps its producer warpgroup
(``specialise_warps.product_before_loop``: the rings' bytes are their own, and the consumers
get 240 registers).

A loop qualifies when ``wgmma.enabled``, it is pipelined (``pipeline_stages`` >= 2), writes no
memory (a copy issued ahead might read what the iteration writes), and holds, at its top level,
exactly one DOT that will take wgmma (``wgmma.qualifies``), whose accumulator is a zeros constant
and whose product is read in the body but not yielded (a product already carried, the user's own
rotated loop, is left alone); its other DOTs accumulate (attention's PV).  ``ROTATE`` switches
the pass on (default); ``ROTATE_GEMM`` also lets it take a loop with no other DOT (the GEMM's
form), and attention's form is taken only where the later DOT's N (the head dim) is from
``ROTATE_MIN_N`` to ``ROTATE_MAX_N`` (at D256, 128x64x8, the second S tile spills 2000 bytes
even with the consumers' 240 registers, whole-program ptxas).  Measured on the H100 (session 34, two runs, ``scripts/gpu_s34a.sh`` /
``gpu_s34c.sh``, 128x128x8): attention +3-4% at D128 S4096 (full 583-587 -> 600-608 TFLOP/s,
causal 517-521 -> 537-538), -7% at D64 S1024 (308-309 -> 287-288, 216 -> 200-202), the latter
with and without the last trip's skip (so not the extra product: at D64 the PV group is half
as long, less to hide the softmax under); the fp8 blockwise GEMM 903 / 1031 TFLOP/s rotated against
972 / 1087 plain (4096^3 / 8192^3); in session 30 it had been 717 / 889 against 961 / 1084, when
its first product ran on mma.sync and the kernel lost its producer warpgroup (both mended since:
168 registers, consumers 240).
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import wgmma
from tilejit.passes.dce import dce
from tilejit.passes.lower_memory import KnownMultiples
from tilejit.passes.mma_tiling import pipeline_stages
from tilejit.passes.ring_sources import body_slice

ROTATE = True
ROTATE_GEMM = False     # the single-DOT form too (a block-scaled GEMM); off: measured slower (below)
ROTATE_MIN_N = 128      # attention's form only where the later DOTs' N (the head dim) is in
ROTATE_MAX_N = 128      # [ROTATE_MIN_N, ROTATE_MAX_N]: slower at D64, spills at D256 (below)


def rotate_products(fn: ir.Function, num_warps: int, target: str = "sm_90a", wgmma_switch: bool = True) -> ir.Function:
    if not (ROTATE and wgmma.enabled(target, wgmma_switch)):
        return fn
    if pipelined_loops(fn, fn.body, num_warps, KnownMultiples(fn), _rotatable, lambda b, o, f: _rotate(b, o, *f)):
        dce(fn)
    return fn


def pipelined_loops(fn: ir.Function, block: ir.Block, num_warps: int, multiples, find, apply) -> bool:
    """``apply(block, loop, found)`` to each pipelined loop under ``block`` (inner ones first) for
    which ``find(fn, loop, num_warps, multiples)`` finds something (not None); whether any."""
    changed = False
    for o in list(block.ops):
        for r in o.regions:
            changed |= pipelined_loops(fn, r, num_warps, multiples, find, apply)
        if o.op is TileOp.FOR and pipeline_stages(o) >= 2:
            found = find(fn, o, num_warps, multiples)
            if found is not None:
                apply(block, o, found)
                changed = True
    return changed


def _rotatable(fn: ir.Function, loop: ir.Operation, num_warps: int, multiples):
    """(the DOT, the body ops computing its operands, in order) when ``loop`` qualifies."""
    body = loop.regions[0]
    walked = list(body.walk())
    if any(x.op in (TileOp.STORE, TileOp.ATOMIC) for x in walked) \
            or any(x.op is TileOp.DOT and x not in body.ops for x in walked):
        return None
    found = [x for x in body.ops if x.op is TileOp.DOT and _fresh(x, body, walked)]
    later = [x for x in body.ops if x.op is TileOp.DOT and x not in found]
    if any(_carried_source(x.operands[0], body) for x in later):
        return None                     # a later product one iteration behind (defer_products)
    if len(found) != 1 or not (ROTATE_GEMM if not later else
                               ROTATE_MIN_N <= min(x.result.type.shape[-1] for x in later)
                               and max(x.result.type.shape[-1] for x in later) <= ROTATE_MAX_N):
        return None
    dot = found[0]
    inside = {r for x in walked for r in x.results} | set(body.args)
    if not wgmma.qualifies(fn, dot, body, num_warps, inside, multiples, ir.users(body)):
        return None
    ops = _operand_slice(body, dot)
    return None if ops is None else (dot, ops)


def _carried_source(v: ir.Value, body: ir.Block) -> bool:
    """``v`` is a carried tile of ``body``, or a conversion of one."""
    while v.owner is not None and v.owner.op is TileOp.CAST:
        v = v.owner.operands[0]
    return v in body.args


def _fresh(dot: ir.Operation, body: ir.Block, walked: list) -> bool:
    """``dot`` starts from zeros and its product is read in the body, not yielded."""
    acc = dot.operands[2].owner
    if acc is None or acc.op is not TileOp.CONSTANT or acc.attrs.value != 0:
        return False
    return dot.result not in body.ops[-1].operands and any(dot.result in x.operands for x in walked)


def _operand_slice(body: ir.Block, dot: ir.Operation) -> list[ir.Operation] | None:
    """The body ops (in order) that compute ``dot``'s operands (A, B and its zeros), or None when
    they read a loop-carried value, hold regions, write memory or hold another DOT."""
    return body_slice(body, dot.operands, lambda o, v: not (
        o.regions or o.op in (TileOp.STORE, TileOp.ATOMIC, TileOp.DOT)))


def _rotate(parent: ir.Block, loop: ir.Operation, dot: ir.Operation, ops: list[ir.Operation]) -> None:
    body = loop.regions[0]
    iv, start, step = body.args[0], loop.operands[0], loop.operands[2]
    # before the loop: the first iteration's product
    first = ir.clone_ops(ops + [dot], {iv: start})
    at = parent.ops.index(loop)
    parent.ops[at:at] = first
    # in the body, where the DOT was: the next iteration's product
    after = ir.Operation(TileOp.ADD, [iv, step], [iv.type], None, None, dot.loc)
    ahead = [after] + ir.clone_ops(ops + [dot], {iv: after.result})
    at = body.ops.index(dot)
    body.ops[at:at + 1] = ahead
    # this iteration's product is the carried one
    carried = ir.Value(dot.result.type, dot.result.hint)
    for x in body.walk():
        x.operands = [carried if v is dot.result else v for v in x.operands]
    body.args.append(carried)
    loop.operands.append(first[-1].result)
    body.ops[-1].operands.append(ahead[-1].result)
    loop.results.append(ir.Value(dot.result.type, owner=loop))
