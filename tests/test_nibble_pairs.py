"""``tj.unpack``'s nibbles cast to bfloat16/float16 two at a time (``codegen.nibbles``): a byte's
``& 15`` and ``>> 4`` registers, found through constant-condition selects, become one ``prmt``
(or a shift and an or, for a byte that is not part of a loaded word), one mask-and-magic and one
paired subtraction.  The pair's bits are computed on the host by the same LLVM for every byte
value at every position of a word; the W4A16 kernel's PTX takes the paired form (and fewer
registers) with the switch on, and its old form with it off."""
import ctypes
import re
from unittest import mock

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

import tilejit as tj
from tilejit import dtypes as D
from tilejit.codegen import nibbles
from tilejit.codegen.base import I8, I32, Ctx, const
from tilejit.codegen.elementwise import elementwise
from tilejit.ir import TileOp
from tilejit.specs import ArraySpec

MAGIC = 0x4300


def _nibbles_of(ctx, byte, k, signed=False):
    """(lo, hi) registers of ``byte`` as codegen emits ``tj.unpack``: ``& 15``, ``>> 4`` (for int4
    then ``^ 8`` and ``- 8``), then the interleaving select on a condition computed from
    constants (``k`` picks the arms' order)."""
    b = ctx.builder
    lo = elementwise(ctx, TileOp.AND, [byte, const(D.uint8, 15)], [D.uint8, D.uint8], D.uint8)
    hi = elementwise(ctx, TileOp.SHR, [byte, const(D.uint8, 4)], [D.uint8, D.uint8], D.uint8)
    if signed:
        lo, hi = (elementwise(ctx, TileOp.SUB, [elementwise(ctx, TileOp.XOR, [v, const(D.uint8, 8)], [D.uint8] * 2,
                                                            D.uint8), const(D.uint8, 8)], [D.uint8] * 2, D.uint8)
                  for v in (lo, hi))
    even = b.icmp_unsigned("==", b.add(ir.Constant(I32, 0), ir.Constant(I32, k)), ir.Constant(I32, 0))
    odd = b.icmp_unsigned("==", b.add(ir.Constant(I32, 0), ir.Constant(I32, k + 1)), ir.Constant(I32, 0))
    return b.select(even, lo, hi) if k == 0 else lo, b.select(odd, lo, hi)


def _masks(ptx: str) -> list:
    """The ``and.b32`` of a register with 0x000F000F in ``ptx``: with the immediate, or with the
    register ``Ctx.opaque`` makes of it (``xor`` of a zero with the immediate, ``REGISTER_MASK``)."""
    regs = set(re.findall(r"xor\.b32\s+(%r\d+), %r\d+, 983055;", ptx))
    pairs = re.findall(r"and\.b32\s+%r\d+, (%r\d+|983055), (%r\d+|983055);", ptx)
    return [p for p in pairs if "983055" in p or regs & set(p)]


def _run_pairs(words: bool, signed: bool = False) -> np.ndarray:
    """Bits of the pair of every byte 0..255, bytes read as 16-byte vectors (``words``) or one by
    one; JIT-compiled for this CPU, so the mask is an immediate (``REGISTER_MASK`` reads a PTX
    special register)."""
    with mock.patch.object(nibbles, "REGISTER_MASK", False):
        return _build_and_run_pairs(words, signed)


