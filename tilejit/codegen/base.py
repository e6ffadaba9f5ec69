"""LLVM emission basics shared by the codegen modules: the LLVM type of each dtype, constants,
intrinsic declarations, the per-kernel emission context and CAST between all dtypes.

Register form of each dtype (what one SIMT register becomes): bool -> i1; int8/uint8 -> i8;
int16 -> i16; int32/uint32 -> i32; int64 -> i64; float16 -> half; bfloat16 -> bfloat;
float32 -> float; float8e4m3/float8e5m2 -> i8 holding the fp8 bits.  In memory (global and
shared) bool is one byte (0 or 1); every other dtype is stored in its register form.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tilejit import dtypes as D
from tilejit.dtypes import DType
from tilejit.errors import CompileError
from tilejit.errors import Loc

# one-register float32 divisions take ``Ctx.fast_div_f32`` where their operands allow (False: always
# the float64 path, ``Ctx.wide_div_f32``)
FAST_DIVISION = True
# Integers of 16 bits or fewer convert to floats through f32's bits (2**23 + u) instead of cvt
# (the switch: benchmarks/switch_probe.py)
MAGIC_INT_TO_FLOAT = True

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
GLOBAL, SHARED = 1, 3                     # NVPTX address spaces


class BFloatType(ir.Type):
    """LLVM's ``bfloat`` (llvmlite.ir has no class for it); constants print as ``0xR<bits>``."""
    intrinsic_name = "bf16"
    null = "0xR0000"

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash(BFloatType)

    def format_constant(self, value) -> str:
        return f"0xR{bfloat16_bits(value):04X}"


def bfloat16_bits(value) -> int:
    """The bfloat16 nearest ``value`` (as a float32; ties to even; a NaN becomes the quiet NaN of
    its sign), as its 16 bits: what ml_dtypes gives, without importing it on the compile path
    (0.6 s on the build machine)."""
    bits = int(np.array(value, np.float32).view(np.uint32))
    if bits & 0x7F800000 == 0x7F800000 and bits & 0x7FFFFF:
        return bits >> 16 & 0x8000 | 0x7FC0
    return (bits + 0x7FFF + (bits >> 16 & 1)) >> 16 & 0xFFFF


BF16 = BFloatType()
FP8_DTYPES = (D.float8e4m3, D.float8e5m2)
_REG_TYPES = {"bool": I1, "int8": I8, "uint8": I8, "int16": I16, "uint16": I16, "int32": I32, "uint32": I32,
              "int64": I64, "uint64": I64, "float16": F16, "bfloat16": BF16, "float32": F32, "float64": F64,
              "float8e4m3": I8, "float8e5m2": I8}


def reg_type(dt: DType) -> ir.Type:
    """LLVM type of one register of ``dt``."""
    return _REG_TYPES[dt.name]


def mem_type(dt: DType) -> ir.Type:
    """LLVM type of one element of ``dt`` in memory (bool is a byte)."""
    return I8 if dt.is_bool else reg_type(dt)


def is_llvm_float(dt: DType) -> bool:
    """Floats LLVM computes with natively (fp8 is handled as bits)."""
    return dt.is_float and dt not in FP8_DTYPES


def const(dt: DType, value) -> ir.Constant:
    """The register constant of ``dt`` holding the Python number ``value`` (inf/nan allowed)."""
    ty = reg_type(dt)
    if dt.is_bool:
        return ir.Constant(I1, int(bool(value)))
    if dt.is_int:
        if isinstance(value, float):         # e.g. other=-inf for an int array: NumPy's cast
            with np.errstate(invalid="ignore"):
                value = np.array(value, np.float32).astype(dt.np).item()
        v = int(value) & ((1 << dt.bits) - 1)
        return ir.Constant(ty, v - (1 << dt.bits) if v >> (dt.bits - 1) else v)
    if dt in FP8_DTYPES:
        bits = np.array(float(value), np.float32).astype(dt.np).view(np.uint8)
        return ir.Constant(I8, int(bits))
    return ir.Constant(ty, float(value))


