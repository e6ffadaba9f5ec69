"""Math functions built from the compiler's primitives (exp, log, sqrt, arithmetic, where): every
backend runs the same composition, so there is nothing to add to the IR, the interpreter, the
emulator or codegen.  Each computes in float32 (16-bit and integer inputs are widened, the
result has ``dtypes.float_result`` of the input, as ``tj.exp``'s does), or in float64 for float64
tiles where a float64 form is written (erfc and general ``**`` are refused there).

    log1p expm1 sinh cosh atan atan2 asin acos pow erfc     (float32; all but the last two float64 too)
    exp exp2 log log2 tanh sigmoid erf rsqrt of float64     (the primitives serve the other dtypes)

Accuracy in float32 (``tests/test_mathlib.py`` measures it against NumPy in float64 on the CPU
backends, whose primitives are correctly rounded): log1p and expm1 by Kahan's
``x * log(u) / (u - 1)`` forms, sinh from expm1 below |x| = 1 and from ``exp(|x| / 2)`` squared
above (no overflow before float32's own), cosh from ``exp(|x| / 2)``, atan by Cephes' reduction
to |x| <= tan(pi/8) and its cubic polynomial, atan2 / asin / acos from atan with the quadrant
(NumPy's results for infinities; signed zeros are not distinguished), and pow is ``x ** y``.
float64 atan is fdlibm's (1 ulp), and asin / acos / atan2 are built on it as above (2 / 2 / 1 ulp).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

from tilejit import dtypes
from tilejit.frontend.semantics import (_broadcast, _check_operand, _no_float64, binary, convert, predicate,
                                       result_dtype, shape_of, unary, where)
from tilejit.ir import Value

PI, PIO2, PIO4, LN2 = math.pi, math.pi / 2, math.pi / 4, math.log(2)


def _widen(b, x, name: str, wide: bool = False):
    """(x as float32, the result dtype) for a math function of ``x``; float64 stays float64 when
    the function is ``wide`` (built on exp and log alone), else it is refused."""
    _check_operand(b, x, f"{name}()")
    if not isinstance(x, Value):
        x = convert(b, x, dtypes.python_scalar_dtype(x), ())
    out = dtypes.float_result(x.type.dtype)
    if out == dtypes.float64:
        if wide:
            return convert(b, x, out, x.type.shape), out
        _no_float64(b, f"tj.{name}")
    return convert(b, x, dtypes.float32, x.type.shape), out


def _exp(b, x):
    return _exp64(b, x) if x.type.dtype == dtypes.float64 else unary(b, "exp", x)


def _log(b, x):
    return _log64(b, x) if x.type.dtype == dtypes.float64 else unary(b, "log", x)


def _done(b, r: Value, out) -> Value:
    return convert(b, r, out, r.type.shape)


def _log1p(b, x):
    u = binary(b, "+", x, 1.0)
    d = binary(b, "-", u, 1.0)
    kahan = binary(b, "*", _log(b, u), binary(b, "/", x, d))
    r = where(b, binary(b, "==", d, 0.0), x, kahan)
    return where(b, binary(b, "==", x, math.inf), x, r)          # inf / inf would be NaN


def _expm1(b, x):
    u = _exp(b, x)
    d = binary(b, "-", u, 1.0)
    kahan = binary(b, "*", d, binary(b, "/", x, _log(b, u)))
    r = where(b, binary(b, "==", u, 1.0), x, kahan)
    r = where(b, binary(b, "==", d, -1.0), -1.0, r)
    return where(b, binary(b, "==", u, math.inf), u, r)


def _half_exp(b, a):
    """(h, h * h / 2) with h = exp(a / 2): e**a / 2 without overflow below float32's own."""
    h = _exp(b, binary(b, "*", a, 0.5))
    return h, binary(b, "*", binary(b, "*", h, 0.5), h)


def _sinh(b, x):
    a = unary(b, "abs", x)
    m = _expm1(b, a)
    small = binary(b, "*", binary(b, "+", m, binary(b, "/", m, binary(b, "+", m, 1.0))), 0.5)
    h, half = _half_exp(b, a)
    large = binary(b, "-", half, binary(b, "/", binary(b, "/", 0.5, h), h))
    r = where(b, binary(b, "<", a, 1.0), small, large)
    return where(b, binary(b, "<", x, 0.0), unary(b, "-", r), r)


