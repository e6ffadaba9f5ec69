"""Behaviour a mutation audit found no test pinning down: tuple unpacking, compile-time
comparisons, the loop variable after a runtime loop, promotion of every dtype pair, and loads and
stores at negative and out-of-range offsets."""
from __future__ import annotations

import itertools
import operator

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj
from tilejit import dtypes as D


@pytest.fixture(params=["interpret", "emulate"])
def backend(request, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", request.param)
    return request.param


# ------------------------------------------------------------------------- 1. tuple unpacking
@tj.kernel
def shape_out(x, out):
    M, N = x.shape                                   # unpacked in order: (rows, cols)
    tj.store(out, (0,), tj.where(tj.arange(0, 2) == 0, M, N))


def test_unpacking_a_shape_keeps_the_order(backend):
    out = np.zeros(2, np.int32)
    shape_out[(1,)](np.zeros((3, 7), np.float32), out)
    assert out.tolist() == [3, 7]


@tj.kernel
def swap_out(out, A: tj.constexpr, B: tj.constexpr):
    a, b = B, A                                      # compile-time tuple unpacking
    first, _, third = (a, b, a + b)
    tj.store(out, (0,), tj.where(tj.arange(0, 4) == 0, a,
                                 tj.where(tj.arange(0, 4) == 1, b,
                                          tj.where(tj.arange(0, 4) == 2, first, third))))


def test_compile_time_unpacking(backend):
    out = np.zeros(4, np.int32)
    swap_out[(1,)](out, A=2, B=5)
    assert out.tolist() == [5, 2, 5, 7]


# ----------------------------------------------------------------- 2. compile-time comparisons
OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
             "==": operator.eq, "!=": operator.ne}


