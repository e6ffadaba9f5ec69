"""Tile-IR verifier, written as a per-op spec table: ``verify(fn)`` checks SSA scoping, operand
and result types and shapes, attrs and region structure, and raises ``VerifyError`` (an internal
compiler error, not a user error) naming the op and its source location."""
from __future__ import annotations

import math

from tilejit import dtypes
from tilejit.errors import CompileError
from tilejit.ir import (BINARY_OPS, COMPARE_OPS, FLOAT_UNARY_OPS, PREDICATE_OPS, UNARY_OPS, ArrayType, AxisAttrs,
                        Block, ConstAttrs, DotAttrs, ForAttrs, Function, LoadAttrs, Operation,
                        PermAttrs, ReduceAttrs, ReduceKind, TileOp, TileType, StoreAttrs, store_mask, stored_tile,
                        ATOMIC_KINDS, ATOMIC_SCOPES, ATOMIC_SEMS, AssertAttrs, AtomicAttrs, PrintAttrs, ScanAttrs, StashAttrs, atomic_compare, ClusterAttrs,
                        GRID_DEPENDENCY_ACTIONS, GridDependencyAttrs)


class VerifyError(CompileError):
    """The IR breaks an invariant: a bug in whichever stage produced it.  It names the op and
    shows the user's line it came from."""


def _need(cond: bool, op: Operation, message: str) -> None:
    if not cond:
        raise VerifyError(f"internal error, the tile IR is invalid: {op.op.name.lower()}: {message}", op.loc)


def _tile(v) -> bool:
    return isinstance(v.type, TileType)


def _scalar(v) -> bool:
    return _tile(v) and v.type.shape == ()


def _arity(op: Operation, operands: int, results: int) -> None:
    _need(len(op.operands) == operands, op, f"expected {operands} operands, got {len(op.operands)}")
    _need(len(op.results) == results, op, f"expected {results} results, got {len(op.results)}")


def _attrs(op: Operation, cls) -> None:
    _need(isinstance(op.attrs, cls), op, f"expected {cls.__name__}, got {op.attrs!r}")


# --- per-op checks ----------------------------------------------------------------------------------
def _grid(op):
    _arity(op, 0, 1)
    _attrs(op, AxisAttrs)
    _need(op.attrs.axis in (0, 1, 2), op, "axis must be 0, 1 or 2")
    # int64 when the array spans 2**31 elements or more (ArraySpec.large)
    _need(op.result.type in (TileType((), dtypes.int32), TileType((), dtypes.int64)), op,
          "result must be an int32 or int64 scalar")


def _dim(op):
    _arity(op, 1, 1)
    _attrs(op, AxisAttrs)
    arr = op.operands[0].type
    _need(isinstance(arr, ArrayType), op, "operand must be an array")
    _need(0 <= op.attrs.axis < arr.rank, op, "axis out of range")
    # int64 when the array spans 2**31 elements or more (ArraySpec.large)
    _need(op.result.type in (TileType((), dtypes.int32), TileType((), dtypes.int64)), op,
          "result must be an int32 or int64 scalar")


def _constant(op):
    _arity(op, 0, 1)
    _attrs(op, ConstAttrs)
    _need(_tile(op.result), op, "result must be a tile or scalar")


def _splat(op):
    _arity(op, 1, 1)
    x, r = op.operands[0], op.result
    _need(_scalar(x) and _tile(r) and x.type.dtype == r.type.dtype, op, "scalar -> tile of its dtype")


def _arange(op):
    _arity(op, 0, 1)
    _attrs(op, ConstAttrs)
    t = op.result.type
    _need(isinstance(t, TileType) and len(t.shape) == 1 and t.dtype == dtypes.int32, op,
          "result must be a 1-D int32 tile")


def _memory_operands(op, n_tail: int, shape: tuple | None = None) -> ArrayType:
    arr = op.operands[0].type if op.operands else None
    _need(isinstance(arr, ArrayType), op, "first operand must be an array")
    offs = op.operands[1:len(op.operands) - n_tail]
    _need(len(offs) == arr.rank, op, f"{len(offs)} offsets for a rank-{arr.rank} array")
    for o in offs:
        _need((_scalar(o) or (_tile(o) and o.type.shape == shape)) and o.type.dtype.is_int, op,
              "offsets must be integer scalars, or integer tiles of the memory tile's shape")
    return arr


def _load(op):
    _attrs(op, LoadAttrs)
    arr = _memory_operands(op, 0, op.result.type.shape if op.results and isinstance(op.result.type, TileType) else None)
    _need(len(op.results) == 1, op, "one result")
    t = op.result.type
    _need(isinstance(t, TileType) and len(t.shape) == arr.rank and t.dtype == arr.dtype, op,
          "result must be a tile of the array's rank and dtype")