def _cosh(b, x):
    h, half = _half_exp(b, unary(b, "abs", x))
    return binary(b, "+", half, binary(b, "/", binary(b, "/", 0.5, h), h))


def _atan32(b, x):
    """Cephes ``atanf``: |x| > tan(3pi/8): pi/2 - atan(1/|x|); > tan(pi/8): pi/4 + atan((|x|-1)/(|x|+1))."""
    a = unary(b, "abs", x)
    far, mid = binary(b, ">", a, 2.414213562373095), binary(b, ">", a, 0.4142135623730950)
    z = where(b, far, unary(b, "-", binary(b, "/", 1.0, a)),
              where(b, mid, binary(b, "/", binary(b, "-", a, 1.0), binary(b, "+", a, 1.0)), a))
    base = where(b, far, PIO2, where(b, mid, PIO4, 0.0))
    zz = binary(b, "*", z, z)
    p = 8.05374449538e-2
    for c in (-1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1):
        p = binary(b, "+", binary(b, "*", p, zz), c)
    r = binary(b, "+", base, binary(b, "+", binary(b, "*", binary(b, "*", p, zz), z), z))
    r = where(b, predicate(b, "isnan", x), x, r)
    return where(b, binary(b, "<", x, 0.0), unary(b, "-", r), r)


# fdlibm's s_atan.c: atan on [-7/16, 7/16] by x - x s(x²), s odd in x² to x**22 (aT), and the
# breakpoints atan(1/2), atan(1), atan(3/2), pi/2 as hi + lo pairs
ATAN_T = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
          -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
          6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
          -3.65315727442169155270e-02, 1.62858201153657823623e-02)
ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01, 9.82793723247329054082e-01,
           1.57079632679489655800e+00)
ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17, 1.39033110312309984516e-17,
           6.12323399573676603587e-17)


def _atan64(b, x):
    """fdlibm's atan of float64: |x| reduced by the nearest of 1/2, 1, 3/2 and infinity
    ((2|x| - 1) / (2 + |x|), (|x| - 1) / (|x| + 1), (|x| - 3/2) / (1 + 3|x|/2), -1 / |x|), then
    atan(b) + atan(t) with atan(b) in two parts; |x| below 7/16 directly."""
    a = unary(b, "abs", x)
    cases = [binary(b, ">=", a, 0.4375), binary(b, ">=", a, 0.6875), binary(b, ">=", a, 1.1875),
             binary(b, ">=", a, 2.4375)]
    t = x
    for case, reduced in zip(cases, (
            binary(b, "/", binary(b, "-", binary(b, "*", a, 2.0), 1.0), binary(b, "+", a, 2.0)),
            binary(b, "/", binary(b, "-", a, 1.0), binary(b, "+", a, 1.0)),
            binary(b, "/", binary(b, "-", a, 1.5), binary(b, "+", binary(b, "*", a, 1.5), 1.0)),
            binary(b, "/", -1.0, binary(b, "maximum", a, 1e-300)))):
        t = where(b, case, reduced, t)
    z = binary(b, "*", t, t)
    w = binary(b, "*", z, z)
    odd, even = ATAN_T[0::2], ATAN_T[1::2]
    s1 = odd[-1]
    for c in odd[-2::-1]:
        s1 = binary(b, "+", binary(b, "*", s1, w), c)
    s2 = even[-1]
    for c in even[-2::-1]:
        s2 = binary(b, "+", binary(b, "*", s2, w), c)
    ts = binary(b, "*", t, binary(b, "+", binary(b, "*", z, s1), binary(b, "*", w, s2)))
    direct = binary(b, "-", t, ts)
    hi, lo = (convert(b, v, F64, x.type.shape) for v in (ATAN_HI[0], ATAN_LO[0]))
    for case, h, l in zip(cases[1:], ATAN_HI[1:], ATAN_LO[1:]):
        hi, lo = where(b, case, h, hi), where(b, case, l, lo)
    shifted = binary(b, "-", hi, binary(b, "-", binary(b, "-", ts, lo), t))
    r = where(b, cases[0], shifted, direct)
    r = where(b, binary(b, ">=", a, 2.0 ** 66), ATAN_HI[3] + ATAN_LO[3], r)
    r = where(b, binary(b, "&", cases[0], binary(b, "<", x, 0.0)), unary(b, "-", r), r)
    return where(b, predicate(b, "isnan", x), x, r)


def _atan(b, x):
    return _atan64(b, x) if x.type.dtype == F64 else _atan32(b, x)