def _build_and_run_pairs(words: bool, signed: bool) -> np.ndarray:
    mod, ptr = ir.Module("host"), ir.PointerType()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    b = ctx.builder
    cache: dict = {}
    for j in range(256):
        if words:
            vector = b.load(b.gep(fn.args[1], [ir.Constant(I32, j // 16 * 16)], source_etype=I8),
                            typ=ir.VectorType(I8, 16))
            byte = b.extract_element(vector, ir.Constant(I32, j % 16))
        else:
            byte = b.load(b.gep(fn.args[1], [ir.Constant(I32, j)], source_etype=I8), typ=I8)
        lo, hi = _nibbles_of(ctx, byte, 0, signed)
        found = nibbles._nibble_pair(lo, hi)
        assert found == (byte, signed)
        bits = nibbles.pair_bits(ctx, byte, signed, MAGIC, cache)
        b.store(bits, b.gep(fn.args[0], [ir.Constant(I32, j)], source_etype=I32))
    b.ret_void()
    text = str(mod)
    assert ("shufflevector" in text) == words
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("f"))
    data = np.random.default_rng(0).permutation(256).astype(np.uint8)
    out = np.zeros(256, np.uint32)
    cfn(out.ctypes.data, data.ctypes.data)
    return data, out


@pytest.mark.parametrize("signed", [False, True], ids=["uint4", "int4"])
@pytest.mark.parametrize("words", [True, False], ids=["prmt", "shift-or"])
def test_every_byte_gives_its_two_nibbles_as_magic_halves(words, signed):
    data, out = _run_pairs(words, signed)
    flip = 8 if signed else 0
    want = (MAGIC | (data.astype(np.uint32) & 15) ^ flip) | (MAGIC | (data.astype(np.uint32) >> 4) ^ flip) << 16
    np.testing.assert_array_equal(out, want)
    # and the halves are 2**7 + n (+ 8) as bfloat16 values: subtracting 2**7 (+ 8) leaves the
    # nibble's value exactly, as tj.unpack gives it (int4: two's complement)
    halves = np.stack([out & 0xFFFF, out >> 16], axis=-1).astype(np.uint32) << 16
    nib = np.stack([data & 15, data >> 4], -1).astype(np.int64)
    np.testing.assert_array_equal(halves.view(np.float32) - 128 - flip, (nib ^ 8) - 8 if signed else nib)


def test_only_low_then_high_of_one_byte_pairs():
    mod = ir.Module("m")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8, I8]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    (lo, hi), (lo2, hi2) = _nibbles_of(ctx, fn.args[0], 0), _nibbles_of(ctx, fn.args[1], 0)
    assert nibbles._nibble_pair(lo, hi) == (fn.args[0], False)
    assert nibbles._nibble_pair(hi, lo) is None                # high first: not a tj.unpack pair
    assert nibbles._nibble_pair(lo, hi2) is None               # two bytes
    assert nibbles._nibble_pair(lo, lo) is None
    other = elementwise(ctx, TileOp.SHR, [fn.args[0], const(D.uint8, 3)], [D.uint8, D.uint8], D.uint8)
    assert nibbles._nibble_pair(lo, other) is None             # not the high nibble
    assert nibbles.cast_pairs(ctx, [lo, lo2], D.uint8, D.bfloat16) is None
    assert nibbles.cast_pairs(ctx, [lo, hi], D.uint8, D.float32) is None     # f32: one at a time
    assert len(nibbles.cast_pairs(ctx, [lo, hi, lo2, other], D.uint8, D.float16)) == 4
    slo, shi = _nibbles_of(ctx, fn.args[0], 0, signed=True)
    assert nibbles._nibble_pair(slo, shi) == (fn.args[0], True)
    assert nibbles._nibble_pair(slo, hi) is None               # one signed, one not
    assert nibbles.cast_pairs(ctx, [slo, shi], D.uint8, D.bfloat16) is None  # (n ^ 8) - 8 as uint8: 248..
    assert nibbles.cast_pairs(ctx, [slo, shi], D.int8, D.bfloat16) is not None


def _w4a16_ptx(monkeypatch, on: bool, bn: int = 64):
    from examples import w4a16_gemm
    from tilejit.backends.cuda import build
    monkeypatch.setattr(nibbles, "NIBBLE_PAIRS", on)
    k = w4a16_gemm.w4a16_matmul_kernel
    a = np.zeros((16, 256), tj.bfloat16.np)
    packed = np.zeros((256, 64), np.uint8)
    s = np.zeros((2, 128), tj.bfloat16.np)
    specs, consts, _ = k.specialise(k.bind((a, packed, s, s, np.zeros((16, 128), tj.bfloat16.np), None, None),
                                           {"BM": 16, "BN": bn, "BK": 128, "GROUP": 128}))
    return build(k.tile_ir(specs, consts), 4, "sm_90a")


def test_w4a16_dequantises_pairs_with_prmt(monkeypatch):
    ptx = _w4a16_ptx(monkeypatch, True)["ptx"]
    # byte i low, byte i of the word >> 4 high (the bytes between: any, the mask clears them)
    paired = re.findall(r"prmt\.b32\s+%r\d+, %r\d+, %r\d+, 0x([4-7])[0-7]?([0-3])[0-3]?U;", ptx)
    assert paired and all(int(hi) == int(lo) + 4 for hi, lo in paired)
    assert _masks(ptx)                                               # 0x000F000F
    assert not re.search(r"and\.b16\s+%rs\d+, %rs\d+, 15;", ptx)      # no nibble masked alone
    old = _w4a16_ptx(monkeypatch, False)["ptx"]
    assert re.search(r"and\.b16\s+%rs\d+, %rs\d+, 15;", old) and "983055" not in old


@tj.kernel
def _int4_to_bf16(p, out, B: tj.constexpr):
    q = tj.unpack(tj.load(p, (0, 0), (16, B)), tj.int4)
    tj.store(out, (0, 0), q.to(tj.bfloat16))


def test_w4a16_b_from_nibbles_pairs_two_rows_of_a_word_without_prmt(monkeypatch):
    """BN 128 on 4 warps: B's fragments come from the packed bytes (``nibble_operands``), each
    32-bit word two rows of 4 columns; a fragment register is the same nibble of bytes j and j+2,
    so a pair costs a shift of the word and one logic op (no byte permute)."""
    ptx = _w4a16_ptx(monkeypatch, True, bn=128)["ptx"]
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx
    masks = _masks(ptx)                                                       # 0x000F000F
    assert len(masks) >= 64 and not re.search(r"prmt\.b32\s+%r\d+, %r\d+, %r\d+, 0x[4-7][0-7]?[0-3][0-3]?U;", ptx)
    for shift in (4, 8, 12):
        assert re.search(rf"shr\.u32\s+%r\d+, %r\d+, {shift};", ptx)
    assert "cvt.rn.bf16.f32" not in ptx.split("ldmatrix.sync.aligned.m8n8.x4.trans")[1].split("st.global")[0]


def test_int4_pairs_flip_the_sign_bit_in_the_same_logic_op(monkeypatch):
    from tilejit.backends.cuda import build
    k = _int4_to_bf16
    specs, consts, _ = k.specialise(k.bind((np.zeros((16, 32), np.uint8), np.zeros((16, 64), tj.bfloat16.np)),
                                           {"B": 32}))
    ptx = build(k.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    # the masked nibbles ^ 0x00080008 | 0x43004300: one xor with 0x43084308 (LLVM joins them)
    mask = re.search(r"xor\.b32\s+(%r\d+), %r\d+, 983055;", ptx).group(1)       # the mask's register
    assert re.search(rf"and\.b32\s+%r\d+, (%r\d+, {mask}|{mask}, %r\d+);\s+xor\.b32\s+%r\d+, %r\d+, 1124614920;", ptx)
    assert "cvt.rn.bf16.f32" not in ptx                                 # (each nibble through f32 before)
    monkeypatch.setattr(nibbles, "NIBBLE_PAIRS", False)
    assert "cvt.rn.bf16.f32" in build(k.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]


def test_the_constant_folder_reads_signed_and_unsigned_compares_of_negative_constants():
    mod = ir.Module("m")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), []), "f")
    b = Ctx(mod, fn, 90, "host").builder
    m1, one = ir.Constant(I32, -1), ir.Constant(I32, 1)
    assert nibbles._fold(b.icmp_signed("<", m1, one)) == 1          # -1 < 1
    assert nibbles._fold(b.icmp_unsigned("<", m1, one)) == 0        # 0xFFFFFFFF < 1 is false
    assert nibbles._fold(b.icmp_signed(">=", b.add(m1, m1), m1)) == 0   # -2 >= -1 is false
    assert nibbles._fold(b.add(m1, one)) == 0                       # wraps to 0



