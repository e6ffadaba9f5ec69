"""Elementwise ops (``SimtOp.ELEMENTWISE``) on one register: the tile IR's NumPy semantics in LLVM.

Integer ops follow NumPy: ``//`` and ``%`` floor (and give 0 for a zero divisor), shifts by
the bit width or more give 0 (or the sign for ``>>`` of a negative number), arithmetic wraps.
Float ops on float16/bfloat16/float8 are computed in float32 and rounded once, which gives the
correctly rounded result for ``+ - * / sqrt``.  Transcendentals are built from the PTX
approximate instructions plus range reduction (see ``codegen.floatmath``) to a relative
error of a few 1e-7.
"""
from __future__ import annotations

from llvmlite import ir

from tilejit.codegen.base import F32, F64, I1, Ctx, convert, from_f32, reg_type, to_f32
from tilejit.codegen import trig64
from tilejit.codegen.floatmath import FLOAT_BINARY, FLOAT_UNARY, NARROW_BINARY, NARROW_UNARY, floor_divmod
from tilejit import dtypes as D
from tilejit.dtypes import DType
from tilejit.ir import COMPARE_OPS, PREDICATE_OPS, TileOp

_FLOAT_PRED = {TileOp.EQ: "==", TileOp.LT: "<", TileOp.LE: "<=", TileOp.GT: ">", TileOp.GE: ">="}
_INT_PRED = {TileOp.EQ: "==", TileOp.NE: "!=", TileOp.LT: "<", TileOp.LE: "<=", TileOp.GT: ">",
             TileOp.GE: ">="}


def elementwise(ctx: Ctx, op: TileOp, args: list, arg_dtypes: list[DType], out: DType) -> ir.Value:
    """One register of ``op(*args)``; ``arg_dtypes`` are the operands' dtypes, ``out`` the result's."""
    if op == TileOp.CAST:
        return convert(ctx, args[0], arg_dtypes[0], out)
    if op == TileOp.BITCAST:                          # same width: float8 and int8 are both i8
        return args[0] if args[0].type == reg_type(out) else ctx.builder.bitcast(args[0], reg_type(out))
    if op == TileOp.WHERE:
        a, b = (convert(ctx, v, dt, out) for v, dt in zip(args[1:], arg_dtypes[1:]))
        return ctx.builder.select(args[0], a, b)
    if op in COMPARE_OPS:
        return _compare(ctx, op, args[0], args[1], arg_dtypes[0])
    if op in PREDICATE_OPS:
        return _predicate(ctx, op, to_f32(ctx, args[0], arg_dtypes[0]))
    # float math on integers (``/``, exp, ...) converts the operands to the float result first
    args = [convert(ctx, v, dt, out) for v, dt in zip(args, arg_dtypes)]
    if out == D.float64:
        return _double_op(ctx, op, args)
    if out.is_float:
        if op in FLOAT_UNARY or op in FLOAT_BINARY or op == TileOp.FMA:
            wide = [to_f32(ctx, v, out) for v in args]
            if out.bits < 32 and op in NARROW_UNARY:
                return from_f32(ctx, NARROW_UNARY[op](ctx, wide[0]), out)
            if out.bits < 32 and op in NARROW_BINARY:
                return from_f32(ctx, NARROW_BINARY[op](ctx, wide[0], wide[1]), out)
            return from_f32(ctx, _float_op(ctx, op, wide), out)
    elif op == TileOp.FMA:
        b = ctx.builder
        return b.add(b.mul(args[0], args[1]), args[2])
    elif op in INT_BINARY:
        return INT_BINARY[op](ctx, args[0], args[1], out)
    elif op in INT_UNARY:
        return INT_UNARY[op](ctx, args[0], out)
    raise ctx.error(f"{op.name.lower()} is not defined for {out.name}")


_DOUBLE = {TileOp.ADD: "fadd", TileOp.SUB: "fsub", TileOp.MUL: "fmul", TileOp.TRUEDIV: "fdiv"}
_DOUBLE_CALLS = {TileOp.ABS: "llvm.fabs.f64", TileOp.SQRT: "llvm.sqrt.f64", TileOp.FLOOR: "llvm.floor.f64",
                 TileOp.CEIL: "llvm.ceil.f64", TileOp.TRUNC: "llvm.trunc.f64", TileOp.ROUND: "llvm.rint.f64",
                 TileOp.MAXIMUM: "llvm.maximum.f64", TileOp.MINIMUM: "llvm.minimum.f64"}