def _atan2(b, y, x):
    """atan2 from atan(y / x) and the quadrant, in y's float dtype (float32 or float64)."""
    shape = _broadcast(b, shape_of(y), shape_of(x))

    def choose(cond, p, q):                       # constants in the operands' dtype, not float32's
        return where(b, cond, convert(b, p, y.type.dtype, shape), convert(b, q, y.type.dtype, shape))
    base = _atan(b, binary(b, "/", y, x))
    toward = choose(binary(b, "<", y, 0.0), -PI, PI)
    r = where(b, binary(b, "<", x, 0.0), binary(b, "+", base, toward), base)
    r = where(b, binary(b, "==", x, 0.0), where(b, binary(b, "==", y, 0.0), convert(b, 0.0, y.type.dtype, shape),
                                                 choose(binary(b, "<", y, 0.0), -PIO2, PIO2)), r)
    both = binary(b, "&", predicate(b, "isinf", x), predicate(b, "isinf", y))
    corner = choose(binary(b, "<", x, 0.0), 3 * PIO4, PIO4)
    r = where(b, both, where(b, binary(b, "<", y, 0.0), unary(b, "-", corner), corner), r)
    nan = binary(b, "|", predicate(b, "isnan", x), predicate(b, "isnan", y))
    return where(b, nan, binary(b, "+", x, y), r)


def _side(b, x):
    """sqrt((1 - x) * (1 + x)): the other leg for asin and acos, exact-ish near |x| = 1."""
    return unary(b, "sqrt", binary(b, "*", binary(b, "-", 1.0, x), binary(b, "+", 1.0, x)))


def _unary(fn, name, wide: bool = False):
    def build(b, x):
        xf, out = _widen(b, x, name, wide)
        return _done(b, fn(b, xf), out)
    return build


def _tanh64(b, x):
    """tanh from expm1 of -2|x| (no overflow, no cancellation): -m / (m + 2), sign restored."""
    m = _expm1(b, binary(b, "*", unary(b, "abs", x), -2.0))
    r = binary(b, "/", unary(b, "-", m), binary(b, "+", m, 2.0))
    r = where(b, binary(b, "<", x, 0.0), unary(b, "-", r), r)
    return where(b, binary(b, "==", x, 0.0), x, r)


def _sigmoid64(b, x):
    return binary(b, "/", 1.0, binary(b, "+", 1.0, _exp64(b, unary(b, "-", x))))


def atan2(b, y, x):
    for v in (y, x):
        _check_operand(b, v, "atan2()")
    out = dtypes.float_result(result_dtype(b, [y, x]))
    shape = _broadcast(b, shape_of(y), shape_of(x))
    wide = dtypes.float64 if out == dtypes.float64 else dtypes.float32
    return _done(b, _atan2(b, convert(b, y, wide, shape), convert(b, x, wide, shape)), out)


# --- float64 exp and log (every backend: arithmetic, round, bitcast and integer shifts only)
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10     # LN2_HI * k exact for |k| < 2**11
F64 = dtypes.float64
I64 = dtypes.int64


def _pow2(b, k):
    """2.0**k for an int64 tile ``k`` in [-1022, 1023], from its bits."""
    return _bits_f64(b, binary(b, "<<", binary(b, "+", k, 1023), 52))


def _bits_f64(b, bits):
    from tilejit.frontend.semantics import bitcast_to
    return bitcast_to(b, bits, F64)


def _f64_bits(b, x):
    from tilejit.frontend.semantics import bitcast_to
    return bitcast_to(b, x, I64)