def _store(op):
    _need(op.attrs is None or isinstance(op.attrs, StoreAttrs), op, "attrs must be StoreAttrs")
    mask = store_mask(op)
    arr = _memory_operands(op, 1 if mask is None else 2, getattr(stored_tile(op).type, "shape", None))
    _need(not op.results, op, "no results")
    t = stored_tile(op).type
    _need(isinstance(t, TileType) and len(t.shape) == arr.rank and t.dtype == arr.dtype, op,
          "stored tile must have the array's rank and dtype")
    _need(mask is None or (_tile(mask) and mask.type.shape == t.shape and mask.type.dtype.is_bool), op,
          "a store's mask must be a bool tile of the stored tile's shape")


def _atomic(op):
    _need(isinstance(op.attrs, AtomicAttrs) and op.attrs.kind in ATOMIC_KINDS and op.attrs.sem in ATOMIC_SEMS
          and op.attrs.scope in ATOMIC_SCOPES, op, "attrs must be AtomicAttrs of a known kind, sem and scope")
    mask, cas = store_mask(op), op.attrs.kind == "cas"
    arr = _memory_operands(op, (1 if mask is None else 2) + cas, getattr(stored_tile(op).type, "shape", None))
    t = stored_tile(op).type
    _need(isinstance(t, TileType) and len(t.shape) == arr.rank and t.dtype == arr.dtype, op,
          "the tile must have the array's rank and dtype")
    _need(not cas or atomic_compare(op).type == t, op, "atomic_cas compares with a tile of the tile's type")
    _need(len(op.results) == 1 and op.result.type == t, op, "one result: the old values, of the tile's type")
    _need(mask is None or (_tile(mask) and mask.type.shape == t.shape and mask.type.dtype.is_bool), op,
          "an atomic's mask must be a bool tile of the tile's shape")


def _elementwise(op):
    n = 3 if op.op in (TileOp.FMA, TileOp.WHERE) else 1 if op.op in UNARY_OPS or op.op in (TileOp.CAST, TileOp.BITCAST) else 2
    _arity(op, n, 1)
    r = op.result.type
    _need(all(_tile(v) and v.type.shape == r.shape for v in op.operands), op,
          "operands must already be broadcast to the result shape")
    first = op.operands[-1].type.dtype if op.op == TileOp.WHERE else op.operands[0].type.dtype
    if op.op == TileOp.WHERE:
        _need(op.operands[0].type.dtype.is_bool, op, "condition must be bool")
        _need(op.operands[1].type == r and op.operands[2].type == r, op, "values must have the result type")
    elif op.op == TileOp.BITCAST:
        _need(first.bits == r.dtype.bits and not first.is_bool and not r.dtype.is_bool, op,
              "bitcast needs two non-bool dtypes of one width")
    elif op.op != TileOp.CAST:
        _need(all(v.type.dtype == first for v in op.operands), op, "operands must have one dtype")
        _need(r.dtype == (dtypes.bool_ if op.op in COMPARE_OPS | PREDICATE_OPS else first), op, "wrong result dtype")
    if op.op in FLOAT_UNARY_OPS | PREDICATE_OPS or op.op == TileOp.TRUEDIV:
        _need(first.is_float, op, "needs float operands")
    if op.op in (TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.SHL, TileOp.SHR, TileOp.INVERT):
        _need(not first.is_float, op, "needs integer or bool operands")


def _broadcast(op):
    _arity(op, 1, 1)
    s, r = op.operands[0].type, op.result.type
    _need(len(s.shape) == len(r.shape) and s.dtype == r.dtype, op, "same rank and dtype")
    _need(all(a in (1, b) for a, b in zip(s.shape, r.shape)), op, f"cannot broadcast {s} to {r}")


def _reshape(op):
    _arity(op, 1, 1)
    s, r = op.operands[0].type, op.result.type
    _need(s.dtype == r.dtype and math.prod(s.shape) == math.prod(r.shape), op,
          f"cannot reshape {s} to {r}")


def _trans(op):
    _arity(op, 1, 1)
    _attrs(op, PermAttrs)
    s, r, perm = op.operands[0].type, op.result.type, op.attrs.perm
    _need(sorted(perm) == list(range(len(s.shape))), op, f"{perm} is not a permutation")
    _need(r == TileType(tuple(s.shape[p] for p in perm), s.dtype), op, "wrong result type")


def _print(op):
    _need(isinstance(op.attrs, PrintAttrs) and not op.results and len(op.operands) >= 4, op,
          "print(pid0, pid1, pid2, *values) with PrintAttrs and no results")
    _need(all(_scalar(p) and p.type.dtype == dtypes.int32 for p in op.operands[:3]), op, "program ids are int32 scalars")
    shapes = {v.type.shape for v in op.operands[3:]}
    _need(len(shapes) == 1, op, "the printed values have one shape")


