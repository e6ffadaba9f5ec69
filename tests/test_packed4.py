"""tj.unpack / tj.pack: 4-bit values (int4, uint4, float4e2m1) two per uint8 byte, low nibble
first, against a NumPy reference on interpret and emulate (and the GPU under -m gpu)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilejit as tj

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                np.float32)
BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


def nibbles(packed: np.ndarray) -> np.ndarray:
    """(…, n) uint8 -> (…, 2n) codes 0..15, low nibble first."""
    return np.stack([packed & 15, packed >> 4], -1).reshape(packed.shape[:-1] + (-1,))


def reference(packed, kind):
    codes = nibbles(packed)
    if kind == "int4":
        return np.where(codes >= 8, codes.astype(np.int16) - 16, codes).astype(np.int8)
    if kind == "uint4":
        return codes.astype(np.uint8)
    return E2M1[codes]


@tj.kernel
def unpack_k(x, y, KIND: tj.constexpr, M: tj.constexpr, N: tj.constexpr):
    tj.store(y, (0, 0), tj.unpack(tj.load(x, (0, 0), (M, N)), KIND))


@tj.kernel
def roundtrip_k(x, y, KIND: tj.constexpr, M: tj.constexpr, N: tj.constexpr):
    tj.store(y, (0, 0), tj.pack(tj.unpack(tj.load(x, (0, 0), (M, N)), KIND), KIND))


@tj.kernel
def pack_k(v, y, KIND: tj.constexpr, M: tj.constexpr, N2: tj.constexpr):
    tj.store(y, (0, 0), tj.pack(tj.load(v, (0, 0), (M, N2)), KIND))


KINDS = {"int4": (tj.int4, np.int8), "uint4": (tj.uint4, np.uint8), "float4e2m1": (tj.float4e2m1, np.float32)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_unpack_and_the_round_trip(backend, kind, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    dtype, out = KINDS[kind]
    x = np.random.default_rng(len(kind)).integers(0, 256, (8, 16), dtype=np.uint8)
    x[0, :16] = np.arange(0, 256, 16) + np.arange(16)          # every nibble in both places
    y = np.zeros((8, 32), out)
    unpack_k[(1,)](x, y, KIND=dtype, M=8, N=16)
    np.testing.assert_array_equal(y, reference(x, kind))
    if kind == "float4e2m1":
        np.testing.assert_array_equal(np.signbit(y), np.signbit(reference(x, kind)))
    back = np.zeros_like(x)
    roundtrip_k[(1,)](x, back, KIND=dtype, M=8, N=16)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pack_rounds_floats_to_the_nearest_e2m1_with_ties_to_even(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    v = np.array([[0.2, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -0.25, -2.6, -5.0, np.inf, -0.0]],
                 np.float32)
    y = np.zeros((1, 8), np.uint8)
    pack_k[(1,)](v, y, KIND=tj.float4e2m1, M=1, N2=16)
    got = E2M1[nibbles(y)]
    want = np.array([[0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -0.0, -3.0, -4.0, 6.0, 0.0]], np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_pack_takes_integers_modulo_16(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    v = np.array([[-8, 7, -1, 0, 3, -4, 17, -17]], np.int32)
    y = np.zeros((1, 4), np.uint8)
    pack_k[(1,)](v, y, KIND=tj.int4, M=1, N2=8)
    np.testing.assert_array_equal(nibbles(y), (v & 15).astype(np.uint8))


def test_bad_arguments_are_compile_errors(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x = np.zeros((2, 4), np.uint8)
    for kernel, args, consts, message in [
            (unpack_k, (x, np.zeros((2, 8), np.int8)), {"KIND": tj.int8, "M": 2, "N": 4}, "packed dtype must be one of"),
            (unpack_k, (x.astype(np.int8), np.zeros((2, 8), np.int8)), {"KIND": tj.int4, "M": 2, "N": 4},
             "packed tile must be uint8"),
            (pack_k, (np.zeros((2, 3), np.int8), np.zeros((2, 2), np.uint8)), {"KIND": tj.int4, "M": 2, "N2": 3},
             "last dimension must be even"),
            (pack_k, (np.zeros((2, 4), np.float32), x[:, :2]), {"KIND": tj.int4, "M": 2, "N2": 4},
             "must be an integer tile")]:
        with pytest.raises(tj.CompileError, match=message):
            kernel[(1,)](*args, **consts)


def test_unpack_interleaves_inside_each_thread():
    """The interleave of low and high nibbles (a WHERE of two broadcasts, reshaped) is computed in
    the layout of the loaded bytes, grown and merged (``assign_layouts.merged_from_leaves``): no
    uint8 goes through shared memory, in the W4A16 kernel too."""
    from tilejit.examples import w4a16_gemm as ex
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec, NoneSpec
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    u8 = ArraySpec(tj.uint8, 2, True, True, False)
    for bm, bn, bk in ((16, 64, 128), (64, 128, 64)):
        tile = ex.w4a16_matmul_kernel.tile_ir((bf16, u8, bf16, bf16, bf16, NoneSpec(), NoneSpec()),
                                              {"BM": bm, "BN": bn, "BK": bk, "GROUP": 128})
        fn = compile_to_simt(tile, num_warps=4)
        assert not [o for o in fn.walk() if o.op is SimtOp.STORE_SHARED and o.operands[1].type.dtype == tj.uint8]
    tile = unpack_k.tile_ir((u8, ArraySpec(tj.int8, 2, True, True, False)), {"KIND": tj.int4, "M": 16, "N": 64})
    fn = compile_to_simt(tile, num_warps=4)
    assert not [o for o in fn.walk() if o.op in (SimtOp.STORE_SHARED, SimtOp.LOAD_SHARED)]


@tj.kernel
def interleave_by_hand(x, y, M: tj.constexpr, N: tj.constexpr):
    """A user's own nibble interleave, spelled with expand_dims, a (1, 1, 2) pick and reshape."""
    b = tj.load(x, (0, 0), (M, N))
    pick = tj.reshape(tj.arange(0, 2), (1, 1, 2)) == 0
    pair = tj.where(pick, tj.expand_dims(b & 15, 2), tj.expand_dims(b >> 4, 2))
    tj.store(y, (0, 0), tj.reshape(pair, (M, 2 * N)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_interleave_spelled_by_hand_stays_in_registers_and_is_exact(backend, monkeypatch):
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec
    u8 = ArraySpec(tj.uint8, 2, True, True, False)
    fn = compile_to_simt(interleave_by_hand.tile_ir((u8, u8), {"M": 32, "N": 64}), num_warps=4)
    assert not [o for o in fn.walk() if o.op in (SimtOp.STORE_SHARED, SimtOp.LOAD_SHARED)]
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.random.default_rng(3).integers(0, 256, (32, 64), dtype=np.uint8)
    y = np.zeros((32, 128), np.uint8)
    interleave_by_hand[(1,)](x, y, M=32, N=64)
    np.testing.assert_array_equal(y, nibbles(x))


def test_unpack_assembles_for_the_gpu():
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    x = np.zeros((16, 32), np.uint8)
    for kind, (dtype, out) in KINDS.items():
        specs, consts, _ = unpack_k.specialise(unpack_k.bind((x, np.zeros((16, 64), out)),
                                                             {"KIND": dtype, "M": 16, "N": 32}))
        assert unpack_k.compile(specs, consts, None, "cuda").artifact.spills == 0, kind


@tj.kernel
def nibbles_as_k(x, y, DT: tj.constexpr, M: tj.constexpr, N: tj.constexpr):
    tj.store(y, (0, 0), tj.unpack(tj.load(x, (0, 0), (M, N)), tj.uint4).to(DT))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", [tj.bfloat16, tj.float16, tj.float32])
def test_unpacked_nibbles_convert_to_floats_exactly(backend, dt, monkeypatch):
    """On the GPU through the 16-bit magic number (``codegen.base._known_below``: values below
    2**7 from a mask or a shift, 2**7 + v as bfloat16 bits minus 2**7) or float32's."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(256, dtype=np.uint8).reshape(16, 16)
    y = np.zeros((16, 32), dt.np)
    nibbles_as_k[(1,)](x, y, DT=dt, M=16, N=16)
    np.testing.assert_array_equal(y.astype(np.float32), nibbles(x).astype(np.float32))


@pytest.mark.parametrize("dt, magic", [(tj.bfloat16, 17152), (tj.float16, 25600)])     # 0x4300, 0x6400
def test_nibbles_reach_16_bit_floats_without_cvt(dt, magic):
    from tilejit.backends.cuda import build
    x = np.zeros((16, 16), np.uint8)
    specs, consts, _ = nibbles_as_k.specialise(nibbles_as_k.bind((x, np.zeros((16, 32), dt.np)),
                                                                 {"DT": dt, "M": 16, "N": 16}))
    ptx = build(nibbles_as_k.tile_ir(specs, consts), 4, "sm_90a")["ptx"]
    pair = magic * 0x10001                          # two lanes at once where LLVM pairs them (SLP)
    assert re.search(rf"or\.b16\s+%rs\d+, %rs\d+, {magic};", ptx) or re.search(rf"or\.b32\s+%r\d+, %r\d+, {pair};", ptx)
    assert "cvt.rn.f32.u" not in ptx and "cvt.rn.bf16.f32" not in ptx and "cvt.rn.f16.f32" not in ptx


@tj.kernel
def nibbles_by_hand_k(x, lo, hi, M: tj.constexpr, N: tj.constexpr):
    b = tj.load(x, (0, 0), (M, N))
    tj.store(lo, (0, 0), (b & 15).to(tj.bfloat16) * 0.5)
    tj.store(hi, (0, 0), (b >> 4).to(tj.bfloat16) * 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nibbles_masked_or_shifted_by_hand_convert_the_same_way(backend, monkeypatch):
    """No ``tj.unpack``: ``b & 15`` and ``b >> 4`` of a uint8 reach the 16-bit magic as well."""
    from tilejit.backends.cuda import build
    x = np.arange(256, dtype=np.uint8).reshape(16, 16)
    specs, consts, _ = nibbles_by_hand_k.specialise(nibbles_by_hand_k.bind(
        (x, np.zeros((16, 16), tj.bfloat16.np), np.zeros((16, 16), tj.bfloat16.np)), {"M": 16, "N": 16}))
    ptx = build(nibbles_by_hand_k.tile_ir(specs, consts), 4, "sm_90a")["ptx"]
    assert "cvt.rn.bf16.f32" not in ptx and "cvt.rn.f32.u" not in ptx
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    lo, hi = np.zeros((16, 16), tj.bfloat16.np), np.zeros((16, 16), tj.bfloat16.np)
    nibbles_by_hand_k[(1,)](x, lo, hi, M=16, N=16)
    np.testing.assert_array_equal(lo.astype(np.float32), (x & 15) * 0.5)
    np.testing.assert_array_equal(hi.astype(np.float32), (x >> 4) * 0.5)


@tj.kernel
def masked_ints_k(x, y, DT: tj.constexpr, B: tj.constexpr):
    tj.store(y, (0,), (tj.load(x, (0,), (B,)) & 15).to(DT))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("src", [np.int32, np.int64, np.int16, np.uint8])
@pytest.mark.parametrize("dt", [tj.bfloat16, tj.float16])
def test_masked_integers_of_any_width_convert_to_16_bit_floats(backend, src, dt, monkeypatch):
    """``x & 15`` of 8- to 64-bit integers (negative ones too) reaches the 16-bit magic
    conversion, narrowed to 16 bits first."""
    x = np.arange(-100, 156).astype(src)
    specs, consts, _ = masked_ints_k.specialise(masked_ints_k.bind((x, np.zeros(256, dt.np)), {"DT": dt, "B": 256}))
    from tilejit.backends.cuda import build
    assert "or.b" in build(masked_ints_k.tile_ir(specs, consts), 4, "sm_90a")["ptx"]
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    y = np.zeros(256, dt.np)
    masked_ints_k[(1,)](x, y, DT=dt, B=256)
    np.testing.assert_array_equal(y.astype(np.float32), (x & 15).astype(np.float32))


def test_the_e2m1_decode_is_bit_moves_and_one_multiply():
    """float4e2m1 codes decode through float32's bits (sign, exponent, mantissa moved, times
    2**126), not through exp2 and selects: the GPU code has no ex2, selp or compare on floats,
    and its multiply keeps subnormals (no .ftz: the codes 1 and 9 are float32 subnormals times 2**126)."""
    from tilejit.backends.cuda import build
    specs, consts, _ = unpack_k.specialise(unpack_k.bind(
        (np.zeros((8, 16), np.uint8), np.zeros((8, 32), np.float32)), {"KIND": tj.float4e2m1, "M": 8, "N": 16}))
    ptx = build(unpack_k.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    assert "ex2" not in ptx and "selp.f32" not in ptx and "setp.eq.f32" not in ptx
    assert "mul.rn.f32" in ptx and "ftz" not in ptx