@pytest.mark.parametrize("signed", [False, True], ids=["uint4", "int4"])
@pytest.mark.parametrize("dst, offset, folds", [      # (uint4, int4): whether magic - c is a dst value
    (D.bfloat16, 128.0, (True, True)), (D.bfloat16, 3.0, (True, True)), (D.bfloat16, -5.0, (True, True)),
    (D.bfloat16, -5.5, (False, False)),          # 133.5: between bfloat16's integers there
    (D.bfloat16, 0.3, (False, False)), (D.float16, 1024.0, (True, True)),
    (D.float16, 0.5, (True, False)),             # 1023.5 is a float16, 1031.5 (int4's 1032 - 0.5) is not
    (D.float16, 1e-3, (False, False))])
def test_nibbles_plus_a_constant_are_one_subtraction_with_the_same_bits(signed, dst, offset, folds):
    """``q.to(dst) + c``: the conversion's magic minus ``c`` subtracted once from the pair's bits
    (nothing at all for ``c`` = the magic, 2**7 in bfloat16), where that constant is a ``dst``
    value.  The IR is that subtraction; and for every nibble, (magic + q) - (magic - c) rounded
    once to ``dst`` is q + c rounded once, which the plain form (an exact q, then + c) gives."""
    mod = ir.Module("m")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    b = ctx.builder
    vector = b.load(fn.args[0], typ=ir.VectorType(I8, 16))
    regs = [r for j in range(4) for r in _nibbles_of(ctx, b.extract_element(vector, ir.Constant(I32, j)), 0, signed)]
    values = nibbles.cast_pairs(ctx, regs, D.int8 if signed else D.uint8, dst)
    folded = nibbles.offset_pairs(ctx, values, offset, dst)
    assert (folded is not None) == folds[signed]
    magic = {D.bfloat16: 128.0, D.float16: 1024.0}[dst] + (8 if signed else 0)
    if not folds[signed]:
        return
    assert len(folded) == len(values) == 8 and all(v.opname == "extractelement" for v in folded)
    sources = {id(v.operands[0]): v.operands[0] for v in folded}
    assert len(sources) == 4                                      # one subtraction (or none) a pair
    for src in sources.values():
        if magic == offset:
            assert src.opname == "bitcast"                        # the bits are the values
        else:
            assert src.opname == "fsub" and src.operands[0].opname == "bitcast"
            assert [float(getattr(c, "constant", c)) for c in src.operands[1].constant] == [magic - offset] * 2
    # the identity, every nibble: one rounding of the exact magic + q minus (magic - c)
    npdt = tj.bfloat16.np if dst == D.bfloat16 else np.float16
    q = np.arange(-8, 8) if signed else np.arange(16)
    exact = ((magic + q) - (magic - offset)).astype(np.float64)
    np.testing.assert_array_equal(exact.astype(np.float32).astype(npdt), (q + offset).astype(np.float32).astype(npdt))