def _exp64(b, x, base2: bool = False):
    """e**x (2**x when ``base2``): x = k ln 2 + r with |r| <= 0.35 (k = round(x / ln 2), r in two
    parts; for 2**x, k = round(x) and r = (x - k) ln 2), e**r by Taylor to r**13 (the next term is
    below 2**-60 of the result), scaled by 2**k in two steps so that subnormal and
    near-overflow results are reached."""
    if base2:
        k = unary(b, "round", x)
        k = where(b, predicate(b, "isfinite", k), k, 0.0)
        f = binary(b, "-", x, k)
        r = binary(b, "+", binary(b, "*", f, LN2_HI), binary(b, "*", f, LN2_LO))
        top, bottom = 1024.0, -1075.0
    else:
        k = unary(b, "round", binary(b, "*", x, 1 / math.log(2)))
        k = where(b, predicate(b, "isfinite", k), k, 0.0)
        r = binary(b, "-", binary(b, "-", x, binary(b, "*", k, LN2_HI)), binary(b, "*", k, LN2_LO))
        top, bottom = 709.782712893384, -745.2
    p = 1.0 / math.factorial(13)
    for n in range(12, -1, -1):
        p = binary(b, "+", binary(b, "*", p, r), 1.0 / math.factorial(n))
    ki = convert(b, binary(b, "minimum", binary(b, "maximum", k, -2000.0), 2000.0), I64, x.type.shape)
    half = binary(b, ">>", ki, 1)                                  # floor(k / 2)
    e = binary(b, "*", binary(b, "*", p, _pow2(b, half)), _pow2(b, binary(b, "-", ki, half)))
    e = where(b, binary(b, ">=" if base2 else ">", x, top), math.inf, e)
    e = where(b, binary(b, "<", x, bottom), 0.0, e)
    return where(b, predicate(b, "isnan", x), x, e)


def _exponent_and_fraction(b, x):
    """(e, f) with x = 2**e (1 + f) for float64 ``x`` > 0, 1 + f in [sqrt(1/2), sqrt(2)), from the
    bits (subnormals scaled by 2**54 first); e an int64 tile, f exact."""
    tiny = binary(b, "<", x, 2.2250738585072014e-308)
    bits = _f64_bits(b, where(b, tiny, binary(b, "*", x, 2.0 ** 54), x))
    e = binary(b, "-", binary(b, "&", binary(b, ">>", bits, 52), 2047), 1023)
    e = where(b, tiny, binary(b, "-", e, 54), e)
    m = _bits_f64(b, binary(b, "|", binary(b, "&", bits, (1 << 52) - 1), 1023 << 52))
    big = binary(b, ">", m, math.sqrt(2))
    m = where(b, big, binary(b, "*", m, 0.5), m)
    return where(b, big, binary(b, "+", e, 1), e), binary(b, "-", m, 1.0)


def _log64(b, x, base2: bool = False):
    """ln x (log2 x when ``base2``): x = 2**e * m with m in [sqrt(1/2), sqrt(2)) from the bits
    (subnormals scaled by 2**54 first); with f = m - 1 (exact) and s = f / (2 + f), |s| < 0.172,
    ln m = f - (f²/2 - s (f²/2 + R)) as fdlibm writes it, R = 2s²/3 + 2s⁴/5 + ... to s**24."""
    e, f = _exponent_and_fraction(b, x)
    s = binary(b, "/", f, binary(b, "+", f, 2.0))                  # ln(1 + f) = 2 atanh(s)
    ss = binary(b, "*", s, s)
    p = 2.0 / 25
    for n in range(23, 2, -2):
        p = binary(b, "+", binary(b, "*", p, ss), 2.0 / n)
    big_r = binary(b, "*", p, ss)                                   # 2s²/3 + 2s⁴/5 + ...
    hfsq = binary(b, "*", binary(b, "*", f, f), 0.5)
    tail = binary(b, "*", s, binary(b, "+", hfsq, big_r))            # fdlibm: ln(1+f) = f - (hfsq - tail)
    ef = convert(b, e, F64, x.type.shape)
    if base2:
        part = binary(b, "-", f, binary(b, "-", hfsq, tail))
        r = binary(b, "+", ef, binary(b, "*", part, 1 / math.log(2)))
    else:
        r = binary(b, "-", binary(b, "*", ef, LN2_HI),
                   binary(b, "-", binary(b, "-", hfsq, binary(b, "+", tail, binary(b, "*", ef, LN2_LO))), f))
    r = where(b, binary(b, "==", x, 0.0), -math.inf, r)
    r = where(b, binary(b, "==", x, math.inf), x, r)
    return where(b, binary(b, "|", binary(b, "<", x, 0.0), predicate(b, "isnan", x)), math.nan, r)


SPLITTER = 134217729.0                # 2**27 + 1: Veltkamp's split of a float64 into 26 + 27 bits


def _two_sum(b, p, q):
    """(s, e) with s = p + q rounded and p + q = s + e exactly (Knuth's TwoSum)."""
    s = binary(b, "+", p, q)
    back = binary(b, "-", s, p)
    return s, binary(b, "+", binary(b, "-", p, binary(b, "-", s, back)), binary(b, "-", q, back))