def _double_op(ctx: Ctx, op: TileOp, args: list) -> ir.Value:
    """float64 arithmetic: IEEE ops and the exact intrinsics (the frontend refuses the others)."""
    b = ctx.builder
    if op in _DOUBLE:
        return getattr(b, _DOUBLE[op])(*args)
    if op == TileOp.NEG:
        return b.fneg(args[0])
    if op == TileOp.FMA:
        return ctx.call("llvm.fma.f64", F64, args)
    if op in _DOUBLE_CALLS:
        return ctx.call(_DOUBLE_CALLS[op], F64, args)
    if op in (TileOp.FLOORDIV, TileOp.MOD):
        return floor_divmod(ctx, *args)[op == TileOp.MOD]
    if op in (TileOp.SIN, TileOp.COS):
        return trig64.sin_or_cos(ctx, args[0], int(op == TileOp.COS))
    raise ctx.error(f"{op.name.lower()} is not supported for float64")


def _float_op(ctx: Ctx, op: TileOp, wide: list) -> ir.Value:
    if op == TileOp.FMA:
        return ctx.call("llvm.fma.f32", F32, wide)
    if op in FLOAT_UNARY:
        return FLOAT_UNARY[op](ctx, wide[0])
    return FLOAT_BINARY[op](ctx, wide[0], wide[1])


def _compare(ctx: Ctx, op: TileOp, a, b, dt: DType) -> ir.Value:
    bld = ctx.builder
    if dt.is_float:
        a, b = to_f32(ctx, a, dt), to_f32(ctx, b, dt)
        if op == TileOp.NE:
            return bld.fcmp_unordered("!=", a, b)      # NumPy: nan != x is True
        return bld.fcmp_ordered(_FLOAT_PRED[op], a, b)
    if dt.kind == "i":
        return bld.icmp_signed(_INT_PRED[op], a, b)
    return bld.icmp_unsigned(_INT_PRED[op], a, b)        # unsigned and bool


def _predicate(ctx: Ctx, op: TileOp, x) -> ir.Value:
    """isnan: unordered with itself; isinf / isfinite: |x| == / < inf, ordered (NaN: False)."""
    bld = ctx.builder
    if op == TileOp.ISNAN:
        return bld.fcmp_unordered("uno", x, x)
    name = "llvm.fabs.f64" if x.type == F64 else "llvm.fabs.f32"
    magnitude = ctx.call(name, x.type, [x])
    return bld.fcmp_ordered("==" if op == TileOp.ISINF else "<", magnitude, ir.Constant(x.type, float("inf")))


# ------------------------------------------------------------------------------------ integer ops
# The switch: True divides and takes the modulo by a constant power of two with a shift and a
# mask (``_floor_divmod``); False keeps the general form for every divisor.
POW2_DIVMOD = True


def _c(v, value: int) -> ir.Constant:
    return ir.Constant(v.type, value)


def _floor_divmod(ctx: Ctx, a, d, dt: DType):
    """NumPy floor division and modulo; a zero divisor gives 0 for both, and MIN // -1 wraps.
    By a constant power of two ``2**s``: a shift right by ``s`` (arithmetic for signed types:
    floor, for negative dividends too) and the low ``s`` bits (two's complement: the floor
    modulo, never negative), which LLVM does not find from the general form (a warp-specialised
    loop's ring slot and phase, ``t % S`` and ``t // S``: ten instructions instead of three)."""
    b = ctx.builder
    if POW2_DIVMOD and isinstance(d, ir.Constant) and isinstance(d.constant, int) and d.constant > 0 \
            and d.constant & (d.constant - 1) == 0 and dt.kind in "iu":
        s = d.constant.bit_length() - 1
        q = (b.ashr if dt.kind == "i" else b.lshr)(a, _c(a, s)) if s else a
        return q, b.and_(a, _c(a, d.constant - 1))
    zero = b.icmp_unsigned("==", d, _c(d, 0))
    if dt.kind != "i":
        safe = b.select(zero, _c(d, 1), d)
        return b.select(zero, _c(a, 0), b.udiv(a, safe)), b.urem(a, safe)
    minus_one = b.icmp_signed("==", d, _c(d, -1))
    safe = b.select(b.or_(zero, minus_one), _c(d, 1), d)   # sdiv is UB for those two
    q, r = b.sdiv(a, safe), b.srem(a, safe)
    # C truncates toward zero; floor needs one step down when the remainder's sign differs
    adjust = b.and_(b.icmp_signed("!=", r, _c(r, 0)),
                    b.icmp_signed("<", b.xor(r, d), _c(r, 0)))
    q = b.sub(q, b.zext(adjust, q.type))
    r = b.add(r, b.select(adjust, d, _c(d, 0)))
    q = b.select(zero, _c(a, 0), b.select(minus_one, b.neg(a), q))
    return q, r


