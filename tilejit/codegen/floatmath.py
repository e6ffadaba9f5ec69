"""float32 math for LLVM emission: the elementwise float ops as f32 -> f32 functions.

NVPTX has no libm, so the transcendentals are built here from PTX's approximate instructions
(``ex2.approx``, ``sin.approx``) with range reduction, or from short polynomials, each aiming
at a relative error of a few 1e-7 (absolute ~5e-7 for sin/cos over a few hundred periods):
  exp   Cody-Waite reduction by ln2 and a degree-7 polynomial, FMAs only (within 1 ulp);
        fast_math: 2**(x*log2 e) on ex2.approx with the product's rounding error folded back in
  log   x = m * 2**e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1), in float64
  sin   x = q*pi/2 + r, |r| <= pi/4, in float64: Cody-Waite with a three-part pi/2 below 2**20,
  cos   Payne-Hanek (integer product with 240 bits of 2/pi) above; then fdlibm's float64
        sin/cos polynomials on r, picked by q mod 4 (within 1 ulp of float32 over the whole range;
        sin(1e-8) is 1e-8, not the 0 of sin.approx)
  tanh  m / (m + 2) with m = expm1(2|x|), both in float64
"""
from __future__ import annotations

import math

from llvmlite import ir

from tilejit.codegen.base import F32, F64, I32, Ctx
from tilejit.ir import TileOp

LOG2E_HI, LOG2E_LO = 1.4426950216293335, 1.925963033500011e-08
LN2_HI, LN2_LO = 0.6931471824645996, -1.9046542121259336e-09
TWO_PI = (6.2831854820251465, -1.7484555314695172e-07, -7.105427357601002e-15)
SQRT_HALF_BITS = 0x3F3504F3                    # float32 bits of sqrt(1/2)


def f(value: float) -> ir.Constant:
    return ir.Constant(F32, value)


def _fabs(ctx: Ctx, x):
    return ctx.call("llvm.fabs.f32", F32, [x])


def _fma(ctx: Ctx, a, b, c):
    return ctx.call("llvm.fma.f32", F32, [a, b, c])


def _ex2(ctx: Ctx, x):
    return ctx.call("llvm.nvvm.ex2.approx.ftz.f", F32, [x])


def _exp_fast(ctx: Ctx, x):
    """2**(x*log2 e) on ex2.approx with the product's rounding error folded back in (2.9 ulp on
    the H200; subnormal results kept): ``fast_math=True``."""
    b = ctx.builder
    t = b.fmul(x, f(LOG2E_HI))
    # c = x*log2(e) - t exactly enough: fma recovers the product's rounding error
    c = b.fadd(_fma(ctx, x, f(LOG2E_HI), b.fneg(t)), b.fmul(x, f(LOG2E_LO)))
    # c only matters where 2**t is finite and normal; for huge or infinite x it is nan or huge
    c = b.select(b.fcmp_ordered("<", _fabs(ctx, t), f(256.0)), c, f(0.0))
    # ex2.approx flushes subnormal results to 0: below 2**-125 take 2**(t + 64) * 2**-64
    low = b.fcmp_ordered("<", t, f(-125.0))
    t = b.select(low, b.fadd(t, f(64.0)), t)
    value = b.fmul(_ex2(ctx, t), _fma(ctx, c, f(LN2_HI), f(1.0)))
    return b.select(low, b.fmul(value, f(2.0 ** -64)), value)


EXP_TAYLOR = [1.0 / math.factorial(k) for k in range(8)]     # e**r on |r| <= ln2/2: 5e-9 relative


