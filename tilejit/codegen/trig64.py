"""float64 sine and cosine for LLVM emission (NVPTX has no libm).

The argument is reduced to x = q * pi/2 + (y0 + y1), |y0 + y1| <= pi/4, as a double-double:
  |x| < 2**20   fdlibm's three-step Cody-Waite reduction by pi/2 in 33-bit parts (each product
                exact), the rounding of every step carried into the tail;
  larger        Payne-Hanek: the 192 bits of 2/pi that matter for |x|'s exponent, from a table
                of 2/pi's first 1,280 bits in global memory, times x's 53-bit significand in
                integers; the product's fraction (190 bits) becomes a double-double times pi/2.
Then fdlibm's sin and cos kernels on [-pi/4, pi/4], with the tail, picked by q mod 4.  Within
about 1 ulp of the correctly rounded result over float64's whole range (``tests/test_float64_math.py``
measures it on the host, with this same LLVM).
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

from llvmlite import ir

from tilejit.codegen.base import F64, I32, Ctx
from tilejit.codegen.floatmath import COS_POLY, SIN_POLY

I64, I128, I256 = ir.IntType(64), ir.IntType(128), ir.IntType(256)
TABLE_BITS = 1280                     # bits of 2/pi after the point; |x| < 2**1024 needs 1,163
TABLE_SYMBOL = "tilejit_two_over_pi"


def _two_over_pi(bits: int) -> int:
    """floor(2/pi * 2**bits), from Machin's formula in integers (64 guard bits)."""
    n = bits + 64

    def atan_inverse(k: int) -> int:                    # atan(1/k) * 2**n
        total, term, i, sign = 0, (1 << n) // k, 1, 1
        while term:
            total += sign * (term // i)
            term //= k * k
            i, sign = i + 2, -sign
        return total
    pi = 16 * atan_inverse(5) - 4 * atan_inverse(239)
    return (1 << (n + bits + 1)) // pi


TWO_OVER_PI = _two_over_pi(TABLE_BITS)
# 64-bit limbs from the least significant, with two zero limbs above (2/pi < 1: its integer bits)
LIMBS = tuple((TWO_OVER_PI >> (64 * k)) & ((1 << 64) - 1) for k in range(TABLE_BITS // 64)) + (0, 0)


def _pio2_parts() -> tuple:
    """fdlibm's pi/2 split: 33-bit leading parts (q * part exact for q < 2**20) and the rounded
    rest after each, from the table's 2/pi (pi/2 = 1 / (2/pi))."""
    pio2 = Fraction(1 << TABLE_BITS, TWO_OVER_PI)
    parts = []
    for _ in range(3):
        bits = struct.unpack("<q", struct.pack("<d", float(pio2)))[0] & ~((1 << 20) - 1)
        lead = struct.unpack("<d", struct.pack("<q", bits))[0]          # 33 significant bits
        pio2 -= Fraction(lead)
        parts.append((lead, float(pio2)))
    return tuple(parts)


PIO2_STEPS = _pio2_parts()            # ((pio2_1, pio2_1t), (pio2_2, pio2_2t), (pio2_3, pio2_3t))
PIO2_HI = float(Fraction(1 << TABLE_BITS, TWO_OVER_PI))
PIO2_LO = float(Fraction(1 << TABLE_BITS, TWO_OVER_PI) - Fraction(PIO2_HI))


def _d(value: float) -> ir.Constant:
    return ir.Constant(F64, value)


def _fma(ctx: Ctx, a, b, c):
    return ctx.call("llvm.fma.f64", F64, [a, b, c])


def _table(ctx: Ctx) -> ir.GlobalVariable:
    existing = ctx.module.globals.get(TABLE_SYMBOL)
    if existing is not None:
        return existing
    kind = ir.ArrayType(I64, len(LIMBS))
    table = ir.GlobalVariable(ctx.module, kind, TABLE_SYMBOL, addrspace=1)
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(kind, [ir.Constant(I64, v) for v in LIMBS])
    table.align = 8
    return table


def _cody_waite(ctx: Ctx, x):
    """(q, y0, y1) for |x| < 2**20: x - q p1 is exact (Sterbenz: q p1 is exact and within a
    factor 2 of x), then the 33-bit parts p2 and p3 (exact products) and p3's rounded rest are
    taken off by TwoSum, the roundings gathered in the tail."""
    b = ctx.builder
    q = ctx.call("llvm.rint.f64", F64, [b.fmul(x, _d(2 / math.pi))])
    (p1, _), (p2, _), (p3, p3t) = PIO2_STEPS
    s = _fma(ctx, b.fneg(q), _d(p1), x)
    tail = _d(0.0)
    for part in (p2, p3, p3t):
        w = b.fneg(b.fmul(q, _d(part)))
        total = b.fadd(s, w)
        back = b.fsub(total, s)
        tail = b.fadd(tail, b.fadd(b.fsub(s, b.fsub(total, back)), b.fsub(w, back)))
        s = total
    y0 = b.fadd(s, tail)
    return b.fptosi(q, I32), y0, b.fsub(tail, b.fsub(y0, s))


def _payne_hanek(ctx: Ctx, x):
    """(q, y0, y1) for 2**20 <= |x| < inf."""
    b = ctx.builder
    bits = b.bitcast(x, I64)
    biased = b.and_(b.lshr(bits, ir.Constant(I64, 52)), ir.Constant(I64, 2047))
    m = b.or_(b.and_(bits, ir.Constant(I64, (1 << 52) - 1)), ir.Constant(I64, 1 << 52))
    # |x| = m * 2**e, e = biased - 1075 in [-32, 971]; the window starts at bit
    # TABLE_BITS - e - 190 of the table (the bits above it add multiples of 4 to x * 2/pi)
    lo = b.sub(ir.Constant(I64, TABLE_BITS - 190 + 1075), biased)
    limb, shift = b.lshr(lo, ir.Constant(I64, 6)), b.and_(lo, ir.Constant(I64, 63))
    table = _table(ctx)
    kind = ir.ArrayType(I64, len(LIMBS))
    window = ir.Constant(I256, 0)
    for k in range(4):
        at = b.gep(table, [ir.Constant(I32, 0), b.trunc(b.add(limb, ir.Constant(I64, k)), I32)], source_etype=kind)
        word = b.zext(b.load(at, typ=I64), I256)
        window = b.or_(window, b.shl(word, ir.Constant(I256, 64 * k)) if k else word)
    window = b.lshr(window, b.zext(shift, I256))
    w = [b.trunc(b.lshr(window, ir.Constant(I256, 64 * k)), I64) for k in range(3)]
    m128 = b.zext(m, I128)
    y = ir.Constant(I256, 0)
    for k in range(3):                                # m * window mod 2**192
        p = b.zext(b.mul(m128, b.zext(w[k], I128)), I256)
        y = b.add(y, b.shl(p, ir.Constant(I256, 64 * k)) if k else p)
    y = b.and_(y, ir.Constant(I256, (1 << 192) - 1))
    q = b.trunc(b.lshr(y, ir.Constant(I256, 190)), I32)
    frac = b.and_(y, ir.Constant(I256, (1 << 190) - 1))
    up = b.icmp_unsigned(">=", frac, ir.Constant(I256, 1 << 189))   # to the nearest quadrant
    q = b.add(q, b.zext(up, I32))
    frac = b.select(up, b.sub(frac, ir.Constant(I256, 1 << 190)), frac)  # signed, |frac| <= 2**189
    # frac * 2**-190 as three exact 52-bit pieces, summed into a double-double
    a = b.ashr(frac, ir.Constant(I256, 137))
    rest = b.sub(frac, b.shl(a, ir.Constant(I256, 137)))
    c = b.lshr(rest, ir.Constant(I256, 85))
    d = b.and_(b.lshr(rest, ir.Constant(I256, 33)), ir.Constant(I256, (1 << 52) - 1))
    big = b.fmul(b.sitofp(b.trunc(a, I64), F64), _d(2.0 ** -53))
    mid = b.fmul(b.uitofp(b.trunc(c, I64), F64), _d(2.0 ** -105))
    low = b.fmul(b.uitofp(b.trunc(d, I64), F64), _d(2.0 ** -157))
    s = b.fadd(big, mid)
    err = b.fsub(mid, b.fsub(s, big))                 # exact: |big| >= |mid| or big = 0
    hi = b.fadd(s, b.fadd(err, low))
    lo_part = b.fsub(b.fadd(err, low), b.fsub(hi, s))
    # times pi/2 as a double-double
    rh = b.fmul(hi, _d(PIO2_HI))
    rl = b.fadd(_fma(ctx, hi, _d(PIO2_HI), b.fneg(rh)), _fma(ctx, hi, _d(PIO2_LO), b.fmul(lo_part, _d(PIO2_HI))))
    y0 = b.fadd(rh, rl)
    y1 = b.fsub(rl, b.fsub(y0, rh))
    negative = b.icmp_signed("<", bits, ir.Constant(I64, 0))
    return (b.select(negative, b.neg(q), q), b.select(negative, b.fneg(y0), y0),
            b.select(negative, b.fneg(y1), y1))


def _reduce(ctx: Ctx, x):
    """(q mod 4, y0, y1) with x = q pi/2 + y0 + y1 for finite x (any value for inf and NaN)."""
    b = ctx.builder
    finite = b.fcmp_ordered("<", ctx.call("llvm.fabs.f64", F64, [x]), _d(math.inf))
    x = b.select(finite, x, _d(0.0))
    large = b.fcmp_ordered(">=", ctx.call("llvm.fabs.f64", F64, [x]), _d(2.0 ** 20))
    small_bb, large_bb, done = ctx.block("pio2d.small"), ctx.block("pio2d.large"), ctx.block("pio2d.done")
    b.cbranch(large, large_bb, small_bb)
    results = []
    for block, reduce in ((small_bb, _cody_waite), (large_bb, _payne_hanek)):
        b.position_at_end(block)
        values = reduce(ctx, x)
        results.append((values, b.block))
        b.branch(done)
    b.position_at_end(done)
    out = []
    for i, kind in enumerate((I32, F64, F64)):
        phi = b.phi(kind)
        for values, block in results:
            phi.add_incoming(values[i], block)
        out.append(phi)
    return b.and_(out[0], ir.Constant(I32, 3)), out[1], out[2]


def _kernel_sin(ctx: Ctx, x, y):
    """fdlibm __kernel_sin(x, y, 1): sin(x + y) for |x + y| <= pi/4, y the tail."""
    b = ctx.builder
    z = b.fmul(x, x)
    v = b.fmul(z, x)
    r = _d(SIN_POLY[-1])
    for c in reversed(SIN_POLY[1:-1]):
        r = _fma(ctx, r, z, _d(c))
    inner = b.fsub(b.fmul(z, b.fsub(b.fmul(_d(0.5), y), b.fmul(v, r))), y)
    return b.fsub(x, b.fsub(inner, b.fmul(v, _d(SIN_POLY[0]))))


def _kernel_cos(ctx: Ctx, x, y):
    """fdlibm __kernel_cos(x, y): cos(x + y) for |x + y| <= pi/4."""
    b = ctx.builder
    z = b.fmul(x, x)
    r = _d(COS_POLY[-1])
    for c in reversed(COS_POLY[:-1]):
        r = _fma(ctx, r, z, _d(c))
    r = b.fmul(z, r)
    zr_xy = b.fsub(b.fmul(z, r), b.fmul(x, y))
    near = b.fsub(_d(1.0), b.fsub(b.fmul(_d(0.5), z), zr_xy))
    # |x| >= 0.3: 1 - qx - (z/2 - qx - (z r - x y)), qx = |x|/4 to 21 bits (0.28125 above 0.78125)
    ax = ctx.call("llvm.fabs.f64", F64, [x])
    quarter = b.bitcast(b.and_(b.sub(b.bitcast(ax, I64), ir.Constant(I64, 0x0020000000000000)),
                               ir.Constant(I64, ~((1 << 32) - 1))), F64)
    qx = b.select(b.fcmp_ordered(">", ax, _d(0.78125)), _d(0.28125), quarter)
    far = b.fsub(b.fsub(_d(1.0), qx), b.fsub(b.fsub(b.fmul(_d(0.5), z), qx), zr_xy))
    return b.select(b.fcmp_ordered("<", ax, _d(0.3)), near, far)


def sin_or_cos(ctx: Ctx, x, phase: int):
    """sin(x) (phase 0) or cos(x) (phase 1) of a float64 value; NaN for inf and NaN, sin(-0) = -0."""
    b = ctx.builder
    q, y0, y1 = _reduce(ctx, x)
    k = b.and_(b.add(q, ir.Constant(I32, phase)), ir.Constant(I32, 3))
    odd = b.icmp_unsigned("!=", b.and_(k, ir.Constant(I32, 1)), ir.Constant(I32, 0))
    value = b.select(odd, _kernel_cos(ctx, y0, y1), _kernel_sin(ctx, y0, y1))
    value = b.select(b.icmp_unsigned(">=", k, ir.Constant(I32, 2)), b.fneg(value), value)
    if phase == 0:
        value = b.select(b.fcmp_ordered("==", x, _d(0.0)), x, value)
    finite = b.fcmp_ordered("<", ctx.call("llvm.fabs.f64", F64, [x]), _d(math.inf))
    return b.select(finite, value, _d(math.nan))