def _shift(ctx: Ctx, a, s, dt: DType, left: bool):
    b = ctx.builder
    too_far = b.icmp_unsigned(">=", s, _c(s, dt.bits))      # also catches negative amounts
    clamped = b.select(too_far, _c(s, dt.bits - 1), s)
    if left:
        return b.select(too_far, _c(a, 0), b.shl(a, clamped))
    if dt.kind == "i":
        return b.ashr(a, clamped)                          # sign fill, like NumPy
    return b.select(too_far, _c(a, 0), b.lshr(a, clamped))


def _int_pow(ctx: Ctx, base, exp, dt: DType):
    """Square-and-multiply.  NumPy raises for a negative exponent; like the interpreter we
    truncate as C would: 1 for base 1, +-1 for base -1, else 0."""
    b, entry = ctx.builder, ctx.builder.block
    head, body, done = ctx.block("ipow.head"), ctx.block("ipow.body"), ctx.block("ipow.done")
    b.branch(head)
    b.position_at_end(head)
    acc, sq, e = b.phi(base.type), b.phi(base.type), b.phi(exp.type)
    more = (b.icmp_signed(">", e, _c(e, 0)) if dt.kind == "i"
            else b.icmp_unsigned("!=", e, _c(e, 0)))
    b.cbranch(more, body, done)
    b.position_at_end(body)
    odd = b.trunc(e, I1)
    acc2 = b.select(odd, b.mul(acc, sq), acc)
    sq2, e2 = b.mul(sq, sq), b.lshr(e, _c(e, 1))
    b.branch(head)
    acc.add_incoming(_c(base, 1), entry)
    acc.add_incoming(acc2, body)
    sq.add_incoming(base, entry)
    sq.add_incoming(sq2, body)
    e.add_incoming(exp, entry)
    e.add_incoming(e2, body)
    b.position_at_end(done)
    if dt.kind != "i":
        return acc
    odd = b.trunc(exp, I1)
    minus_one_pow = b.select(odd, _c(base, -1), _c(base, 1))
    truncated = b.select(b.icmp_signed("==", base, _c(base, 1)), _c(base, 1),
                         b.select(b.icmp_signed("==", base, _c(base, -1)), minus_one_pow, _c(base, 0)))
    return b.select(b.icmp_signed("<", exp, _c(exp, 0)), truncated, acc)


def _int_min_max(ctx: Ctx, a, c, dt: DType, want_max: bool):
    b = ctx.builder
    cmp = b.icmp_signed if dt.kind == "i" else b.icmp_unsigned
    return b.select(cmp(">" if want_max else "<", a, c), a, c)


def _bool_or_int(int_fn, bool_fn):
    """NumPy bool arithmetic is logical: ``+`` is or, ``*`` is and."""
    return lambda ctx, a, c, dt: (bool_fn if dt.is_bool else int_fn)(ctx.builder, a, c)


INT_BINARY = {
    TileOp.ADD: _bool_or_int(ir.IRBuilder.add, ir.IRBuilder.or_),
    TileOp.SUB: _bool_or_int(ir.IRBuilder.sub, ir.IRBuilder.xor),
    TileOp.MUL: _bool_or_int(ir.IRBuilder.mul, ir.IRBuilder.and_),
    TileOp.AND: lambda ctx, a, c, dt: ctx.builder.and_(a, c),
    TileOp.OR: lambda ctx, a, c, dt: ctx.builder.or_(a, c),
    TileOp.XOR: lambda ctx, a, c, dt: ctx.builder.xor(a, c),
    TileOp.FLOORDIV: lambda ctx, a, c, dt: _floor_divmod(ctx, a, c, dt)[0],
    TileOp.MOD: lambda ctx, a, c, dt: _floor_divmod(ctx, a, c, dt)[1],
    TileOp.SHL: lambda ctx, a, c, dt: _shift(ctx, a, c, dt, left=True),
    TileOp.SHR: lambda ctx, a, c, dt: _shift(ctx, a, c, dt, left=False),
    TileOp.POW: _int_pow,
    TileOp.MAXIMUM: lambda ctx, a, c, dt: _int_min_max(ctx, a, c, dt, True),
    TileOp.MINIMUM: lambda ctx, a, c, dt: _int_min_max(ctx, a, c, dt, False),
}


def _int_abs(ctx: Ctx, a, dt: DType):
    if dt.kind != "i":
        return a
    b = ctx.builder
    return b.select(b.icmp_signed("<", a, _c(a, 0)), b.neg(a), a)   # abs(MIN) wraps to MIN


def _int_neg(ctx: Ctx, a, dt: DType):
    if dt.is_bool:
        raise ctx.error("negation is not defined for bool (use ~ for logical not)")
    return ctx.builder.neg(a)


INT_UNARY = {
    TileOp.NEG: _int_neg,
    TileOp.INVERT: lambda ctx, a, dt: ctx.builder.not_(a),        # i1: logical not
    TileOp.ABS: _int_abs,
}