def _assert(op):
    _need(isinstance(op.attrs, AssertAttrs) and not op.results and len(op.operands) == 4, op,
          "assert(pid0, pid1, pid2, cond) with AssertAttrs and no results")
    _need(all(_scalar(p) and p.type.dtype == dtypes.int32 for p in op.operands[:3]), op, "program ids are int32 scalars")
    _need(op.operands[3].type.dtype == dtypes.bool_, op, "the condition is a bool tile")


def _grid_dependency(op):
    _need(isinstance(op.attrs, GridDependencyAttrs) and op.attrs.action in GRID_DEPENDENCY_ACTIONS
          and not op.operands and not op.results, op, "grid_dependency() -> () with GridDependencyAttrs")


def _stash(op):
    _need(isinstance(op.attrs, StashAttrs) and not op.results and len(op.operands) == 2, op,
          "stash(tile, col) with StashAttrs and no results")
    t, col = op.operands[0].type, op.operands[1]
    _need(isinstance(t, TileType) and t.shape and _scalar(col) and col.type.dtype == dtypes.int32, op,
          "stash takes a tile and an int32 column")
    _need(op.attrs.width % t.shape[-1] == 0, op, "the row width is a multiple of the tile's")


def _cluster_rank(op):
    _arity(op, 0, 1)
    _need(isinstance(op.attrs, ClusterAttrs) and op.attrs.ctas > 1 and op.attrs.kind is None, op,
          "cluster_rank with ClusterAttrs(ctas > 1)")
    _need(_scalar(op.result) and op.result.type.dtype == dtypes.int32, op, "cluster_rank gives an int32 scalar")


def _cluster_reduce(op):
    _arity(op, 1, 1)
    _need(isinstance(op.attrs, ClusterAttrs) and op.attrs.ctas > 1
          and op.attrs.kind in (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MIN), op,
          "cluster_reduce with ClusterAttrs(ctas > 1, kind sum, max or min)")
    _need(op.result.type == op.operands[0].type, op, "cluster_reduce keeps its operand's type")


def _cluster_softmax(op):
    _need(len(op.operands) == 2 and len(op.results) == 2 and isinstance(op.attrs, ClusterAttrs)
          and op.attrs.ctas > 1 and op.attrs.kind is None, op, "cluster_softmax(m, s) -> (M, S) with ClusterAttrs")
    t = op.operands[0].type
    _need(t.dtype == dtypes.float32 and all(v.type == t for v in op.operands + op.results), op,
          "cluster_softmax's operands and results are float32 of one shape")


def _unstash(op):
    _arity(op, 1, 1)
    _need(isinstance(op.attrs, StashAttrs) and _scalar(op.operands[0]) and op.operands[0].type.dtype == dtypes.int32,
          op, "unstash(col: int32) with StashAttrs")
    t = op.result.type
    _need(isinstance(t, TileType) and t.shape and op.attrs.width % t.shape[-1] == 0, op,
          "unstash makes a tile whose width divides the row's")


def _scan(op):
    _arity(op, 1, 1)
    _need(isinstance(op.attrs, ScanAttrs) and op.attrs.kind in ("sum", "prod", "sort"), op, "attrs must be ScanAttrs")
    s = op.operands[0].type
    _need(isinstance(s, TileType) and 0 <= op.attrs.axis < len(s.shape), op, "axis out of range")
    _need(op.result.type == s, op, "the result has the operand's type")


def _reduce(op):
    _arity(op, 1, 1)
    _attrs(op, ReduceAttrs)
    s, r, a = op.operands[0].type, op.result.type, op.attrs
    _need(0 <= a.axis < len(s.shape), op, "axis out of range")
    shape = s.shape[:a.axis] + ((1,) if a.keepdims else ()) + s.shape[a.axis + 1:]
    _need(r.shape == shape, op, f"result shape must be {shape}")
    if a.kind in (ReduceKind.ARGMAX, ReduceKind.ARGMIN):
        _need(r.dtype == dtypes.int32, op, "arg-reductions give int32")


def _dot(op):
    _arity(op, 3, 1)
    _attrs(op, DotAttrs)
    a, b, acc = (v.type for v in op.operands)
    _need(len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0], op, "(M,K) @ (K,N)")
    _need(a.dtype == b.dtype, op, "operand dtypes differ")
    _need(acc == op.result.type == TileType((a.shape[0], b.shape[1]), acc.dtype), op, "acc type")
    _need(acc.dtype in (dtypes.float32, dtypes.int32) or a.dtype == acc.dtype == dtypes.float64, op,
          "accumulator must be float32 or int32 (float64 for float64 operands)")


