"""Products issued one iteration ahead: in a pipelined loop whose one DOT starts from zeros and
whose product the same iteration works on (a block-scaled GEMM's ``acc += dot(a, b) * scale``:
``tj.dot_scaled``), the loop computes the next iteration's product while it works on this one's.

    rotate_products(fn, num_warps, target="sm_90a", wgmma_switch=True) -> fn

    before:  for k: p = dot(A(k), B(k)); acc = f(p, acc, k)
    after:   p = dot(A(start), B(start))
             for k: p_next = dot(A(k + step), B(k + step)); acc = f(p, acc, k); p = p_next

On wgmma the product of iteration k + 1 then stays in flight while iteration k's is scaled into
the accumulator (``wgmma.carried_products``: ``wait_group 1``, the loop unrolled by two so the
two products alternate registers), instead of every iteration waiting for its own product
before the scaling can start.  ``A(k)`` and ``B(k)`` are the DOT's operands as the body computes
them (loads, transposes, reshapes, offset arithmetic) from the induction variable and loop
invariants only; they are cloned before the loop with ``start`` and in the body with
``k + step``.  On the last trip the next product reads the block past the loop's end (zeros
where that is past the array, a load's ``other``), and is not used: one K tile of extra work.

A loop qualifies when ``wgmma.enabled``, it is pipelined (``pipeline_stages`` >= 2), writes no
memory (a copy issued ahead might read what the iteration writes), and holds exactly one DOT
(attention's two chained DOTs are not rotated here), at its top level, that will take wgmma
(``wgmma.qualifies``), whose accumulator is a zeros constant and whose product is read in the
body but not yielded (a product already carried, the user's own rotated loop, is left alone).
``ROTATE`` switches the pass on.  Off: measured slower on the H100 (2026-12-06, session 30,
scripts/gpu_s30d.sh, alternating, two rounds): the fp8 blockwise GEMM (weights (N, K),
128x128x128, 8 warps) 717 / 889 TFLOP/s rotated against 961 / 1084 plain at 4096^3 / 8192^3 (the
same spelled by hand, ``scripts/probes/fp8_rotated.py``: 714 / 855-863 against 964 / 1074-1077);
the rotated kernel is no longer warp-specialised (no producer warpgroup, no ``setmaxnreg``: 220
registers a thread against 168) and its first product, before the loop, runs on mma.sync from
register loads.  Next, before it can pay: issue the first product from the loop's TMA ring (a
peeled first trip inside the pipelined loop) so the kernel keeps its producer warpgroup; then
FlashAttention-3's next S before this softmax is the same rotation with two DOTs.
"""
from __future__ import annotations

from tilejit import ir
from tilejit.ir import TileOp
from tilejit.passes import wgmma
from tilejit.passes.dce import dce
from tilejit.passes.lower_memory import KnownMultiples
from tilejit.passes.mma_tiling import pipeline_stages
from tilejit.passes.ring_sources import body_slice

ROTATE = False


def rotate_products(fn: ir.Function, num_warps: int, target: str = "sm_90a", wgmma_switch: bool = True) -> ir.Function:
    if not (ROTATE and wgmma.enabled(target, wgmma_switch)):
        return fn
    if _block(fn, fn.body, num_warps, KnownMultiples(fn)):
        dce(fn)
    return fn


def _block(fn: ir.Function, block: ir.Block, num_warps: int, multiples) -> bool:
    changed = False
    for o in list(block.ops):
        for r in o.regions:
            changed |= _block(fn, r, num_warps, multiples)
        if o.op is TileOp.FOR and pipeline_stages(o) >= 2:
            found = _rotatable(fn, o, num_warps, multiples)
            if found is not None:
                _rotate(block, o, *found)
                changed = True
    return changed


def _rotatable(fn: ir.Function, loop: ir.Operation, num_warps: int, multiples):
    """(the DOT, the body ops computing its operands, in order) when ``loop`` qualifies."""
    body = loop.regions[0]
    walked = list(body.walk())
    dots = [x for x in walked if x.op is TileOp.DOT]
    if len(dots) != 1 or dots[0] not in body.ops or any(x.op in (TileOp.STORE, TileOp.ATOMIC) for x in walked):
        return None
    dot = dots[0]
    acc = dot.operands[2].owner
    if acc is None or acc.op is not TileOp.CONSTANT or acc.attrs.value != 0:
        return None
    if dot.result in body.ops[-1].operands or not any(dot.result in x.operands for x in walked):
        return None
    inside = {r for x in walked for r in x.results} | set(body.args)
    if not wgmma.qualifies(fn, dot, body, num_warps, inside, multiples, ir.users(body)):
        return None
    ops = _operand_slice(body, dot)
    return None if ops is None else (dot, ops)


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