def _comparison_kernel(op: str):
    namespace = {"tj": tj}
    exec(f"def k(out, A: tj.constexpr, B: tj.constexpr):\n"
         f"    if A {op} B:\n        tj.store(out, (0,), tj.full((1,), 1, tj.int32))\n"
         f"    else:\n        tj.store(out, (0,), tj.full((1,), 0, tj.int32))\n", namespace)
    return tj.kernel(namespace["k"])


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_every_compile_time_comparison_folds_like_python(op, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    kernel = _comparison_kernel(op)
    for a, b in [(64, 64), (63, 64), (65, 64), (-1, -1), (0, 1), (2.5, 2.5), (2.5, 3)]:
        out = np.full(1, -7, np.int32)
        kernel[(1,)](out, A=a, B=b)
        assert out[0] == int(OPERATORS[op](a, b)), (a, op, b)


# -------------------------------------------------------- 3. the loop variable after a loop
def test_the_variable_of_a_runtime_loop_is_not_available_after_it():
    namespace = {"tj": tj}
    exec("def k(x, n):\n    i = 0\n    for i in range(n):\n        pass\n"
         "    tj.store(x, (i,), tj.zeros((1,), tj.float32))\n", namespace)
    kernel = tj.kernel(namespace["k"])
    with pytest.raises(tj.CompileError):
        kernel.tile_ir((tj.specs.ArraySpec(D.float32, 1), tj.specs.ScalarSpec(D.int32)), {})


# ------------------------------------------------------------------ 4. promotion, every pair
def _deviation(a: D.DType, b: D.DType) -> D.DType | None:
    """Where tilejit differs from NumPy, what it gives instead (the README's table)."""
    if a.is_float and b.is_float and a.bits == b.bits and a != b:
        return D.float32                     # float16 with bfloat16, or two float8 kinds
    if a.is_float != b.is_float and not (a.is_bool or b.is_bool):
        return a if a.is_float else b        # int with float: that float (NumPy: float64)
    if a.is_float and b.is_float and min(a.bits, b.bits) == 8:
        return a if a.bits > b.bits else b   # float8 with a wider float: the wider one
    if {a.kind, b.kind} == {"i", "u"} and 64 in (a.bits if a.kind == "u" else 0, b.bits if b.kind == "u" else 0):
        return D.int64                       # uint64 with a signed int: int64 (NumPy: float64)
    return None


@pytest.mark.parametrize("a,b", list(itertools.product(D.ALL, D.ALL)), ids=lambda d: d.name)
def test_promotion_of_every_ordered_pair(a, b):
    got = D.promote(a, b)
    assert got == D.promote(b, a)                                   # symmetric
    expected = _deviation(a, b)
    if expected is None:
        expected = D.from_numpy(np.result_type(a.np, b.np))
    assert got == expected, (a, b)


# ------------------------------------------------- 5. negative and out-of-range offsets
@tj.kernel
def shift_1d(x, y, off, B: tj.constexpr):
    tj.store(y, (off,), tj.load(x, (off,), (B,), other=-1.0) + 1.0)


@tj.kernel
def shift_2d(x, y, r, c, B: tj.constexpr):
    tj.store(y, (r, c), tj.load(x, (r, c), (B, B), other=-1.0) + 1.0)


def _window_1d(x, off, block):
    y = np.full_like(x, 7.0)
    for i in range(block):
        j = off + i
        if 0 <= j < len(x):
            y[j] = x[j] + 1.0
    return y


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), data=st.data())
def test_negative_and_past_the_end_offsets_1d(n, data):
    block = 16
    off = data.draw(st.integers(-block, n))
    x = np.arange(n, dtype=np.float32) + 10
    expected = _window_1d(x, off, block)
    for backend in ("interpret", "emulate"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TILEJIT_BACKEND", backend)
            y = np.full_like(x, 7.0)
            shift_1d[(1,)](x, y, off, B=block)
            np.testing.assert_array_equal(y, expected, err_msg=f"{backend} off={off}")


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 20), cols=st.integers(1, 20), data=st.data())
def test_negative_and_past_the_end_offsets_2d(rows, cols, data):
    block = 8
    r, c = data.draw(st.integers(-block, rows)), data.draw(st.integers(-block, cols))
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + 10
    expected = np.full_like(x, 7.0)
    for i, j in itertools.product(range(block), range(block)):
        if 0 <= r + i < rows and 0 <= c + j < cols:
            expected[r + i, c + j] = x[r + i, c + j] + 1.0
    for backend in ("interpret", "emulate"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TILEJIT_BACKEND", backend)
            y = np.full_like(x, 7.0)
            shift_2d[(1,)](x, y, r, c, B=block)
            np.testing.assert_array_equal(y, expected, err_msg=f"{backend} r={r} c={c}")


# -------------------------------------------- 6. cp.async rings at the ragged edge of a view
@pytest.mark.parametrize("bn,wgmma,tma", [(32, False, False), (64, True, False), (64, True, True)])
def test_rings_never_read_past_the_ragged_edge_of_a_column_slice(bn, wgmma, tma):
    """``buf[:, :36]`` of a 40 x 40 fp16 buffer: rows are 16-byte aligned (80 bytes) but the last
    16-byte chunk of a row is half outside the view.  The padding holds NaN; a ring that copied
    it would poison the product.  (Compiled for the view's own spec, as for a GPU tensor.)"""
    from examples.matmul import matmul_kernel
    from tilejit.backends import emulate as emulator
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    rng = np.random.default_rng(3)
    a_buf = np.full((40, 40), np.nan, np.float16)
    b_buf = np.full((40, 72), np.nan, np.float16)
    a_buf[:, :36] = rng.standard_normal((40, 36))
    b_buf[:36, :] = rng.standard_normal((36, 72))
    a, b = a_buf[:, :36], b_buf[:36, :bn]
    c = np.zeros((40, bn), np.float32)
    spec = tj.specs.ArraySpec(D.float16, 2)             # unit inner stride, 16-byte aligned rows
    kernel = matmul_kernel.kernel
    tile = kernel.tile_ir((spec, spec, tj.specs.ArraySpec(D.float32, 2)), {"BM": 64, "BN": bn, "BK": 16, "STAGES": 3})
    fn = compile_to_simt(tile, 4, "sm_90a", wgmma=wgmma, tma=tma)
    ops = {o.op for o in fn.walk()}
    assert (SimtOp.TMA_LOAD if tma else SimtOp.CP_ASYNC) in ops and (SimtOp.WGMMA in ops) == wgmma
    emulator.run(fn, (1, 1), [a, b, c])
    assert np.isfinite(c).all()
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-2, atol=2e-2)


# ------------------------------------------------------------------- 7. wgmma descriptors
def _descriptor_on_host(addr: int, lbo: int, sbo: int, swizzle: int) -> int:
    """Run ``codegen.mma.matrix_descriptor`` (the LLVM the GPU gets) on the host CPU."""
    import ctypes
    import llvmlite.binding as llvm
    from llvmlite import ir
    from tilejit.codegen import mma
    mod = ir.Module("desc")
    i32, i64 = ir.IntType(32), ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(i64, [i32]), "desc")
    b = ir.IRBuilder(fn.append_basic_block())
    ptr = b.inttoptr(fn.args[0], ir.PointerType(addrspace=mma.SHARED))
    b.ret(mma.matrix_descriptor(b, ptr, lbo, sbo, swizzle))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(str(mod))
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    return ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint32)(engine.get_function_address("desc"))(addr)


# PTX ISA, "Matrix Descriptor Format" (wgmma): bits 62-63 are the swizzle mode
PTX_SWIZZLE_MODES = {128: 1, 64: 2, 32: 3}


@pytest.mark.parametrize("swizzle", [128, 64, 32])
@pytest.mark.parametrize("addr,lbo,sbo", [(0x400, 16, 1024), (0x2C00, 8192, 1024), (0x3FFF0, 128, 256),
                                           (0x1230, 0x2AAB0, 0x15550)])      # odd offsets >> 4, every bit