def _region_yield(op, region: Block, types: list, lead: int = 0) -> None:
    _need(bool(region.ops) and region.ops[-1].op == TileOp.YIELD, op, "region must end with yield")
    vals = region.ops[-1].operands[lead:]
    _need([v.type for v in vals] == list(types), op, "yielded types must match the results")


def _for(op):
    _attrs(op, ForAttrs)
    _need(len(op.operands) >= 3 and len(op.regions) == 1, op, "for(lb, ub, step, *inits) {region}")
    lb, ub, step, *inits = op.operands
    _need(_scalar(lb) and lb.type.dtype.is_int and lb.type == ub.type == step.type, op,
          "bounds must be integer scalars of one dtype")
    region, types = op.regions[0], [v.type for v in inits]
    _need([r.type for r in op.results] == types, op, "results must match inits")
    _need([a.type for a in region.args] == [lb.type] + types, op, "region args must be (iv, *iters)")
    _region_yield(op, region, types)


def _if(op):
    _arity(op, 1, len(op.results))
    _need(_scalar(op.operands[0]) and op.operands[0].type.dtype.is_bool, op, "condition must be bool")
    _need(len(op.regions) == 2 and not any(r.args for r in op.regions), op, "two argument-less regions")
    for region in op.regions:
        _region_yield(op, region, [r.type for r in op.results])


def _while(op):
    types = [v.type for v in op.operands]
    _need(len(op.regions) == 1 and [r.type for r in op.results] == types, op, "results must match inits")
    region = op.regions[0]
    _need([a.type for a in region.args] == types, op, "region args must match inits")
    _region_yield(op, region, types, lead=1)
    cond = region.ops[-1].operands[0] if region.ops[-1].operands else None
    _need(cond is not None and _scalar(cond) and cond.type.dtype.is_bool, op, "yield must start with a bool")


SPEC = {TileOp.PROGRAM_ID: _grid, TileOp.NUM_PROGRAMS: _grid, TileOp.DIM: _dim,
        TileOp.CONSTANT: _constant, TileOp.SPLAT: _splat, TileOp.ARANGE: _arange,
        TileOp.LOAD: _load, TileOp.STORE: _store, TileOp.ATOMIC: _atomic, TileOp.SCAN: _scan, TileOp.PRINT: _print, TileOp.ASSERT: _assert,
        TileOp.GRID_DEPENDENCY: _grid_dependency,
        TileOp.STASH: _stash, TileOp.UNSTASH: _unstash,
        TileOp.CLUSTER_RANK: _cluster_rank, TileOp.CLUSTER_REDUCE: _cluster_reduce,
        TileOp.CLUSTER_SOFTMAX: _cluster_softmax,
        **{o: _elementwise for o in BINARY_OPS | COMPARE_OPS | UNARY_OPS},
        TileOp.FMA: _elementwise, TileOp.WHERE: _elementwise, TileOp.CAST: _elementwise, TileOp.BITCAST: _elementwise,
        TileOp.BROADCAST: _broadcast, TileOp.RESHAPE: _reshape, TileOp.TRANS: _trans,
        TileOp.REDUCE: _reduce, TileOp.DOT: _dot, TileOp.FOR: _for, TileOp.IF: _if,
        TileOp.WHILE: _while}


# --- walking -----------------------------------------------------------------------------------------
def verify(fn: Function) -> None:
    """Raise VerifyError if ``fn`` breaks an invariant of the tile IR."""
    for a in fn.args:
        if not isinstance(a.type, (ArrayType, TileType)) or (isinstance(a.type, TileType) and a.type.shape):
            raise VerifyError(f"function argument {a.hint or a} must be an array or a scalar")
    _verify_block(fn.body, {id(a) for a in fn.args}, in_region=False)


def _verify_block(block: Block, visible: set[int], in_region: bool) -> None:
    visible = visible | {id(a) for a in block.args}
    for i, op in enumerate(block.ops):
        for v in op.operands:
            _need(id(v) in visible, op, f"operand {v!r} is used before it is defined or out of scope")
        if op.op == TileOp.YIELD:
            _need(in_region and i == len(block.ops) - 1, op, "yield must end a region")
            continue
        check = SPEC.get(op.op)
        _need(check is not None, op, "not a tile-IR op")
        _need(not (in_region and op.op is TileOp.GRID_DEPENDENCY), op, "only in the function's top-level block")
        _need(bool(op.regions) == (op.op in (TileOp.FOR, TileOp.IF, TileOp.WHILE)), op,
              "only control ops have regions")
        check(op)
        for region in op.regions:
            _verify_block(region, visible, in_region=True)
        visible |= {id(r) for r in op.results}