def _split(b, p):
    if isinstance(p, float):                       # a constant: split in Python's float64
        c = p * SPLITTER
        return c - (c - p), p - (c - (c - p))
    c = binary(b, "*", p, SPLITTER)
    hi = binary(b, "-", c, binary(b, "-", c, p))
    return hi, binary(b, "-", p, hi)


def _two_prod(b, p, q):
    """(r, e) with r = p * q rounded and p * q = r + e exactly (Dekker's product; no FMA, so the
    CPU backends stay vectorised; |p|, |q| below 2**996)."""
    r = binary(b, "*", p, q)
    ph, pl = _split(b, p)
    qh, ql = _split(b, q)
    e = binary(b, "+", binary(b, "-", binary(b, "*", ph, qh), r), binary(b, "*", ph, ql))
    e = binary(b, "+", binary(b, "+", e, binary(b, "*", pl, qh)), binary(b, "*", pl, ql))
    return r, e


TWO_THIRDS = (2 / 3, float(Fraction(2, 3) - Fraction(2 / 3)))


def _log64_double(b, a):
    """ln a for float64 ``a`` > 0 finite as a double-double (hi, lo), to about 2**-66 relative:
    a = 2**e m as in ``_log64``, s = f / (2 + f) with its rounding error, ln m = 2s + (2/3)s³ +
    s⁵ P(s²), the first two terms in double-double, the rest (below 6e-5 of the whole) plain."""
    e, f = _exponent_and_fraction(b, a)
    d_hi = binary(b, "+", f, 2.0)
    d_lo = binary(b, "-", f, binary(b, "-", d_hi, 2.0))            # exact: |f| < 2
    s_hi = binary(b, "/", f, d_hi)
    p, pe = _two_prod(b, s_hi, d_hi)
    residual = binary(b, "-", binary(b, "-", binary(b, "-", f, p), pe), binary(b, "*", s_hi, d_lo))
    s_lo = binary(b, "/", residual, d_hi)
    c_hi, c_lo = _two_prod(b, s_hi, s_hi)                           # s²
    t_hi, t_e = _two_prod(b, c_hi, s_hi)                            # s³
    t_lo = binary(b, "+", t_e, binary(b, "+", binary(b, "*", c_lo, s_hi), binary(b, "*", binary(b, "*", c_hi, s_lo), 3.0)))
    u_hi, u_e = _two_prod(b, t_hi, TWO_THIRDS[0])                   # (2/3) s³
    u_lo = binary(b, "+", u_e, binary(b, "+", binary(b, "*", t_hi, TWO_THIRDS[1]), binary(b, "*", t_lo, TWO_THIRDS[0])))
    poly = 2.0 / 25
    for n in range(23, 4, -2):
        poly = binary(b, "+", binary(b, "*", poly, c_hi), 2.0 / n)
    rest = binary(b, "*", binary(b, "*", binary(b, "*", c_hi, c_hi), s_hi), poly)
    h, h_e = _two_sum(b, binary(b, "*", s_hi, 2.0), u_hi)
    lo = binary(b, "+", binary(b, "+", h_e, binary(b, "*", s_lo, 2.0)), binary(b, "+", u_lo, rest))
    ef = convert(b, e, F64, a.type.shape)
    hi, hi_e = _two_sum(b, binary(b, "*", ef, LN2_HI), h)         # e * LN2_HI is exact
    lo = binary(b, "+", binary(b, "+", hi_e, lo), binary(b, "*", ef, LN2_LO))
    top = binary(b, "+", hi, lo)
    return top, binary(b, "-", lo, binary(b, "-", top, hi))


def power(b, x, y):
    """``x ** y`` (the operator and ``tj.pow``): ``pow64`` for float64 results but for NumPy's
    fast-path constant exponents, the ``**`` primitive otherwise."""
    from tilejit.frontend.semantics import FLOAT64_POWERS
    for v in (x, y):
        _check_operand(b, v, "operator **")
    if result_dtype(b, [x, y]) != F64 or (isinstance(y, (int, float)) and not isinstance(y, bool)
                                          and y in FLOAT64_POWERS):
        return binary(b, "**", x, y)
    shape = _broadcast(b, shape_of(x), shape_of(y))
    return pow64(b, convert(b, x, F64, shape), convert(b, y, F64, shape))