def test_wgmma_descriptor_fields_decode_as_the_ptx_isa_says(swizzle, addr, lbo, sbo):
    d = _descriptor_on_host(addr, lbo, sbo, swizzle)
    assert d & 0x3FFF == (addr >> 4) & 0x3FFF                   # bits 0-13: start address >> 4
    assert (d >> 14) & 0x3 == 0
    assert (d >> 16) & 0x3FFF == lbo >> 4                       # bits 16-29: leading byte offset >> 4
    assert (d >> 30) & 0x3 == 0
    assert (d >> 32) & 0x3FFF == sbo >> 4                       # bits 32-45: stride byte offset >> 4
    assert (d >> 46) & 0x7 == 0
    assert (d >> 49) & 0x7 == 0                                 # bits 49-51: base offset (1024-aligned tiles)
    assert (d >> 52) & 0x3FF == 0
    assert d >> 62 == PTX_SWIZZLE_MODES[swizzle]                # bits 62-63: swizzle mode


# ------------------------------------------- 8./9. codegen's elementwise semantics, by running
HOST_INTS = [D.int8, D.int16, D.int32, D.int64, D.uint8, D.uint32]
HOST_NUMERIC = HOST_INTS + [D.float32]


def _values(dt: D.DType, n: int, rng) -> np.ndarray:
    if dt.is_bool:
        return rng.random(n) < 0.5
    if dt.is_float:
        return np.concatenate([rng.standard_normal(n - 6) * 100,
                               [0.0, -0.0, np.inf, -np.inf, np.nan, 1.5]]).astype(dt.np)
    info = np.iinfo(dt.np)
    return np.concatenate([rng.integers(info.min, info.max, n - 3, dtype=dt.np, endpoint=True),
                           np.array([info.min, info.max, 0], dt.np)])


def _same(got, expected):
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(got, expected)      # NaN == NaN here; -0.0 == 0.0
        assert (np.signbit(got) == np.signbit(expected))[~np.isnan(expected)].all()
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dt", HOST_NUMERIC + [D.bool_], ids=lambda d: d.name)
def test_where_picks_the_right_arm_when_run(dt):
    from tilejit.codegen.host import host_eval
    from tilejit.ir import TileOp
    rng = np.random.default_rng(1)
    cond, a, b = _values(D.bool_, 64, rng), _values(dt, 64, rng), _values(dt, 64, rng)
    _same(host_eval(TileOp.WHERE, [D.bool_, dt, dt], cond, a, b, out=dt), np.where(cond, a, b))


@pytest.mark.parametrize("op", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("dt", HOST_NUMERIC, ids=lambda d: d.name)
def test_comparisons_when_run(op, dt):
    from tilejit.codegen.host import host_eval
    from tilejit.ir import TileOp
    rng = np.random.default_rng(2)
    a, b = _values(dt, 64, rng), _values(dt, 64, rng)
    b[:8] = a[:8]                                           # equal operands too
    numpy_op = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                "GT": np.greater, "GE": np.greater_equal}[op]
    _same(host_eval(TileOp[op], [dt, dt], a, b, out=D.bool_), numpy_op(a, b))


@pytest.mark.parametrize("src,dst", [(s, d) for s in HOST_NUMERIC + [D.bool_] for d in HOST_NUMERIC + [D.bool_]
                                     if s != d], ids=str)
def test_casts_when_run(src, dst):
    from tilejit.codegen.host import host_eval
    from tilejit.ir import TileOp
    rng = np.random.default_rng(3)
    x = _values(src, 64, rng)
    if src.is_float and not dst.is_float and not dst.is_bool:
        info = np.iinfo(dst.np)                 # NumPy leaves out-of-range float -> int undefined
        x = x[np.isfinite(x) & (x >= info.min) & (x <= info.max)]
    with np.errstate(all="ignore"):
        expected = x.astype(dst.np)
    _same(host_eval(TileOp.CAST, [src], x, out=dst), expected)


@pytest.mark.parametrize("op", ["MOD", "FLOORDIV"])
@pytest.mark.parametrize("dt", [D.int32, D.int64, D.float32], ids=lambda d: d.name)
def test_floor_division_and_modulo_against_numpy_directly(op, dt, backend):
    """The interpreter and the emulator against NumPy itself (emulate vs interpret alone would
    compare the interpreter with itself)."""
    namespace = {"tj": tj}
    sym = "%" if op == "MOD" else "//"
    exec(f"def k(x, y, z, B: tj.constexpr):\n    tj.store(z, (0,), tj.load(x, (0,), (B,)) {sym} "
         f"tj.load(y, (0,), (B,)))\n", namespace)
    kernel = tj.kernel(namespace["k"])
    rng = np.random.default_rng(4)
    x = (rng.integers(-50, 50, 64)).astype(dt.np)
    y = rng.choice([-7, -3, -1, 1, 2, 5], 64).astype(dt.np)
    z = np.zeros(64, dt.np)
    kernel[(1,)](x, y, z, B=64)
    expected = np.mod(x, y) if op == "MOD" else np.floor_divide(x, y)
    _same(z, expected)