def test_offset_pairs_refuses_registers_it_did_not_convert():
    mod = ir.Module("m")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8, I8]), "f")
    ctx = Ctx(mod, fn, 90, "host")
    (lo, hi), (lo2, hi2) = _nibbles_of(ctx, fn.args[0], 0), _nibbles_of(ctx, fn.args[1], 0)
    a = nibbles.cast_pairs(ctx, [lo, hi], D.uint8, D.bfloat16)
    c = nibbles.cast_pairs(ctx, [lo2, hi2], D.uint8, D.bfloat16)
    assert nibbles.offset_pairs(ctx, a + c, 128.0, D.bfloat16) is not None
    assert nibbles.offset_pairs(ctx, [a[0], c[1]], 128.0, D.bfloat16) is None     # halves of two pairs
    assert nibbles.offset_pairs(ctx, a[::-1], 128.0, D.bfloat16) is None          # swapped lanes
    assert nibbles.offset_pairs(ctx, a, 128.0, D.float32) is None
    assert nibbles.offset_pairs(ctx, a[:1], 128.0, D.bfloat16) is None
    # 128 - 2**-100 is 128.0 in float64, but a nibble 0 plus 2**-100 is 2**-100, not 0: not folded
    assert nibbles.offset_pairs(ctx, a, 2.0 ** -100, D.bfloat16) is None
    assert nibbles.offset_pairs(ctx, a, 0.1, D.bfloat16) is None             # no bfloat16 value