def _pow2(ctx: Ctx, k):
    """2**k as float32 for an i32 ``k`` in [-126, 127] (the exponent field)."""
    b = ctx.builder
    return b.bitcast(b.shl(b.add(k, ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)


def exp(ctx: Ctx, x):
    """e**x within 1 ulp, from FMAs only: x = j*ln2 + r (Cody-Waite, |r| <= ln2/2), e**r by a
    degree-7 Taylor polynomial (Horner), times 2**j in two exact halves so that subnormal results
    round once and overflow gives inf.  ``fast_math=True`` takes ex2.approx instead."""
    if ctx.fast_math:
        return _exp_fast(ctx, x)
    b = ctx.builder
    # clamp (NaN passes: ordered compares are false): e**89 overflows, e**-104 rounds to 0
    x = b.select(b.fcmp_ordered(">", x, f(89.0)), f(89.0), x)
    x = b.select(b.fcmp_ordered("<", x, f(-104.0)), f(-104.0), x)
    j = ctx.call("llvm.rint.f32", F32, [b.fmul(x, f(LOG2E_HI))])
    r = _fma(ctx, j, f(-LN2_HI), x)
    r = _fma(ctx, j, f(-LN2_LO), r)
    p = f(EXP_TAYLOR[-1])
    for c in reversed(EXP_TAYLOR[1:-1]):
        p = _fma(ctx, p, r, f(c))
    p = _fma(ctx, p, r, f(1.0))
    k = b.fptosi(j, I32)
    k1 = b.ashr(k, ir.Constant(I32, 1))
    return b.fmul(b.fmul(p, _pow2(ctx, k1)), _pow2(ctx, b.sub(k, k1)))


def _log_parts(ctx: Ctx, x):
    """(e: f32, log(m): f32) with x = m * 2**e, m in [sqrt(1/2), sqrt(2)); for finite x > 0."""
    b = ctx.builder
    tiny = b.fcmp_ordered("<", x, f(2.0 ** -126))           # subnormal: scale into normal range
    scaled = b.select(tiny, b.fmul(x, f(2.0 ** 23)), x)
    bits = b.bitcast(scaled, I32)
    e = b.ashr(b.sub(bits, ir.Constant(I32, SQRT_HALF_BITS)), ir.Constant(I32, 23))
    m = b.bitcast(b.sub(bits, b.shl(e, ir.Constant(I32, 23))), F32)
    e = b.sitofp(b.sub(e, b.select(tiny, ir.Constant(I32, 23), ir.Constant(I32, 0))), F64)
    fm = b.fpext(b.fsub(m, f(1.0)), F64)                     # exact (Sterbenz)
    d = b.fadd(fm, _d(2.0))
    # s = fm / d to ~48 bits without a float64 division (a call ptxas serialises wgmma around):
    # a float32 quotient and one correction in float64
    s0 = b.fpext(ctx.fdiv(b.fptrunc(fm, F32), b.fptrunc(d, F32)), F64)
    rcp = b.fpext(ctx.fdiv(f(1.0), b.fptrunc(d, F32)), F64)
    s = ctx.call("llvm.fma.f64", F64, [ctx.call("llvm.fma.f64", F64, [b.fneg(s0), d, fm]), rcp, s0])
    z = b.fmul(s, s)
    poly = _d(2 / 15)
    for k in (13, 11, 9, 7, 5, 3, 1):                        # 2 atanh(s) = 2 (s + s**3/3 + ...)
        poly = ctx.call("llvm.fma.f64", F64, [poly, z, _d(2 / k)])
    return e, b.fmul(s, poly)


def _log_specials(ctx: Ctx, x, value):
    """log's special cases: 0 -> -inf, negative or nan -> nan, inf -> inf."""
    b = ctx.builder
    value = b.select(b.fcmp_ordered("==", x, f(0.0)), f(-math.inf), value)
    value = b.select(b.fcmp_unordered("<", x, f(0.0)), f(math.nan), value)
    return b.select(b.fcmp_ordered("==", x, f(math.inf)), f(math.inf), value)


def log(ctx: Ctx, x):
    """In float64 from e and log(m) (``_log_parts``), rounded once to float32."""
    e, log_m = _log_parts(ctx, x)
    value = ctx.call("llvm.fma.f64", F64, [e, _d(math.log(2)), log_m])
    return _log_specials(ctx, x, ctx.builder.fptrunc(value, F32))


def log2(ctx: Ctx, x):
    e, log_m = _log_parts(ctx, x)
    value = ctx.call("llvm.fma.f64", F64, [log_m, _d(1 / math.log(2)), e])
    return _log_specials(ctx, x, ctx.builder.fptrunc(value, F32))


def _reduce_two_pi(ctx: Ctx, x):
    b = ctx.builder
    k = ctx.call("llvm.rint.f32", F32, [b.fmul(x, f(1 / (2 * math.pi)))])
    minus_k = b.fneg(k)
    r = x
    for part in TWO_PI:
        r = _fma(ctx, minus_k, f(part), r)
    return r


def fast_sin(ctx: Ctx, x):
    """sin.approx after a 2pi range reduction: absolute error ~5e-7, so tiny x lose all digits."""
    return ctx.call("llvm.nvvm.sin.approx.f", F32, [_reduce_two_pi(ctx, x)])


def fast_cos(ctx: Ctx, x):
    return ctx.call("llvm.nvvm.cos.approx.f", F32, [_reduce_two_pi(ctx, x)])


# fdlibm: pi/2 in three 33-bit parts (q * part is exact for q < 2**20), 2/pi's first 240 bits,
# and the float64 kernels of sin and cos on [-pi/4, pi/4]
PIO2_PARTS = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
TWO_OVER_PI_240 = int("A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBB", 16)
SIN_POLY = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
            2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS_POLY = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
            -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
I128, I256 = ir.IntType(128), ir.IntType(256)


def _d(value: float) -> ir.Constant:
    return ir.Constant(F64, value)


def _reduce_pio2(ctx: Ctx, x):
    """(q mod 4 as i32, r as f64) with x = q * pi/2 + r and |r| <= pi/4 (for finite x)."""
    b = ctx.builder
    xd = b.fpext(x, F64)
    large = b.fcmp_ordered(">=", _fabs(ctx, x), f(2.0 ** 20))
    small_bb, large_bb, done = ctx.block("pio2.small"), ctx.block("pio2.large"), ctx.block("pio2.done")
    b.cbranch(large, large_bb, small_bb)

    b.position_at_end(small_bb)                 # Cody-Waite: every q * part is exact
    q = ctx.call("llvm.rint.f64", F64, [b.fmul(xd, _d(2 / math.pi))])
    r_small = xd
    for part in PIO2_PARTS:
        r_small = ctx.call("llvm.fma.f64", F64, [b.fneg(q), _d(part), r_small])
    q_small = b.fptosi(q, I32)
    small_end = b.block
    b.branch(done)

    b.position_at_end(large_bb)                 # Payne-Hanek: |x| = m * 2**e, e in [-3, 104]
    bits = b.bitcast(x, I32)
    ix = b.and_(bits, ir.Constant(I32, 0x7FFFFFFF))
    e = b.sub(b.lshr(ix, ir.Constant(I32, 23)), ir.Constant(I32, 150))
    m = b.zext(b.or_(b.and_(ix, ir.Constant(I32, 0x7FFFFF)), ir.Constant(I32, 0x800000)), I128)
    # x * 2/pi = m * P * 2**(e - 240): the 98 bits of P from 2**(144 - e) up give y mod 4 with
    # 96 fraction bits (the bits below add < 2**-72)
    shift = b.zext(b.sub(ir.Constant(I32, 144), e), I256)
    window = b.and_(b.trunc(b.lshr(ir.Constant(I256, TWO_OVER_PI_240), shift), I128),
                    ir.Constant(I128, (1 << 98) - 1))
    y = b.and_(b.mul(m, window), ir.Constant(I128, (1 << 98) - 1))
    q_large = b.trunc(b.lshr(y, ir.Constant(I128, 96)), I32)
    frac = b.and_(y, ir.Constant(I128, (1 << 96) - 1))
    upper = b.icmp_unsigned(">=", frac, ir.Constant(I128, 1 << 95))     # round to the nearest quadrant
    q_large = b.add(q_large, b.zext(upper, I32))
    frac = b.select(upper, b.sub(frac, ir.Constant(I128, 1 << 96)), frac)
    top = b.trunc(b.ashr(frac, ir.Constant(I128, 32)), ir.IntType(64))   # fraction * 2**64
    r_large = b.fmul(b.sitofp(top, F64), _d(2.0 ** -64 * math.pi / 2))
    negative = b.icmp_signed("<", bits, ir.Constant(I32, 0))
    r_large = b.select(negative, b.fneg(r_large), r_large)
    q_large = b.select(negative, b.neg(q_large), q_large)
    large_end = b.block
    b.branch(done)

    b.position_at_end(done)
    q = b.phi(I32)
    q.add_incoming(q_small, small_end)
    q.add_incoming(q_large, large_end)
    r = b.phi(F64)
    r.add_incoming(r_small, small_end)
    r.add_incoming(r_large, large_end)
    return b.and_(q, ir.Constant(I32, 3)), r


def _sin_cos_kernels(ctx: Ctx, r):
    """(sin r, cos r) in float64 for |r| <= pi/4."""
    b = ctx.builder
    z = b.fmul(r, r)

    def poly(coeffs):
        acc = _d(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = ctx.call("llvm.fma.f64", F64, [acc, z, _d(c)])
        return acc
    s = ctx.call("llvm.fma.f64", F64, [b.fmul(r, z), poly(SIN_POLY), r])
    c = ctx.call("llvm.fma.f64", F64, [b.fmul(z, z), poly(COS_POLY), b.fsub(_d(1.0), b.fmul(z, _d(0.5)))])
    return s, c


def _sin_or_cos(ctx: Ctx, x, phase: int):
    """sin(x) (phase 0) or cos(x) = sin(x + pi/2) (phase 1), to float32."""
    b = ctx.builder
    q, r = _reduce_pio2(ctx, x)
    s, c = _sin_cos_kernels(ctx, r)
    k = b.and_(b.add(q, ir.Constant(I32, phase)), ir.Constant(I32, 3))
    odd = b.icmp_unsigned("!=", b.and_(k, ir.Constant(I32, 1)), ir.Constant(I32, 0))
    value = b.select(odd, c, s)
    value = b.select(b.icmp_unsigned(">=", k, ir.Constant(I32, 2)), b.fneg(value), value)
    out = b.fptrunc(value, F32)
    if phase == 0:                                     # sin(-0.0) is -0.0
        out = b.select(b.fcmp_ordered("==", x, f(0.0)), x, out)
    finite = b.fcmp_ordered("<", _fabs(ctx, x), f(math.inf))
    return b.select(finite, out, f(math.nan))


def sin(ctx: Ctx, x):
    return fast_sin(ctx, x) if ctx.fast_math else _sin_or_cos(ctx, x, 0)


def cos(ctx: Ctx, x):
    return fast_cos(ctx, x) if ctx.fast_math else _sin_or_cos(ctx, x, 1)


def _expm1_f64(ctx: Ctx, y):
    """e**y - 1 in float64 for 0 <= y <= 20, to ~1e-15 relative: y = k ln2 + r with |r| <= ln2/2,
    expm1(r) by its Taylor series (no cancellation for small y: k = 0 gives it directly), then
    2**k (e**r) - 1 for k >= 1 (e**y >= 1.4 there, so the subtraction loses < 2 bits)."""
    b = ctx.builder
    k = ctx.call("llvm.rint.f64", F64, [b.fmul(y, _d(1 / math.log(2)))])
    r = ctx.call("llvm.fma.f64", F64, [b.fneg(k), _d(LN2_F64[0]), y])
    r = ctx.call("llvm.fma.f64", F64, [b.fneg(k), _d(LN2_F64[1]), r])
    poly = _d(1 / math.factorial(13))
    for n in range(12, 1, -1):
        poly = ctx.call("llvm.fma.f64", F64, [poly, r, _d(1 / math.factorial(n))])
    em1_r = ctx.call("llvm.fma.f64", F64, [b.fmul(r, r), poly, r])       # e**r - 1
    scale = b.bitcast(b.shl(b.add(b.fptosi(k, ir.IntType(64)), ir.Constant(ir.IntType(64), 1023)),
                            ir.Constant(ir.IntType(64), 52)), F64)           # 2**k
    big = b.fsub(ctx.call("llvm.fma.f64", F64, [scale, em1_r, scale]), _d(1.0))
    return b.select(b.fcmp_ordered("==", k, _d(0.0)), em1_r, big)


LN2_F64 = (6.93147180369123816490e-01, 1.90821492927058770002e-10)     # fdlibm ln2_hi, ln2_lo


def tanh(ctx: Ctx, x):
    """tanh |x| = m / (m + 2) with m = expm1(2|x|), in float64 (1 for |x| >= 9.5), rounded once;
    the division as a float32 quotient with one float64 correction (no float64 division)."""
    b = ctx.builder
    ax = _fabs(ctx, x)
    m = _expm1_f64(ctx, b.fpext(b.fmul(ctx.call("llvm.minnum.f32", F32, [ax, f(9.5)]), f(2.0)), F64))
    d = b.fadd(m, _d(2.0))
    q0 = b.fpext(ctx.fdiv(b.fptrunc(m, F32), b.fptrunc(d, F32)), F64)
    rcp = b.fpext(ctx.fdiv(f(1.0), b.fptrunc(d, F32)), F64)
    q = ctx.call("llvm.fma.f64", F64, [ctx.call("llvm.fma.f64", F64, [b.fneg(q0), d, m]), rcp, q0])
    t = b.select(b.fcmp_ordered(">=", ax, f(9.5)), f(1.0), b.fptrunc(q, F32))
    t = b.select(b.fcmp_unordered("!=", x, x), x, t)                     # nan stays nan
    return ctx.call("llvm.copysign.f32", F32, [t, x])


def sigmoid(ctx: Ctx, x):
    b = ctx.builder
    return ctx.fdiv(f(1.0), b.fadd(f(1.0), exp(ctx, b.fneg(x))))


def _exp2_f64(ctx: Ctx, t):
    """2**t in float64 for any float64 ``t`` (nan passes, |t| past 300 saturates: enough for a
    float32 result): t = k + r with |r| <= 1/2, 2**r = e**(r ln2) by a degree-13 Taylor polynomial
    (relative error below 1e-16), times 2**k from the exponent bits."""
    b = ctx.builder
    t = b.select(b.fcmp_ordered(">", t, _d(300.0)), _d(300.0), t)
    t = b.select(b.fcmp_ordered("<", t, _d(-300.0)), _d(-300.0), t)
    is_nan = b.fcmp_unordered("!=", t, t)
    t = b.select(is_nan, _d(0.0), t)
    k = ctx.call("llvm.rint.f64", F64, [t])
    u = b.fmul(b.fsub(t, k), _d(math.log(2)))                 # t - k is exact
    poly = _d(1 / math.factorial(13))
    for n in range(12, -1, -1):
        poly = ctx.call("llvm.fma.f64", F64, [poly, u, _d(1 / math.factorial(n))])
    i64 = ir.IntType(64)
    scale = b.bitcast(b.shl(b.add(b.fptosi(k, i64), ir.Constant(i64, 1023)), ir.Constant(i64, 52)), F64)
    return b.select(is_nan, _d(math.nan), b.fmul(poly, scale))


def _log2_f64(ctx: Ctx, x):
    """log2 x in float64 (about 47 bits) for float32 ``x >= 0`` or nan: -inf at 0, inf at inf."""
    b = ctx.builder
    e, log_m = _log_parts(ctx, x)
    value = ctx.call("llvm.fma.f64", F64, [log_m, _d(1 / math.log(2)), e])
    value = b.select(b.fcmp_ordered("==", x, f(0.0)), _d(-math.inf), value)
    value = b.select(b.fcmp_ordered("==", x, f(math.inf)), _d(math.inf), value)
    return b.select(b.fcmp_unordered("!=", x, x), _d(math.nan), value)


# erf on [1, 4] as a polynomial in t = (2|x| - 5) / 3 in [-1, 1]: a degree-22 Chebyshev
# least-squares fit to math.erf at 400 Chebyshev nodes, in monomial form (7.4e-14 absolute error)
ERF_1_4 = (0.999593047982561, 0.003267426347181794, -0.012252848797324713, 0.028181552083870815,
           -0.0436507737573713, 0.046453616828226324, -0.031876553427419255, 0.009267538031765683,
           0.006680706185495592, -0.00962149855488828, 0.004543994658228159, 0.000443048206245702,
           -0.0018265010457737291, 0.00091638351629285, 5.21157467898045e-05, -0.00028682856624505696,
           0.00011915503295772873, 2.4730178317441405e-05, -3.678001178750167e-05, 4.705439440318448e-06,
           5.117660950977648e-06, -1.077693760660547e-06, -2.9146107260520754e-07)
# erf(x) = x * sum_n c_n x**(2n) below 1: its Taylor series, 16 terms (relative error 2e-15)
ERF_TAYLOR = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(16))


def erf(ctx: Ctx, x):
    """erf in float64, rounded once: x times its Taylor series in x**2 below |x| = 1 (subnormal x
    and -0.0 keep their value and sign), a polynomial fit on [1, 4], and +-1 from 4 on (where the
    float32 result is 1); nan stays nan."""
    b = ctx.builder
    x64 = b.fpext(x, F64)
    ax = ctx.call("llvm.fabs.f64", F64, [x64])
    z = b.fmul(x64, x64)
    small = _d(ERF_TAYLOR[-1])
    for c in reversed(ERF_TAYLOR[:-1]):
        small = ctx.call("llvm.fma.f64", F64, [small, z, _d(c)])
    small = b.fmul(x64, small)
    t = ctx.call("llvm.fma.f64", F64, [ctx.call("llvm.minnum.f64", F64, [ax, _d(4.0)]), _d(2 / 3), _d(-5 / 3)])
    mid = _d(ERF_1_4[-1])
    for c in reversed(ERF_1_4[:-1]):
        mid = ctx.call("llvm.fma.f64", F64, [mid, t, _d(c)])
    mid = b.select(b.fcmp_ordered(">=", ax, _d(4.0)), _d(1.0), mid)
    value = b.select(b.fcmp_unordered("<", ax, _d(1.0)), small, ctx.call("llvm.copysign.f64", F64, [mid, x64]))
    return b.fptrunc(value, F32)


def pow_(ctx: Ctx, x, y, fast: bool | None = None):
    """C pow: 2**(y*log2|x|) with the sign of odd integer powers of negative x.  By default the
    product and the power are float64 (log2 to about 47 bits, so even a result near 2**128 is
    off by far less than a float32 ulp) and the result is rounded once; ``fast_math=True`` takes
    float32 and ex2.approx (about |y log2 x| * 2**-24 relative: 100+ ulp for large results), as do
    results rounded to 16 bits (``fast=True``: under 2**-17 relative, below their rounding)."""
    b = ctx.builder
    ax = _fabs(ctx, x)
    one = f(1.0)
    if ctx.fast_math if fast is None else fast:
        mag = _ex2(ctx, b.fmul(y, log2(ctx, ax)))
    else:
        mag = b.fptrunc(_exp2_f64(ctx, b.fmul(b.fpext(y, F64), _log2_f64(ctx, ax))), F32)
    mag = b.select(b.fcmp_ordered("==", ax, one), one, mag)          # (+-1) ** inf
    y_int = b.fcmp_ordered("==", ctx.call("llvm.floor.f32", F32, [y]), y)
    half = b.fmul(y, f(0.5))
    y_odd = b.and_(y_int, b.fcmp_ordered("!=", ctx.call("llvm.floor.f32", F32, [half]), half))
    sign_bit = b.icmp_signed("<", b.bitcast(x, I32), ir.Constant(I32, 0))       # -0.0 too
    value = b.select(b.and_(sign_bit, y_odd), b.fneg(mag), mag)
    finite_negative = b.and_(b.fcmp_ordered("<", x, f(0.0)), b.fcmp_ordered(">", x, f(-math.inf)))
    value = b.select(b.and_(finite_negative, b.not_(y_int)), f(math.nan), value)
    exact_one = b.or_(b.fcmp_ordered("==", x, one), b.fcmp_ordered("==", y, f(0.0)))
    return b.select(exact_one, one, value)


def _reduce_magnitude(ctx: Ctx, a, d):
    """fmod(a, d) for float64 ``a`` >= 0 finite and ``d`` > 0 finite and normal, exactly: a loop
    that, while a >= d, divides a by d' = d * 2**s (d's significand under a's exponent less 51,
    or d itself), so that the quotient is below 2**52 and exact once truncated, and replaces a by
    a - q d' (one FMA, exact: the remainder lies on d''s grid and within one d' of 0), adding d'
    back when the rounded quotient overshot.  Each turn takes 51 or more bits off a / d; at most
    42 turns across float64's range, one when a / d < 2**52."""
    b = ctx.builder
    pre, head, body, done = b.block, ctx.block("fmod.head"), ctx.block("fmod.body"), ctx.block("fmod.done")
    b.branch(head)
    b.position_at_end(head)
    r = b.phi(F64)
    b.cbranch(b.fcmp_ordered(">=", r, d), body, done)
    b.position_at_end(body)
    i64 = ir.IntType(64)
    field = ir.Constant(i64, 2047)

    def exponent(v):
        return b.and_(b.lshr(b.bitcast(v, i64), ir.Constant(i64, 52)), field)
    target = b.sub(exponent(r), ir.Constant(i64, 51))
    ed = exponent(d)
    target = b.select(b.icmp_signed(">", target, ed), target, ed)
    mantissa = b.and_(b.bitcast(d, i64), ir.Constant(i64, (1 << 52) - 1))
    scaled = b.bitcast(b.or_(mantissa, b.shl(target, ir.Constant(i64, 52))), F64)
    q = ctx.call("llvm.trunc.f64", F64, [b.fdiv(r, scaled)])
    rest = ctx.call("llvm.fma.f64", F64, [b.fneg(q), scaled, r])
    rest = b.select(b.fcmp_ordered("<", rest, ir.Constant(F64, 0.0)), b.fadd(rest, scaled), rest)
    b.branch(head)
    r.add_incoming(a, pre)
    r.add_incoming(rest, body)
    b.position_at_end(done)
    return r


def exact_fmod(ctx: Ctx, x, y):
    """C's ``fmod`` of float64 values, exact (NVPTX's ``frem`` is ``x - trunc(x / y) * y``, which
    loses the remainder once x / y passes 2**53): NaN for a NaN, an infinite x or y = 0, x for an
    infinite y, else the sign of x on ``_reduce_magnitude``.  A subnormal |y| first reduces by
    |y| * 2**60 (a multiple of it, normal), then both sides are scaled by 2**600 for the rest
    (exact: the remainder is then below 2**-900)."""
    b = ctx.builder

    def c(v):
        return ir.Constant(F64, v)
    a, d = ctx.call("llvm.fabs.f64", F64, [x]), ctx.call("llvm.fabs.f64", F64, [y])
    nan = b.or_(b.fcmp_unordered("uno", x, y),
                b.or_(b.fcmp_ordered("==", a, c(math.inf)), b.fcmp_ordered("==", d, c(0.0))))
    keep = b.fcmp_ordered("==", d, c(math.inf))
    skip = b.or_(nan, keep)
    a = b.select(skip, c(0.0), a)
    d = b.select(skip, c(1.0), d)
    tiny = b.fcmp_ordered("<", d, c(2.0 ** -960))
    coarse = _reduce_magnitude(ctx, a, b.select(tiny, b.fmul(d, c(2.0 ** 60)), d))
    scale = b.select(tiny, c(2.0 ** 600), c(1.0))
    fine = _reduce_magnitude(ctx, b.fmul(coarse, scale), b.fmul(d, scale))
    r = ctx.call("llvm.copysign.f64", F64, [b.fmul(fine, b.select(tiny, c(2.0 ** -600), c(1.0))), x])
    return b.select(nan, c(math.nan), b.select(keep, x, r))


def floor_divmod(ctx: Ctx, a, d):
    """NumPy's float divmod (npy_divmod): (floor quotient, modulo) of float32 or float64 values,
    in their own precision as NumPy computes them, the remainder from ``exact_fmod`` (exact in
    float64, so exact for float32 operands too)."""
    b = ctx.builder
    t = a.type
    zero, one = ir.Constant(t, 0.0), ir.Constant(t, 1.0)
    if t == F64:
        mod = exact_fmod(ctx, a, d)
    else:
        mod = b.fptrunc(exact_fmod(ctx, b.fpext(a, F64), b.fpext(d, F64)), t)
    div = ctx.fdiv(b.fsub(a, mod), d)
    fix = b.and_(b.fcmp_unordered("!=", mod, zero),
                 b.xor(b.fcmp_ordered("<", d, zero), b.fcmp_ordered("<", mod, zero)))
    copysign = "llvm.copysign.f64" if t == F64 else "llvm.copysign.f32"
    signed_zero = ctx.call(copysign, t, [zero, d])
    mod = b.select(fix, b.fadd(mod, d), b.select(b.fcmp_unordered("!=", mod, zero), mod, signed_zero))
    div = b.select(fix, b.fsub(div, one), div)
    floor = ctx.call("llvm.floor.f64" if t == F64 else "llvm.floor.f32", t, [div])
    floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), ir.Constant(t, 0.5)), b.fadd(floor, one), floor)
    quotient = ctx.fdiv(a, d)
    zero_div = ctx.call(copysign, t, [zero, quotient])
    floor = b.select(b.fcmp_unordered("!=", div, zero), floor, zero_div)
    return b.select(b.fcmp_ordered("==", d, zero), quotient, floor), mod