def pow64(b, x, y):
    """C's pow (NumPy's ``power``) of float64 tiles of one shape: exp(y ln|x|) with ln|x| and
    its product by y in double-double, exp of the high part times (1 + the low part): within 2 ulp
    up to overflow and into the subnormals; the sign of odd integer powers of negative x, NaN
    for other powers of finite negative x, and C's results for zeros, infinities, 1 and NaN."""
    a = unary(b, "abs", x)
    regular = binary(b, "&", binary(b, ">", a, 0.0), binary(b, "<", a, math.inf))
    l_hi, l_lo = _log64_double(b, where(b, regular, a, 1.0))
    y_safe = where(b, binary(b, "<", unary(b, "abs", y), 2.0 ** 900), y, 0.0)
    z_hi, z_e = _two_prod(b, y_safe, l_hi)
    z_lo = binary(b, "+", z_e, binary(b, "*", y_safe, l_lo))
    z_hi = where(b, binary(b, "<", unary(b, "abs", y), 2.0 ** 900), z_hi, binary(b, "*", y, l_hi))
    z_lo = where(b, binary(b, "<", unary(b, "abs", z_hi), 800.0), z_lo, 0.0)
    e = _exp64(b, z_hi)
    mag = binary(b, "+", e, binary(b, "*", e, z_lo))
    mag = where(b, binary(b, "<", e, math.inf), mag, e)
    positive_y = binary(b, ">", y, 0.0)
    mag = where(b, binary(b, "==", a, 0.0), where(b, positive_y, 0.0, math.inf), mag)
    mag = where(b, binary(b, "==", a, math.inf), where(b, positive_y, math.inf, 0.0), mag)
    y_inf = binary(b, "==", unary(b, "abs", y), math.inf)
    grows = binary(b, "==", binary(b, ">", a, 1.0), positive_y)
    mag = where(b, y_inf, where(b, binary(b, "==", a, 1.0), 1.0, where(b, grows, math.inf, 0.0)), mag)
    y_int = binary(b, "==", unary(b, "floor", y), y)
    half = binary(b, "*", y, 0.5)
    y_odd = binary(b, "&", y_int, binary(b, "!=", unary(b, "floor", half), half))
    negative = binary(b, "<", _f64_bits(b, x), 0)                  # -0.0 too
    value = where(b, binary(b, "&", negative, y_odd), unary(b, "-", mag), mag)
    undefined = binary(b, "&", binary(b, "&", binary(b, "<", x, 0.0), binary(b, ">", x, -math.inf)),
                       binary(b, "==", y_int, False))
    value = where(b, undefined, math.nan, value)
    value = where(b, binary(b, "|", predicate(b, "isnan", x), predicate(b, "isnan", y)), binary(b, "+", x, y), value)
    return where(b, binary(b, "|", binary(b, "==", y, 0.0), binary(b, "==", x, 1.0)), 1.0, value)


# Numerical Recipes' Chebyshev fit of erfc (fractional error below 1.2e-7 for every x >= 0):
# erfc(z) = t exp(-z² + P(t)), t = 1 / (1 + z/2), P of degree 9 with these coefficients
ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
            1.48851587, -0.82215223, 0.17087277)


def erfc(b, x):
    """``tj.erfc``: 1 - erf(x) without the cancellation, for float32 and narrower results.  The
    fit is evaluated in float64 with the float64 exp (z² is exact there, so exp(-z²) keeps its
    relative accuracy where erfc is tiny): within 2.3 ulp of float32 down to its subnormals;
    2 - erfc(-x) for x < 0."""
    if isinstance(x, Value) and x.type.dtype == F64:
        return _erfc64(b, x)
    xf, out = _widen(b, x, "erfc")
    z = unary(b, "abs", convert(b, xf, F64, xf.type.shape))
    t = binary(b, "/", 1.0, binary(b, "+", binary(b, "*", z, 0.5), 1.0))
    p = ERFC_FIT[-1]
    for c in ERFC_FIT[-2::-1]:
        p = binary(b, "+", binary(b, "*", p, t), c)
    r = binary(b, "*", t, _exp64(b, binary(b, "+", unary(b, "-", binary(b, "*", z, z)), p)))
    r = where(b, binary(b, "<", xf, 0.0), binary(b, "-", 2.0, r), r)
    return _done(b, where(b, predicate(b, "isnan", xf), convert(b, xf, F64, xf.type.shape), r), out)