@tj.kernel
def _uint4_biased(p, z, out, B: tj.constexpr):
    q = tj.unpack(tj.load(p, (0, 0), (16, B)), tj.uint4)
    tj.store(out, (0, 0), (q.to(tj.bfloat16) + 128) - (tj.load(z, (0, 0), (1, 2 * B)) + 128))


def test_a_biased_nibble_cast_emits_no_magic_subtraction():
    """``(q.to(bf16) + 128) - (z + 128)``: the PTX subtracts ``z + 128`` from the magic bits and
    never subtracts 2**7 (-1023360256 is 0xC300C300, the pair of -128.0 the conversion adds)."""
    from tilejit.backends.cuda import build
    k = _uint4_biased
    specs, consts, _ = k.specialise(k.bind((np.zeros((16, 32), np.uint8), np.zeros((1, 64), tj.bfloat16.np),
                                            np.zeros((16, 64), tj.bfloat16.np)), {"B": 32}))
    ptx = build(k.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    assert _masks(ptx) and "-1023360256" not in ptx
    assert re.search(r"sub\.rn\.bf16x2", ptx)


def test_the_nibble_mask_is_a_register_so_the_decode_loop_needs_fewer(monkeypatch):
    """``REGISTER_MASK``: the mask is made once (``Ctx.opaque``: one read of ``%dynamic_smem_size``)
    and every mask-and-exponent reads it, so ptxas does not move the immediate into a register
    before each one: W4A16 16x128x128, 4 warps, assembles in fewer registers (105 against 119 on
    nvJitLink 13: four CTAs an SM instead of three), with no spills."""
    from examples import w4a16_gemm
    from tilejit.backends.cuda import assemble_hinted
    from tilejit.codegen import ptxas
    from tilejit.passes.pipeline import compile_to_simt
    ptx = _w4a16_ptx(monkeypatch, True, bn=128)["ptx"]
    assert ptx.count("%dynamic_smem_size") == 1 and len(re.findall(r"xor\.b32\s+%r\d+, %r\d+, 983055;", ptx)) == 1
    assert len(_masks(ptx)) >= 64 and not re.search(r"and\.b32\s+%r\d+, %r\d+, 983055;", ptx)
    found = {}
    arr = lambda dt, rank: ArraySpec(dt, rank, True, True, False)                     # noqa: E731
    specs = (arr(D.bfloat16, 2), arr(D.uint8, 4), arr(D.bfloat16, 2), arr(D.bfloat16, 2), arr(D.bfloat16, 2),
             arr(D.float32, 3), arr(D.int32, 1))          # the benchmark's: tiled weights, K in 4 slices
    consts = {"BM": 16, "BN": 128, "BK": 128, "GROUP": 128, "K_SLICE": 2048, "TILED": True}
    for on in (True, False):
        monkeypatch.setattr(nibbles, "REGISTER_MASK", on)
        tile = w4a16_gemm.w4a16_matmul_kernel.tile_ir(specs, consts)
        try:
            found[on], _, _ = assemble_hinted(compile_to_simt(tile, 4, "sm_90a"), "sm_90a")
        except ptxas.PtxAssemblyError as e:
            if "not available" in str(e) or "could not start" in str(e):
                pytest.skip(str(e))
            raise
    assert found[True].spills == 0 and found[True].registers < found[False].registers
    assert found[True].registers <= 128                                      # four CTAs of 128 threads an SM
