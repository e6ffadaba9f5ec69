"""Packed 4-bit values to bfloat16/float16 two at a time (``tj.unpack`` then ``.to(bf16)``).

``tj.unpack`` gives each byte ``b`` of a packed tile as two registers, ``b & 15`` and ``b >> 4``
(low nibble first), and the cast that follows converts each alone: pick the byte out of its
word, mask or shift it, widen it, set the magic exponent and pair two halves into one 32-bit
register before the ``bf16x2`` subtraction, about seven instructions a pair (W4A16's decode
loop is bound by them).  Here a CAST whose registers come in such pairs converts the pair at
once: one ``prmt`` puts byte ``i`` of the 32-bit word in the low half and the same byte shifted
right by 4 in the high half (one shift a word serves its four bytes), one ``lop3`` keeps the two
nibbles and sets the magic exponents (``0x4300``: 2**7 + n as a bfloat16; ``0x6400``: 2**10 + n
as a float16) and one ``bf16x2``/``f16x2`` subtraction of 2**7 (2**10) leaves the two exact
values.  ``tj.int4``'s nibbles (``(n ^ 8) - 8``) pair the same way, with the ``^ 8`` in the
same logic op and 2**7 + 8 (2**10 + 8) subtracted.  The pairs are found in the LLVM values
themselves (``and``/``lshr`` of one byte, through selects whose conditions are constants); a
byte that is not an element of a loaded vector of whole words takes the shift-and-or form of
the same trick; any other register converts alone (``base.convert``).  ``NIBBLE_PAIRS``
switches it off.  A constant added to such pairs right after (``q.to(tj.bfloat16) + 128``)
joins the conversion's subtraction where the difference is exact (``offset_pairs``)."""
from __future__ import annotations

import struct
from fractions import Fraction

from llvmlite import ir

from tilejit import dtypes as D
from tilejit.codegen import base
from tilejit.codegen.base import BF16, F16, I8, I32, Ctx, convert
from tilejit.dtypes import DType

NIBBLE_PAIRS = True
# The switch: True gives the nibble mask ``0x000F000F`` as a register made once per kernel
# (``Ctx.opaque``), so the mask-and-exponent is one ``LOP3`` with the exponent as its immediate;
# as two immediates ptxas moves the mask into a register before every ``LOP3``.  W4A16 16x128x128x4
# on sm_90a: the K loop 500 -> 460 SASS instructions (66 -> 26 ``IMAD``), 119 -> 105 registers
# (four CTAs an SM instead of three); on the H100 (2026-12-06, session 30, scripts/gpu_s30b.sh,
# alternating, two rounds) M1 / M16 5-9% faster.
REGISTER_MASK = True
_MAGIC = {D.bfloat16: (0x4300, 128.0, BF16), D.float16: (0x6400, 1024.0, F16)}
_FOLDS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}
_COMPARES = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
             "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def cast_pairs(ctx: Ctx, regs: list, src: DType, dst: DType) -> list | None:
    """``regs`` (``src`` integers) cast to ``dst``, nibble pairs two at a time; None when no
    pair is found (the caller converts register by register)."""
    if not (NIBBLE_PAIRS and base.MAGIC_INT_TO_FLOAT) or dst not in _MAGIC or src not in (D.uint8, D.int8) or len(regs) < 2:
        return None
    pairs = {}
    for i in range(0, len(regs) - 1, 2):
        found = _nibble_pair(regs[i], regs[i + 1]) or _row_pair(regs[i], regs[i + 1])
        if found is not None and (src == D.int8 or not found[1]):
            pairs[i] = found
    if not pairs:
        return None
    words: dict = {}
    out = []
    for i in range(0, len(regs), 2):
        if i in pairs:
            found = pairs[i]
            out += _convert_pair(ctx, found[0], found[1], dst, words, *found[2:])
        else:
            out += [convert(ctx, r, src, dst) for r in regs[i:i + 2]]
    return out


def _nibbles(v):
    """(i8 byte, 0 for ``byte & 15`` or 4 for ``byte >> 4``, signed) of a nibble register, or None."""
    v = _resolve(v)
    signed = _signed_nibble(v) is not None
    if signed:
        v = _resolve(_signed_nibble(v))
    if not (isinstance(v, ir.Instruction) and v.type == I8):
        return None
    if v.opname == "lshr" and _fold(v.operands[1]) == 4:
        return v.operands[0], 4, signed
    if v.opname == "and":
        for a, m in (v.operands, v.operands[::-1]):
            if _fold(m) == 15:
                return a, 0, signed
    return None


def _nibble_pair(lo, hi):
    """(i8 byte ``b``, signed) when ``lo`` is ``b & 15`` and ``hi`` is ``b >> 4`` (logical), or
    (signed) ``tj.int4``'s ``(n ^ 8) - 8`` of each."""
    x, y = _nibbles(lo), _nibbles(hi)
    if x is None or y is None or x[0] is not y[0] or (x[1], y[1]) != (0, 4) or x[2] != y[2]:
        return None
    return x[0], x[2]