def _exp_neg_square(b, a):
    """exp(-a²) for float64 ``a`` >= 0, a² split so that its rounding does not count: a = h + l
    with h's low 27 bits clear, h² exact, and exp(-h²) exp(-l (a + h))."""
    h = _bits_f64(b, binary(b, "&", _f64_bits(b, a), ~((1 << 27) - 1)))
    l = binary(b, "-", a, h)
    return binary(b, "*", _exp64(b, unary(b, "-", binary(b, "*", h, h))),
                  _exp64(b, unary(b, "-", binary(b, "*", l, binary(b, "+", a, h)))))


ERF_TAYLOR, ERF_SPLIT, ERF_ONE = 30, 1.5, 6.0
ERFC_FRACTION, ERFC_FAR = 24, 4.0          # continued-fraction terms from 4 on: relative error < 1e-17
ERFCX_CENTRES = tuple(0.75 + 0.5 * k for k in range(7))     # Taylor pieces of width 1/2 over [0.5, 4)
ERFCX_TERMS = 20                                             # |h| <= 1/4: the 20th term is below 2**-60


def _erf_coefficients(terms: int) -> tuple:
    """2/sqrt(pi) (-1)^n / (n! (2n+1)), each rounded once (2/sqrt(pi) to 40 digits)."""
    from decimal import Decimal, localcontext
    with localcontext() as ctx:
        ctx.prec = 40
        k = Decimal("1.128379167095512573896158903121545171688")
        return tuple(float(k * (-1) ** n / (math.factorial(n) * (2 * n + 1))) for n in range(terms + 1))


ERF_COEFFICIENTS = _erf_coefficients(ERF_TAYLOR)


@functools.cache
def _erfcx_taylor() -> tuple:
    """For each centre c, the Taylor coefficients t_n of g(x) = exp(x²) erfc(x) at c, rounded
    once from 90-digit decimals: t_0 = g(c) (erfc(c) from erf's series), t_1 = 2c t_0 - 2/sqrt(pi),
    and (n + 1) t_(n+1) = 2c t_n + 2 t_(n-1) (from g' = 2x g - 2/sqrt(pi))."""
    from decimal import Decimal, localcontext
    with localcontext() as ctx:
        ctx.prec = 90
        root_pi = (Decimal(_pi_times(300)) / Decimal(2) ** 300).sqrt()
        pieces = []
        for centre in ERFCX_CENTRES:
            c = Decimal(centre)
            total, n, term = Decimal(0), 0, c                  # erf(c) = 2/sqrt(pi) sum ...
            while n < 8 or abs(term) > Decimal(10) ** -88:
                term = (-1) ** n * c ** (2 * n + 1) / (math.factorial(n) * (2 * n + 1))
                total += term
                n += 1
            t = [(1 - 2 * total / root_pi) * (c * c).exp()]
            t.append(2 * c * t[0] - 2 / root_pi)
            for k in range(1, ERFCX_TERMS - 1):
                t.append((2 * c * t[k] + 2 * t[k - 1]) / (k + 1))
            pieces.append(tuple(float(v) for v in t))
        return tuple(pieces)