FLOAT_UNARY = {
    TileOp.NEG: lambda ctx, x: ctx.builder.fneg(x),
    TileOp.ABS: _fabs,
    TileOp.EXP: exp,
    TileOp.EXP2: _ex2,
    TileOp.LOG: log,
    TileOp.LOG2: log2,
    TileOp.SQRT: lambda ctx, x: ctx.call("llvm.sqrt.f32", F32, [x]),            # sqrt.rn (IEEE)
    TileOp.RSQRT: lambda ctx, x: ctx.call("llvm.nvvm.rsqrt.approx.f", F32, [x]),  # rel err 2**-22.9
    TileOp.SIN: sin,
    TileOp.COS: cos,
    TileOp.TANH: tanh,
    TileOp.SIGMOID: sigmoid,
    TileOp.ERF: erf,
    TileOp.FLOOR: lambda ctx, x: ctx.call("llvm.floor.f32", F32, [x]),        # cvt.rmi (exact)
    TileOp.CEIL: lambda ctx, x: ctx.call("llvm.ceil.f32", F32, [x]),          # cvt.rpi
    TileOp.TRUNC: lambda ctx, x: ctx.call("llvm.trunc.f32", F32, [x]),        # cvt.rzi
    TileOp.ROUND: lambda ctx, x: ctx.call("llvm.rint.f32", F32, [x]),         # cvt.rni: half to even
}