def _row_pair(lo, hi):
    """((i8 vector, word), signed, shift) when ``lo`` and ``hi`` are the same nibble of bytes
    ``j`` and ``j + 2`` of one 32-bit word of a vector of bytes (the packed B of
    ``nibble_operands``: two rows of one column): ``(word >> shift) & 0x000f000f`` holds both
    at bits 0-3 and 16-19, one shift and one logic op for the pair."""
    x, y = _nibbles(lo), _nibbles(hi)
    if x is None or y is None or x[1] != y[1] or x[2] != y[2]:
        return None
    a, b = _byte_index(x[0]), _byte_index(y[0])
    if a is None or b is None or a[0] is not b[0] or a[1] // 4 != b[1] // 4 or a[1] % 4 > 1 or b[1] != a[1] + 2:
        return None
    return (a[0], a[1] // 4), x[2], 8 * (a[1] % 4) + x[1]


def _signed_nibble(v):
    """``n`` when ``v`` is ``(n ^ 8) - 8`` (a nibble as a two's complement int4)."""
    v = _resolve(v)
    if not (isinstance(v, ir.Instruction) and v.opname == "sub" and _fold(v.operands[1]) == 8):
        return None
    x = _resolve(v.operands[0])
    if not (isinstance(x, ir.Instruction) and x.opname == "xor"):
        return None
    n, m = x.operands
    return n if _fold(m) == 8 else m if _fold(n) == 8 else None


def _resolve(v, depth: int = 8):
    """``v`` with selects on constant conditions replaced by the value they pick."""
    while depth and isinstance(v, ir.Instruction) and v.opname == "select":
        cond = _fold(v.operands[0])
        if cond is None:
            return v
        v, depth = v.operands[1 if cond else 2], depth - 1
    return v


def _fold(v, depth: int = 6):
    """The integer value of ``v`` when it is computed from constants alone, else None."""
    if isinstance(v, ir.Constant):
        return v.constant if isinstance(v.constant, (int, bool)) and not isinstance(v.type, ir.VectorType) else None
    if depth == 0 or not isinstance(v, ir.Instruction):
        return None
    args = [_fold(a, depth - 1) for a in v.operands]
    if None in args:
        return None
    if v.opname in _FOLDS:
        return _FOLDS[v.opname](*args) & ((1 << v.type.width) - 1)
    if v.opname == "lshr":
        return args[0] >> args[1]
    if v.opname == "select":
        return args[1] if args[0] else args[2]
    if v.opname in ("zext", "trunc"):
        return args[0] & ((1 << v.type.width) - 1)
    if v.opname == "icmp" and v.op.lstrip("us") in _COMPARES:    # (llvmlite's "eq", "ult", "sge", ...)
        widths = [o.type.width for o in v.operands]
        args = [a & ((1 << w) - 1) for a, w in zip(args, widths)]            # as unsigned bits
        if v.op[0] == "s":
            args = [a - (1 << w) if a >> (w - 1) else a for a, w in zip(args, widths)]
        return int(_COMPARES[v.op.lstrip("us")](*args))
    return None


def _convert_pair(ctx: Ctx, byte, signed: bool, dst: DType, words: dict, shift: int | None = None) -> list:
    """(``byte & 15``, ``byte >> 4``) as two ``dst`` registers (``signed``: as int4 values, whose
    ``n ^ 8`` is the value plus 8); with ``shift`` (``_row_pair``), ``byte`` is (vector, word)
    and the pair is the word's nibbles at bits ``shift`` and ``shift + 16``."""
    b = ctx.builder
    magic, offset, ty = _MAGIC[dst]
    if shift is None:
        bits = pair_bits(ctx, byte, signed, magic, words)
    else:
        w, _ = _word(ctx, *byte, words)
        nibbles = b.and_(b.lshr(w, ir.Constant(I32, shift)) if shift else w, _mask(ctx))
        if signed:
            nibbles = b.xor(nibbles, ir.Constant(I32, 0x00080008))
        bits = b.or_(nibbles, ir.Constant(I32, magic | magic << 16))
    pair_ty = ir.VectorType(ty, 2)
    sub = offset + 8 if signed else offset
    values = b.fsub(b.bitcast(bits, pair_ty), ir.Constant(pair_ty, [sub, sub]))
    out = [b.extract_element(values, ir.Constant(I32, k)) for k in range(2)]
    for k, reg in enumerate(out):
        ctx.nibble_values[id(reg)] = (reg, bits, sub, pair_ty, k)
    return out


def offset_pairs(ctx: Ctx, regs: list, offset: float, dst: DType) -> list | None:
    """``regs`` + ``offset`` when every pair of ``regs`` is a pair ``cast_pairs`` converted:
    one subtraction of ``magic - offset`` from the pair's magic bits (none when that is 0)
    instead of the conversion's subtraction and an addition.  Exact, the same bits: the
    nibble ``q`` is exact, so both round ``q + offset`` once, provided ``magic - offset`` is a
    ``dst`` value (it is checked).  ``(q.to(tj.bfloat16) + 128) - (z + 128)`` thus costs a pair
    of weights one ``prmt``, one ``lop3`` and the subtraction of ``z + 128``.  None otherwise."""
    if dst not in _MAGIC or len(regs) < 2 or len(regs) % 2 or not _exact(offset, dst):
        return None                     # (an offset that is no dst value: the plain add rounds it first)
    b = ctx.builder
    out, made = [], {}
    for i in range(0, len(regs), 2):
        lo, hi = (ctx.nibble_values.get(id(r)) for r in regs[i:i + 2])
        if lo is None or hi is None or lo[0] is not regs[i] or hi[0] is not regs[i + 1] or lo[1] is not hi[1] \
                or (lo[4], hi[4]) != (0, 1):
            return None
        _, bits, shift, pair_ty, _ = lo
        rest = Fraction(shift) - Fraction(offset)          # exactly: no float64 rounding of a tiny offset
        if not _exact(float(rest), dst) or Fraction(float(rest)) != rest:
            return None
        rest = float(rest)
        if (values := made.get(id(bits))) is None:
            values = b.bitcast(bits, pair_ty)
            if rest:
                values = b.fsub(values, ir.Constant(pair_ty, [rest, rest]))
            made[id(bits)] = values
        out += [b.extract_element(values, ir.Constant(I32, k)) for k in range(2)]
    return out


def _exact(x: float, dt: DType) -> bool:
    """Whether the Python float ``x`` is a value of ``dt`` (bfloat16 or float16)."""
    try:
        f32 = struct.unpack("<f", struct.pack("<f", x))[0]
        if dt == D.bfloat16:
            return f32 == x and struct.unpack("<I", struct.pack("<f", f32))[0] & 0xFFFF == 0
        return struct.unpack("<e", struct.pack("<e", x))[0] == x
    except (OverflowError, struct.error):
        return False


def pair_bits(ctx: Ctx, byte, signed: bool, magic: int, words: dict):
    """The i32 ``(magic | byte & 15) | (magic | byte >> 4) << 16`` of the i8 ``byte`` (``signed``:
    each nibble ``^ 8``)."""
    b = ctx.builder
    word = _word_of(ctx, byte, words)
    if word is not None:                 # prmt: byte i of the word low, the word >> 4's byte i high
        (w, shifted), i = word
        v4 = ir.VectorType(I8, 4)
        both = b.shuffle_vector(b.bitcast(w, v4), b.bitcast(shifted, v4),
                                ir.Constant(ir.VectorType(I32, 4), [i, i, 4 + i, 4 + i]))
        spread = b.bitcast(both, I32)
    else:                                # the byte at bits 0-7 and 12-19
        x = b.zext(byte, I32)
        spread = b.or_(x, b.shl(x, ir.Constant(I32, 12)))
    nibbles = b.and_(spread, _mask(ctx))
    if signed:
        nibbles = b.xor(nibbles, ir.Constant(I32, 0x00080008))
    return b.or_(nibbles, ir.Constant(I32, magic | magic << 16))


def _mask(ctx: Ctx):
    """``0x000F000F``: the low nibble of each 16-bit half (a register under ``REGISTER_MASK``)."""
    return ctx.opaque(0x000F000F) if REGISTER_MASK else ir.Constant(I32, 0x000F000F)


def _byte_index(byte):
    """(vector of whole 32-bit words of i8, index j) when ``byte`` is element j of it, else None."""
    if not (isinstance(byte, ir.Instruction) and byte.opname == "extractelement"):
        return None
    vector, index = byte.operands
    j = _fold(index)
    if j is None or not isinstance(vector.type, ir.VectorType) or vector.type.element != I8 or vector.type.count % 4:
        return None
    return vector, j


def _word(ctx: Ctx, vector, index: int, words: dict):
    """(32-bit word ``index`` of the i8 ``vector``, the word >> 4), made once per word."""
    key = (id(vector), index)
    if key not in words:
        b = ctx.builder
        w = b.extract_element(b.bitcast(vector, ir.VectorType(I32, vector.type.count // 4)), ir.Constant(I32, index))
        words[key] = (w, b.lshr(w, ir.Constant(I32, 4)))
    return words[key]


def _word_of(ctx: Ctx, byte, words: dict):
    """((32-bit word, the word >> 4), byte index) when ``byte`` is element j of a vector of whole
    words; ``words`` keeps each word's two registers for the other bytes of the word."""
    found = _byte_index(byte)
    if found is None:
        return None
    vector, j = found
    return _word(ctx, vector, j // 4, words), j % 4