def _pi_times(bits: int) -> int:
    """floor(pi * 2**bits) by Machin's formula in integers."""
    n = bits + 32

    def atan_inverse(k: int) -> int:
        total, term, i, sign = 0, (1 << n) // k, 1, 1
        while term:
            total, term, i, sign = total + sign * (term // i), term // (k * k), i + 2, -sign
        return total
    return (16 * atan_inverse(5) - 4 * atan_inverse(239)) >> 32


def _erfc_positive(b, a):
    """erfc of float64 ``a`` >= 0 (finite) to a few ulp, relative, down to the subnormals:
    1 - erf's series below 1/2 (erfc > 0.47 there), else exp(-a²) g(a): g by its Taylor
    polynomial at the nearest of 0.75, 1.25, ... 3.75 below 4, and by erfc's continued fraction
    1 / (sqrt(pi) (a + (1/2) / (a + 1 / (a + (3/2) / ...)))) from 4 on."""
    low = binary(b, "minimum", a, 0.5)
    z = binary(b, "*", low, low)
    s = ERF_COEFFICIENTS[-1]
    for c in ERF_COEFFICIENTS[-2::-1]:
        s = binary(b, "+", binary(b, "*", s, z), c)
    near = binary(b, "-", 1.0, binary(b, "*", low, s))
    pieces = _erfcx_taylor()
    shape = a.type.shape
    centre = convert(b, ERFCX_CENTRES[0], F64, shape)
    coeffs = [convert(b, v, F64, shape) for v in pieces[0]]
    for k in range(1, len(pieces)):
        here = binary(b, ">=", a, ERFCX_CENTRES[k] - 0.25)
        centre = where(b, here, ERFCX_CENTRES[k], centre)
        coeffs = [where(b, here, v, old) for v, old in zip(pieces[k], coeffs)]
    h = binary(b, "-", a, centre)                       # exact (Sterbenz)
    g = coeffs[-1]
    for c in coeffs[-2::-1]:
        g = binary(b, "+", binary(b, "*", g, h), c)
    far_a = binary(b, "maximum", a, ERFC_FAR)
    f = far_a
    for k in range(ERFC_FRACTION, 0, -1):
        f = binary(b, "+", far_a, binary(b, "/", k / 2, f))
    g = where(b, binary(b, "<", a, ERFC_FAR), g, binary(b, "/", 1 / math.sqrt(math.pi), f))
    return where(b, binary(b, "<", a, 0.5), near, binary(b, "*", _exp_neg_square(b, a), g))


def _erfc64(b, x):
    """erfc of float64: ``_erfc_positive`` of |x|, 2 - that for x < 0; 0 at inf, 2 at -inf."""
    a = unary(b, "abs", x)
    finite = binary(b, "<", a, math.inf)
    r = _erfc_positive(b, where(b, finite, a, 0.0))
    r = where(b, finite, r, 0.0)
    r = where(b, binary(b, "<", x, 0.0), binary(b, "-", 2.0, r), r)
    return where(b, predicate(b, "isnan", x), x, r)


def _erf64(b, x):
    """erf of float64: below |x| = 1.5 its Taylor series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))
    (Horner in x², 31 terms, 2/sqrt(pi) folded into each); from 1.5 to 6 as 1 - erfc
    (``_erfc_positive``); 1 from 6 on (erfc(6) < 2**-55).  Within 3 ulp of ``math.erf`` on the CPU
    backends (1 below |x| = 1)."""
    a = binary(b, "minimum", unary(b, "abs", x), ERF_ONE)
    low = binary(b, "minimum", a, ERF_SPLIT)
    z = binary(b, "*", low, low)
    s = ERF_COEFFICIENTS[-1]
    for c in ERF_COEFFICIENTS[-2::-1]:
        s = binary(b, "+", binary(b, "*", s, z), c)
    series = binary(b, "*", low, s)
    tail = binary(b, "-", 1.0, _erfc_positive(b, binary(b, "maximum", a, ERF_SPLIT)))
    r = where(b, binary(b, "<", a, ERF_SPLIT), series, tail)
    r = where(b, binary(b, ">=", a, ERF_ONE), 1.0, r)
    r = where(b, binary(b, "<", x, 0.0), unary(b, "-", r), r)
    return where(b, binary(b, "|", binary(b, "==", x, 0.0), predicate(b, "isnan", x)), x, r)


def _wide_or(name, fn64):
    """``tj.<name>``: the float64 composition ``fn64`` for float64 tiles, the primitive otherwise."""
    def build(b, x):
        if isinstance(x, Value) and x.type.dtype == F64:
            return fn64(b, x)
        return unary(b, name, x)
    return build


BUILTINS = {
    "log1p": _unary(_log1p, "log1p", True), "expm1": _unary(_expm1, "expm1", True),
    "sinh": _unary(_sinh, "sinh", True), "cosh": _unary(_cosh, "cosh", True), "atan": _unary(_atan, "atan", True),
    "asin": _unary(lambda b, x: _atan2(b, x, _side(b, x)), "asin", True),
    "acos": _unary(lambda b, x: _atan2(b, _side(b, x), x), "acos", True),
    "atan2": atan2, "erfc": erfc,
    "pow": lambda b, x, y: power(b, x, y),
    "exp": _wide_or("exp", _exp64), "log": _wide_or("log", _log64),
    "exp2": _wide_or("exp2", lambda b, x: _exp64(b, x, True)),
    "log2": _wide_or("log2", lambda b, x: _log64(b, x, True)),
    "tanh": _wide_or("tanh", _tanh64), "sigmoid": _wide_or("sigmoid", _sigmoid64),
    "erf": _wide_or("erf", _erf64),
    "rsqrt": _wide_or("rsqrt", lambda b, x: binary(b, "/", 1.0, unary(b, "sqrt", x))),
}