def _exp_narrow(ctx: Ctx, x):
    """e**x for a result rounded to 16 bits: ex2.approx(x * log2 e).  The product's rounding
    moves the result by |x| * 2**-24 relative (<= 2**-17.5 for any finite result), ex2.approx by
    ~2 float32 ulps: both far below half a bfloat16 (2**-9) or float16 (2**-11) ulp.  bfloat16
    has float32's exponent range, so results below 2**-126 (which ex2.approx flushes) are
    scaled as in ``_exp_fast``."""
    b = ctx.builder
    t = b.fmul(x, f(LOG2E_HI))
    low = b.fcmp_ordered("<", t, f(-125.0))
    value = _ex2(ctx, b.select(low, b.fadd(t, f(64.0)), t))
    return b.select(low, b.fmul(value, f(2.0 ** -64)), value)


# ops whose float32 result is rounded to a 16-bit float (float16, bfloat16, float8) take a cheap
# form whose error (a few float32 ulps, i.e. 2**-13 of a bfloat16 ulp or less) the rounding hides
# but for near-ties: memory-bound kernels on 16-bit data would otherwise be bound by the math
NARROW_UNARY = {TileOp.EXP: _exp_narrow}
NARROW_BINARY = {TileOp.TRUEDIV: lambda ctx, a, c: ctx.call("llvm.nvvm.div.full", F32, [a, c]),   # <= 2 ulp
                 TileOp.POW: lambda ctx, a, c: pow_(ctx, a, c, fast=True)}


FLOAT_BINARY = {
    TileOp.ADD: lambda ctx, a, c: ctx.builder.fadd(a, c),
    TileOp.SUB: lambda ctx, a, c: ctx.builder.fsub(a, c),
    TileOp.MUL: lambda ctx, a, c: ctx.builder.fmul(a, c),
    TileOp.TRUEDIV: lambda ctx, a, c: ctx.fdiv(a, c),             # div.rn (IEEE), div.full with wgmma
    TileOp.FLOORDIV: lambda ctx, a, c: floor_divmod(ctx, a, c)[0],
    TileOp.MOD: lambda ctx, a, c: floor_divmod(ctx, a, c)[1],
    TileOp.POW: pow_,
    TileOp.MAXIMUM: lambda ctx, a, c: ctx.call("llvm.maximum.f32", F32, [a, c]),  # max.NaN.f32
    TileOp.MINIMUM: lambda ctx, a, c: ctx.call("llvm.minimum.f32", F32, [a, c]),
}