class Ctx:
    """What emission of one kernel shares: module, builder, current function and target."""

    def __init__(self, module: ir.Module, func: ir.Function, sm: int, kernel: str):
        self.module, self.func, self.sm, self.kernel = module, func, sm, kernel
        self.builder = ir.IRBuilder(func.append_basic_block("entry"))
        self.loc: Loc | None = None                  # loc of the op being emitted (for errors)
        # float32 division as div.full.f32 (<= 2 ulp, no call) instead of IEEE div.rn, whose
        # slow path is a subroutine call: ptxas serialises every wgmma of a function with calls
        self.division_without_calls = False
        self.fast_math = False                       # approximate sin/cos (the fast_math launch option)
        # float32 division of the op being emitted by ``ieee_div_f32`` (set for ops of one register:
        # a row's mean; per-element division keeps div.rn.f32, whose fast path needs fewer registers)
        self.inline_division = False
        # the registers ``nibbles.cast_pairs`` made: id(register) -> (the register, the pair's bits,
        # the subtracted magic, the pair's vector type, lane), for ``nibbles.offset_pairs``
        self.nibble_values: dict = {}
        self._zero: ir.Value | None = None              # ``opaque``'s 0, made at its first use

    def opaque(self, value: int) -> ir.Value:
        """The i32 ``value`` as a register ptxas cannot fold back into an immediate: ``value ^
        (%dynamic_smem_size >> 31)`` (the dynamic shared memory is far below 2**31 bytes, so the
        xor is of 0), the shift made once in a block before the kernel's first.  A SASS ``LOP3``
        takes one immediate; given two (a nibble mask and a magic exponent), ptxas rematerialises
        one with an ``IMAD.MOV`` next to every use instead of keeping it in a register."""
        if self._zero is None:
            first = self.func.basic_blocks[0]
            prelude = self.func.append_basic_block("prelude")
            self.func.basic_blocks.remove(prelude)
            self.func.basic_blocks.insert(0, prelude)
            b = ir.IRBuilder(prelude)
            size = b.asm(ir.FunctionType(I32, []), "mov.u32 $0, %dynamic_smem_size;", "=r", [], False)
            self._zero = b.lshr(size, ir.Constant(I32, 31))
            b.branch(first)
        return self.builder.xor(self._zero, ir.Constant(I32, value))

    def fdiv(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """a / b for float values: float32 ``div.full.f32`` (2 ulp) under ``division_without_calls``,
        else correctly rounded: inline (``ieee_div_f32``) under ``inline_division``, else div.rn."""
        if a.type == ir.FloatType():
            if self.division_without_calls:
                return self.call("llvm.nvvm.div.full", a.type, [a, b])
            if self.inline_division:
                return self.ieee_div_f32(a, b)
        return self.builder.fdiv(a, b)

    def ieee_div_f32(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """float32 ``x / y`` correctly rounded: ``fast_div_f32`` where both operands lie in
        [2**-60, 2**60] in magnitude (every intermediate is then a normal float32), else
        ``wide_div_f32``, on a branch (the wide path's float64 registers are not live on the
        fast one)."""
        b = self.builder
        if not FAST_DIVISION:
            return self.wide_div_f32(x, y)
        ok = None
        for v in (x, y):                    # |v| in [2**-60, 2**60]: one subtract, one unsigned compare
            bits = b.and_(b.bitcast(v, I32), ir.Constant(I32, 0x7FFFFFFF))
            inside = b.icmp_unsigned("<", b.sub(bits, ir.Constant(I32, 0x21800000)),
                                     ir.Constant(I32, 0x5D800000 - 0x21800000 + 1))
            ok = inside if ok is None else b.and_(ok, inside)
        with b.if_else(ok) as (fast, wide):
            with fast:
                q_fast, from_fast = self.fast_div_f32(x, y), b.block
            with wide:
                q_wide, from_wide = self.wide_div_f32(x, y), b.block
        q = b.phi(F32)
        q.add_incoming(q_fast, from_fast)
        q.add_incoming(q_wide, from_wide)
        return q

    def fast_div_f32(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x / y`` correctly rounded for operands whose magnitudes lie in [2**-60, 2**60]: the
        reciprocal estimate (``rcp.approx.ftz.f32``) refined by one Newton step, the quotient
        ``x * r`` and two residual corrections ``q + r * (x - y*q)`` (FMAs; each residual is exact
        because q is within an ulp of x/y and nothing under- or overflows in that range).  This
        is the sequence ptxas gives ``div.rn.f32`` on its fast path, without the slow path's call."""
        b = self.builder

        def fma(p, q, r):
            return self.call("llvm.fma.f32", F32, [p, q, r])
        ny = b.fneg(y)
        r = self.call("llvm.nvvm.rcp.approx.ftz.f", F32, [y])
        r = fma(r, fma(ny, r, ir.Constant(F32, 1.0)), r)
        q = b.fmul(x, r)
        for _ in range(2):
            q = fma(r, fma(ny, q, x), q)
        return q

    def wide_div_f32(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """float32 ``x / y`` correctly rounded, as ``div.rn.f32`` gives it, but inline: ptxas
        expands ``div.rn.f32`` with a slow-path subroutine call, and the values live across the
        call cost a layernorm (two scalar divisions by n) 62 instead of 47 registers at 256
        bf16 columns.  Per element it costs more registers than div.rn's fast path (a 65,536-
        column softmax spilled), so codegen uses it for ops of one register (``inline_division``).

        Finite ``x`` and finite nonzero ``y`` divide in float64: a reciprocal estimate
        (``rcp.approx.ftz.f64``, exact in float64's range for every float32) refined by two
        Newton steps, the quotient ``q = x * r`` and one residual correction ``q + r * (x - y*q)``
        (FMAs) leave q within about 2**-53 of x/y, and rounding it to float32 is then the correct
        rounding: a quotient of two 24-bit significands is never a float32 midpoint and lies at
        least ~2**-50 (relative) from every one.  Overflow and float32 subnormal results round in
        that one conversion.  The other inputs (NaN, infinities, x = 0 or y = 0) take ``x * seed``:
        the estimate is exact there (1/0 = inf, 1/inf = 0, signed; NaN), and 1/y of a finite y is
        a normal float64, so inf / y stays inf and ±0 / y keeps its sign."""
        b, f64 = self.builder, ir.DoubleType()
        xd, yd = b.fpext(x, f64), b.fpext(y, f64)
        one = ir.Constant(f64, 1.0)

        def fma(p, q, r):
            return self.call("llvm.fma.f64", f64, [p, q, r])
        r = seed = self.call("llvm.nvvm.rcp.approx.ftz.d", f64, [yd])
        for _ in range(2):
            r = fma(r, fma(b.fneg(yd), r, one), r)
        q = b.fmul(xd, r)
        q = fma(fma(b.fneg(yd), q, xd), r, q)
        inf = ir.Constant(f64, float("inf"))
        finite = b.and_(b.fcmp_ordered("<", self.call("llvm.fabs.f64", f64, [xd]), inf),
                        b.fcmp_ordered("<", self.call("llvm.fabs.f64", f64, [yd]), inf))
        zero = ir.Constant(f64, 0.0)        # x = 0 too: the correction would lose -0's sign
        regular = b.and_(finite, b.and_(b.fcmp_ordered("!=", yd, zero), b.fcmp_ordered("!=", xd, zero)))
        return b.fptrunc(b.select(regular, q, b.fmul(xd, seed)), x.type)

    def block(self, name: str) -> ir.Block:
        return self.func.append_basic_block(name)

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Declare (once) and return an intrinsic or external function."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def call(self, name: str, ret: ir.Type, args: list) -> ir.Value:
        return self.builder.call(self.intrinsic(name, ret, [a.type for a in args]), args)

    def error(self, message: str) -> CompileError:
        return CompileError(message, self.loc, self.kernel)

    def need_sm(self, sm: int, what: str) -> None:
        if self.sm < sm:
            raise self.error(f"{what} needs sm_{sm} or newer (compiling for sm_{self.sm})")


# ------------------------------------------------------------------------------------ float helpers
def to_f32(ctx: Ctx, x: ir.Value, dt: DType) -> ir.Value:
    """Widen a float register to f32 (f16/bf16 exactly; fp8 through the sm_89+ converters);
    float64 stays float64 (its math is done in double)."""
    b = ctx.builder
    if dt in (D.float32, D.float64):
        return x
    if dt in FP8_DTYPES:
        ctx.need_sm(89, f"{dt.name} arithmetic")
        kind = "e4m3" if dt == D.float8e4m3 else "e5m2"
        pair = ctx.call(f"llvm.nvvm.{kind}x2.to.f16x2.rn", ir.VectorType(F16, 2), [b.zext(x, I16)])
        return b.fpext(b.extract_element(pair, ir.Constant(I32, 0)), F32)
    return b.fpext(x, F32)


def from_f32(ctx: Ctx, x: ir.Value, dt: DType) -> ir.Value:
    """Round an f32 to the float ``dt`` (round to nearest even, like NumPy / ml_dtypes)."""
    b = ctx.builder
    if dt == D.float32:
        return x
    if dt not in FP8_DTYPES:
        return b.fptrunc(x, reg_type(dt))
    ctx.need_sm(89, f"conversion to {dt.name}")
    kind = "e4m3" if dt == D.float8e4m3 else "e5m2"
    pair = ctx.call(f"llvm.nvvm.ff.to.{kind}x2.rn", I16, [ir.Constant(F32, 0.0), x])
    bits = b.trunc(pair, I8)
    # the hardware saturates to the largest finite value; ml_dtypes rounds overflow to
    # NaN (e4m3fn has no inf) or to inf (e5m2), so patch those results
    limit, overflow_bits = (464.0, 0x7F) if dt == D.float8e4m3 else (59392.0, 0x7C)
    absx = ctx.call("llvm.fabs.f32", F32, [x])
    over = b.fcmp_ordered(">=", absx, ir.Constant(F32, limit))
    sign = b.and_(bits, ir.Constant(I8, 0x80))
    return b.select(over, b.or_(sign, ir.Constant(I8, overflow_bits)), bits)


# --------------------------------------------------------------------------------------------- CAST
def convert(ctx: Ctx, x: ir.Value, src: DType, dst: DType) -> ir.Value:
    """``x.astype(dst)`` with NumPy's semantics (float -> int truncates toward zero)."""
    b = ctx.builder
    if src == dst:
        return x
    if dst.is_bool:
        if src.is_int:
            return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
        wide = to_f32(ctx, x, src)
        return b.fcmp_unordered("!=", wide, ir.Constant(wide.type, 0.0))   # nan -> True
    if src.is_bool or src.is_int:
        if dst.is_int:
            return _int_to_int(b, x, src, dst)
        return _int_to_float(ctx, x, src, dst)
    if dst.is_float:
        if src == D.float64:             # one rounding (fp8 through float32: it has no f64 converter)
            return from_f32(ctx, b.fptrunc(x, F32), dst) if dst in FP8_DTYPES else b.fptrunc(x, reg_type(dst))
        if dst == D.float64:
            return b.fpext(to_f32(ctx, x, src), F64)
        if is_llvm_float(src) and is_llvm_float(dst) and (src == D.float32 or dst == D.float32):
            return b.fpext(x, F32) if dst == D.float32 else b.fptrunc(x, reg_type(dst))
        return from_f32(ctx, to_f32(ctx, x, src), dst)
    return _float_to_int(ctx, to_f32(ctx, x, src), dst)


def _int_to_int(b: ir.IRBuilder, x, src: DType, dst: DType):
    src_bits, dst_bits = x.type.width, dst.bits
    if dst_bits < src_bits:
        return b.trunc(x, reg_type(dst))
    if dst_bits == src_bits:
        return x
    return b.sext(x, reg_type(dst)) if src.kind == "i" else b.zext(x, reg_type(dst))


def _int_to_float(ctx: Ctx, x, src: DType, dst: DType):
    b = ctx.builder
    if dst in FP8_DTYPES:             # anything past 2**24 overflows fp8, so f32 is exact enough
        return from_f32(ctx, _int_to_float(ctx, x, src, D.float32), dst)
    if dst in (D.bfloat16, D.float16) and MAGIC_INT_TO_FLOAT and _known_below(x, 1 << 7 if dst == D.bfloat16 else 1 << 10):
        # 0 <= x < 2**7 (2**10): 2**7 + x is a bfloat16 (2**10 + x a float16) whose low mantissa
        # bits are x; subtracting 2**7 (2**10) is exact: one logic op and one 16-bit subtraction
        # (a 4-bit weight's dequantisation)
        magic = 0x4300 if dst == D.bfloat16 else 0x6400
        narrow = b.zext(x, I16) if x.type.width < 16 else b.trunc(x, I16) if x.type.width > 16 else x
        bits = b.or_(narrow, ir.Constant(I16, magic))          # (x < 2**10: truncation keeps it)
        return b.fsub(b.bitcast(bits, reg_type(dst)), ir.Constant(reg_type(dst), 128.0 if dst == D.bfloat16 else 1024.0))
    if x.type.width <= 16 and MAGIC_INT_TO_FLOAT:
        # exact in f32 (and so rounded once to any narrower float): 2**23 + u as bits, minus 2**23;
        # a logic op and an add at full rate instead of one I2F at an eighth of it (16 a clock
        # per SM on sm_80/sm_90), which bounds a dequantising loop such as W4A16's
        u = b.zext(x, I32) if src.kind != "i" else b.add(b.sext(x, I32), ir.Constant(I32, 1 << 15))
        f = b.fsub(b.bitcast(b.or_(u, ir.Constant(I32, 0x4B000000)), F32),
                   ir.Constant(F32, float(2 ** 23 + (1 << 15 if src.kind == "i" else 0))))
        if dst == D.float32:
            return f
        return b.fpext(f, F64) if dst == D.float64 else b.fptrunc(f, reg_type(dst))
    # sm_80 has no int -> bf16 convert and LLVM would round twice through f32; through f64
    # (exact for 32-bit ints) it rounds once, like NumPy
    ty = F64 if dst == D.bfloat16 else reg_type(dst)
    wide = b.sitofp(x, ty) if src.kind == "i" else b.uitofp(x, ty)
    return b.fptrunc(wide, BF16) if dst == D.bfloat16 else wide


def _known_below(x, bound: int, depth: int = 4) -> bool:
    """Whether the unsigned integer ``x`` (an LLVM value) is known to be below ``bound`` from how
    it was computed: a constant, ``y & c``, ``y >> c`` of a narrow ``y``, a zero extension or
    a select of such values (``tj.unpack``'s nibbles)."""
    if isinstance(x, ir.Constant):
        return isinstance(x.constant, int) and 0 <= x.constant < bound
    if depth == 0 or not isinstance(x, ir.Instruction) or not isinstance(x.type, ir.IntType):
        return False
    op, args = x.opname, x.operands
    if op == "and":
        return any(isinstance(a, ir.Constant) and isinstance(a.constant, int) and 0 <= a.constant < bound for a in args) \
            or any(_known_below(a, bound, depth - 1) for a in args)
    if op == "lshr" and _least(args[1]) is not None:        # (a shift amount chosen between constants too)
        return (1 << max(0, x.type.width - _least(args[1]))) <= bound or _known_below(args[0], bound, depth - 1)
    if op == "zext":
        return (1 << args[0].type.width) <= bound or _known_below(args[0], bound, depth - 1)
    if op == "select":
        return _known_below(args[1], bound, depth - 1) and _known_below(args[2], bound, depth - 1)
    return False


def _least(v) -> int | None:
    """The least value the integer ``v`` can take when it is a constant or a select of constants."""
    if isinstance(v, ir.Constant):
        return v.constant if isinstance(v.constant, int) else None
    if isinstance(v, ir.Instruction) and v.opname == "select":
        arms = [_least(a) for a in v.operands[1:]]
        return None if None in arms else min(arms)
    return None


def _float_to_int(ctx: Ctx, x32, dst: DType):
    """f32 -> integer the way NumPy does on x86: truncate; NaN and out-of-range values give the
    minimum of int32/int64 (cvttss2si); narrower types go through int32 (uint32 through int64)
    and wrap; uint64 also converts [2**63, 2**64) exactly."""
    b = ctx.builder
    wide = D.int64 if dst in (D.int64, D.uint32, D.uint64) else D.int32
    wide_ty, fty = reg_type(wide), x32.type          # float32, or float64 for float64 data
    lo = ir.Constant(fty, -float(2 ** (wide.bits - 1)))
    hi = ir.Constant(fty, float(2 ** (wide.bits - 1)))
    in_range = b.and_(b.fcmp_ordered(">=", x32, lo), b.fcmp_ordered("<", x32, hi))
    # fptosi is poison out of range; the select below never picks it there
    value = b.select(in_range, b.fptosi(x32, wide_ty), ir.Constant(wide_ty, -(2 ** (wide.bits - 1))))
    if dst == D.uint64:                 # [2**63, 2**64): convert x - 2**63 and set the top bit
        top = ir.Constant(fty, float(2 ** 63))
        upper = b.and_(b.fcmp_ordered(">=", x32, top), b.fcmp_ordered("<", x32, ir.Constant(fty, float(2 ** 64))))
        shifted = b.xor(b.fptosi(b.fsub(x32, top), wide_ty), ir.Constant(wide_ty, -(2 ** 63)))
        value = b.select(upper, shifted, value)
    return value if wide.bits == dst.bits else b.trunc(value, reg_type(dst))
