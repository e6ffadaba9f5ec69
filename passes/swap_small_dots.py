"""Small-M DOTs computed transposed: ``C^T = B^T A^T``, so that a GEMM with few rows of A (a
decode step's 16 tokens) runs on wgmma with the weights' columns as its M and A's rows as its N.

    swap_small_dots(fn, num_warps, target="sm_90a", wgmma_switch=True) -> fn

wgmma's M is 64 rows per warpgroup: a (16 x K) A tile would be padded to 64 rows, three
quarters of every A slot zeros, and the grid has a CTA per 64 columns of weights at most.
Swapped, a (K x 64) tile of B is wgmma's M-major A (``SharedTile.A_MN_ATOMS``) and the 16 rows
of A its N (n16, K-major): the shape of cuBLAS's small-M kernels on the H200
(``nvjet_sm90_tst_64x16...``).

A DOT is swapped when ``wgmma.TRANSPOSED_A`` is on, the target has wgmma, it sits at the top
level of a pipelined loop body, A and B are 16-bit tiles loaded in that body (no transpose),
A has 8-32 rows (a multiple of 8; B may be ``.T`` of a loaded N x K weight, which is then
wgmma's K-major A as it is), B has ``16 * num_warps`` columns (one 64-row slice of the
product per warpgroup), and its accumulator is a float32 tile the loop carries straight from
the DOT to the next iteration.  The loop then carries the transposed accumulator: its init is
transposed before the loop, the DOT reads ``tj.trans`` of both loads and the carried tile, and
its uses after the loop read the result transposed back (``TRANS`` ops: layouts make them free).
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir
from tilejit.ir import PermAttrs, TileOp, TileType
from tilejit.passes import wgmma
from tilejit.passes.mma_tiling import pipeline_stages

MAX_ROWS = 32                   # A tiles of at most this many rows are swapped
_SIXTEEN_BITS = (D.bfloat16, D.float16)


def swap_small_dots(fn: ir.Function, num_warps: int, target: str = "sm_90a", wgmma_switch: bool = True) -> ir.Function:
    if wgmma.TRANSPOSED_A and wgmma.enabled(target, wgmma_switch):
        _block(fn, fn.body, num_warps)
    return fn


def _block(fn: ir.Function, block: ir.Block, num_warps: int) -> None:
    for loop in list(block.ops):
        for r in loop.regions:
            _block(fn, r, num_warps)
        if loop.op is TileOp.FOR and pipeline_stages(loop) >= 2:
            for dot in [o for o in loop.regions[0].ops if o.op is TileOp.DOT]:
                carried = _swappable(loop, dot, num_warps)
                if carried is not None:
                    _swap(fn, block, loop, dot, carried)


def _swappable(loop: ir.Operation, dot: ir.Operation, num_warps: int) -> int | None:
    """The index among the loop's carried values of ``dot``'s accumulator when it can be
    swapped, else None."""
    body = loop.regions[0]
    a, b, acc = dot.operands
    if len(a.type.shape) != 2 or len(b.type.shape) != 2 or a.type.dtype != b.type.dtype \
            or a.type.dtype not in _SIXTEEN_BITS or acc.type.dtype != D.float32:
        return None
    (m, _), n = a.type.shape, b.type.shape[1]
    if m % 8 or not 8 <= m <= MAX_ROWS or n != 16 * num_warps:
        return None
    if not (_loaded(a, body) and (_loaded(b, body) or (b.owner is not None and b.owner.op is TileOp.TRANS
                                                         and b.owner in body.ops and _loaded(b.owner.operands[0], body)))):
        return None
    if acc not in body.args[1:]:
        return None
    i = body.args.index(acc) - 1
    users = [x for o in body.walk() for x in o.operands if x is dot.result or x is acc]
    if body.ops[-1].operands[i] is not dot.result or len(users) != 2:
        return None                         # read elsewhere in the body: not a plain accumulator
    return i


def _loaded(v: ir.Value, body: ir.Block) -> bool:
    return v.owner is not None and v.owner.op is TileOp.LOAD and v.owner in body.ops


def _trans(v: ir.Value, loc) -> ir.Operation:
    rows, cols = v.type.shape
    return ir.Operation(TileOp.TRANS, [v], [TileType((cols, rows), v.type.dtype)], PermAttrs((1, 0)), None, loc)


def _swap(fn: ir.Function, parent: ir.Block, loop: ir.Operation, dot: ir.Operation, i: int) -> None:
    body = loop.regions[0]
    a, b, acc = dot.operands
    # before the loop: the init transposed
    init = _trans(loop.operands[3 + i], dot.loc)
    parent.ops.insert(parent.ops.index(loop), init)
    loop.operands[3 + i] = init.result
    # in the body: the carried tile transposed, the DOT of the transposed loads
    carried = ir.Value(init.result.type, acc.hint)
    body.args[1 + i] = carried
    ta = _trans(a, dot.loc)
    # B^T: the load itself when B is a transposed load (a weight stored N x K: wgmma's K-major A)
    tb = None if b.owner.op is TileOp.TRANS else _trans(b, dot.loc)
    b_t = b.owner.operands[0] if tb is None else tb.result
    swapped = ir.Operation(TileOp.DOT, [b_t, ta.result, carried], [carried.type], dot.attrs, None, dot.loc)
    at = body.ops.index(dot)
    body.ops[at:at + 1] = [ta] + ([tb] if tb is not None else []) + [swapped]
    if tb is None and not any(b in o.operands for o in fn.walk()):
        body.ops.remove(b.owner)             # the user's transpose, now unread (rings want one reader)
    body.ops[-1].operands[i] = swapped.result
    # after the loop: the result transposed back for its readers
    old = loop.results[i]
    loop.results[i] = ir.Value(carried.type, old.hint, owner=loop)
    back = _trans(loop.results[i], dot.loc)
    parent.ops.insert(parent.ops.index(loop) + 1, back)
    for o in fn.walk():
        if o is not back:
            o.operands = [back.result if x is old else x for x in o.operands]

