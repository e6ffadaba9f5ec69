"""The SIMT emulator against NumPy: kernels built by hand and through the frontend are lowered by
the real pipeline and run with NumPy, at several num_warps, on ragged shapes."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import tilejit as tj
from tilejit import backends, ir, simt
from tilejit.backends import emulate as emulator
from tilejit import dtypes as D
from tilejit.frontend import compile_tile_ir
from tilejit.ir import AxisAttrs, ConstAttrs, LoadAttrs, TileOp, TileType, scalar
from tilejit.kernel import classify_argument
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp

BF16 = np.dtype(ml_dtypes.bfloat16)
warps = st.sampled_from([1, 4, 8])


def emulate(pyfn, args, grid, num_warps=4, persist=True, **consts):
    """Compile ``pyfn`` for ``args`` through frontend + pipeline and run it in the emulator."""
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    fn = compile_to_simt(compile_tile_ir(pyfn, specs, consts), num_warps, persist=persist)
    emulator.run(fn, grid, args)
    return fn


def rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------- hand-built tile IR
def axpy_ir(block: int):
    """out[i] = a * x[i] + y[i] over 1-D arrays, BLOCK elements per program, built by hand."""
    f32, i32 = D.float32, D.int32
    args = [ir.Value(ir.ArrayType(f32, 1)) for _ in range(3)] + [ir.Value(scalar(f32))]
    blk = ir.Block(args)
    b = ir.Builder(blk)
    t = TileType((block,), f32)
    pid = b.create(TileOp.PROGRAM_ID, [], [scalar(i32)], AxisAttrs(0)).result
    size = b.create(TileOp.CONSTANT, [], [scalar(i32)], ConstAttrs(block)).result
    off = b.create(TileOp.MUL, [pid, size], [scalar(i32)]).result
    x = b.create(TileOp.LOAD, [args[0], off], [t], LoadAttrs(0.0)).result
    y = b.create(TileOp.LOAD, [args[1], off], [t], LoadAttrs(0.0)).result
    a = b.create(TileOp.SPLAT, [args[3]], [t]).result
    b.create(TileOp.STORE, [args[2], off, b.create(TileOp.FMA, [a, x, y], [t]).result])
    specs = [classify_argument("x", np.zeros(4, np.float32))[0]] * 3 + [tj.specs.ScalarSpec(f32)]
    return ir.Function("axpy", blk, ["x", "y", "out", "a"], {"specs": specs})


@given(st.integers(1, 700), warps, st.integers(0, 2**32 - 1))
def test_handbuilt_axpy_on_ragged_1d(n, nw, seed):
    rng = np.random.default_rng(seed)
    x, y = rand(rng, n), rand(rng, n)
    out = np.full(n + 3, 7.0, np.float32)           # elements past n must stay untouched
    fn = compile_to_simt(axpy_ir(128), nw)
    emulator.run(fn, (-(-n // 128),), [x, y, out[:n], np.float32(1.5)])
    np.testing.assert_allclose(out[:n], 1.5 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert (out[n:] == 7.0).all()


# ------------------------------------------------------------------------------- elementwise
def ew2d(x, y, out, BM: tj.constexpr, BN: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    a = tj.load(x, (m, n), (BM, BN))
    b = tj.load(y, (m, n), (BM, BN), other=1.0)
    tj.store(out, (m, n), tj.where(a > b, a * 2 - b, tj.sqrt(tj.abs(b)) + tj.exp(a)))


@given(st.integers(1, 40), st.integers(1, 70), warps, st.integers(0, 2**32 - 1))
def test_elementwise_on_ragged_2d_tiles(rows, cols, nw, seed):
    rng = np.random.default_rng(seed)
    x, y = rand(rng, (rows, cols)), rand(rng, (rows, cols))
    out = np.zeros((rows, cols), np.float32)
    emulate(ew2d, [x, y, out], (-(-rows // 16), -(-cols // 32)), nw, BM=16, BN=32)
    ref = np.where(x > y, x * 2.0 - y, np.sqrt(np.abs(y)) + np.exp(x))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def int_ops(x, out, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    v = tj.load(x, (i,), (BLOCK,))
    tj.store(out, (i,), (v // 3) * 7 + v % 5 - (v >> 1) ^ (v & 6))


def test_integer_ops_follow_python_semantics():
    x = np.arange(-300, 301, dtype=np.int32)
    out = np.zeros_like(x)
    emulate(int_ops, [x, out], (-(-len(x) // 256),), 4, BLOCK=256)
    ref = (x // 3) * 7 + x % 5 - (x >> 1) ^ (x & 6)
    np.testing.assert_array_equal(out, ref)


# ----------------------------------------------------------------------------------- softmax
def softmax(x, y, BLOCK: tj.constexpr):
    row = tj.program_id(0)
    t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf).to(tj.float32)
    t = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(y, (row, 0), (t / tj.sum(t, axis=1, keepdims=True)).to(y.dtype))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@given(rows=st.integers(1, 6), cols=st.integers(1, 600), nw=warps, seed=st.integers(0, 2**32 - 1))
def test_softmax_rows(dtype, rows, cols, nw, seed):
    rng = np.random.default_rng(seed)
    x = (rand(rng, (rows, cols)) * 4).astype(dtype)
    y = np.zeros_like(x)
    emulate(softmax, [x, y], (rows,), nw, BLOCK=tj.next_power_of_2(cols))
    xf = x.astype(np.float64)
    ref = np.exp(xf - xf.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)


# -------------------------------------------------------------------------------- reductions
def reductions(x, s0, m1, a0, a1, BM: tj.constexpr, BN: tj.constexpr):
    t = tj.load(x, (0, 0), (BM, BN), other=0)
    tj.store(s0, (0, 0), tj.sum(t, axis=0, keepdims=True))
    tj.store(m1, (0, 0), t - tj.max(t, axis=1, keepdims=True))
    tj.store(a0, (0,), tj.argmin(t, axis=0))
    tj.store(a1, (0,), tj.argmax(t, axis=1))


@given(st.sampled_from([(1, 8), (4, 64), (16, 16), (64, 8), (8, 128), (2, 256)]), warps,
       st.sampled_from([np.float32, np.int32]), st.integers(0, 2**32 - 1))
def test_reductions_along_both_axes(shape, nw, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 4, shape).astype(dtype)       # small ints: plenty of ties for arg*
    bm, bn = shape
    s0, m1 = np.zeros((1, bn), dtype), np.zeros(shape, dtype)
    a0, a1 = np.zeros(bn, np.int32), np.zeros(bm, np.int32)
    emulate(reductions, [x, s0, m1, a0, a1], (1,), nw, BM=bm, BN=bn)
    np.testing.assert_array_equal(s0, x.sum(0, keepdims=True))
    np.testing.assert_array_equal(m1, x - x.max(1, keepdims=True))
    np.testing.assert_array_equal(a0, x.argmin(0))
    np.testing.assert_array_equal(a1, x.argmax(1))


def full_sum(x, out, BLOCK: tj.constexpr):
    t = tj.load(x, (tj.program_id(0) * BLOCK,), (BLOCK,))
    tj.store(out, (tj.program_id(0),), tj.full((1,), tj.sum(t, axis=0), tj.float32))


def test_full_reduction_to_a_scalar_reaches_every_thread():
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(4, np.float32)
    emulate(full_sum, [x, out], (4,), 8, BLOCK=256)
    np.testing.assert_array_equal(out, [x[i * 256:(i + 1) * 256].sum() for i in range(4)])


# -------------------------------------------------------------------------- transposes, views
def transpose(x, y, BM: tj.constexpr, BN: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    tj.store(y, (n, m), tj.load(x, (m, n), (BM, BN)).T)


@given(st.integers(1, 70), st.integers(1, 70), warps, st.booleans())
def test_transpose_ragged_and_strided(rows, cols, nw, strided_input):
    base = np.arange(rows * cols * 2, dtype=np.float32).reshape(rows, cols * 2)
    x = base[:, ::2] if strided_input else base[:, :cols].copy()
    y = np.zeros((cols, rows), np.float32)
    emulate(transpose, [x, y], (-(-rows // 32), -(-cols // 16)), nw, BM=32, BN=16)
    np.testing.assert_array_equal(y, x.T)


def copy2d(x, y, BM: tj.constexpr, BN: tj.constexpr):
    tj.store(y, (0, 0), tj.load(x, (0, 0), (BM, BN)))


def test_negative_and_transposed_strides_write_back_in_place():
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    out = np.zeros((8, 6), np.float32)
    emulate(copy2d, [base[::-1, ::-1], out.T], (1,), 4, BM=8, BN=8)
    np.testing.assert_array_equal(out.T, base[::-1, ::-1])


# -------------------------------------------------------------------------------- control flow
def row_sums_loop(x, y, K, BN: tj.constexpr):
    acc = tj.zeros((1, BN), tj.float32)
    for k in range(0, K):
        acc = acc + tj.load(x, (k, 0), (1, BN))
    if K > 3:
        acc = acc * 2
    else:
        acc = acc - 1
    tj.store(y, (0, 0), acc)


@pytest.mark.parametrize("k", [0, 2, 5])
@pytest.mark.parametrize("nw", [1, 4])
def test_for_loop_with_carried_tile_and_if_else(k, nw):
    x = np.arange(7 * 50, dtype=np.float32).reshape(7, 50) / 7
    y = np.zeros((1, 50), np.float32)
    emulate(row_sums_loop, [x, y, k], (1,), nw, BN=64)
    acc = x[:k].sum(0, keepdims=True)
    np.testing.assert_allclose(y, acc * 2 if k > 3 else acc - 1, rtol=1e-6)


def while_doubling(x, y, limit, BLOCK: tj.constexpr):
    pid = tj.program_id(0)
    t = tj.load(x, (pid * BLOCK,), (BLOCK,))
    i = pid
    while i < limit:          # programs run different trip counts
        t = t * 2
        i = i + 1
    tj.store(y, (pid * BLOCK,), t)


def test_while_loop_with_per_program_trip_counts():
    x = np.ones(64 * 5, np.float32)
    y = np.zeros_like(x)
    emulate(while_doubling, [x, y, 3], (5,), 4, BLOCK=64)
    ref = np.repeat([2.0 ** max(3 - p, 0) for p in range(5)], 64)
    np.testing.assert_array_equal(y, ref)


# ----------------------------------------------------------------------------- DOT fallback
def matmul(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc.to(c.dtype))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40), nw=st.sampled_from([1, 4]))
def test_fallback_dot_on_ragged_shapes(dtype, m, n, k, nw):
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    c = np.zeros((m, n), np.float32)
    emulate(matmul, [a, b, c], (-(-m // 32), -(-n // 16)), nw, BM=32, BN=16, BK=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------- checks
def test_missing_barrier_is_reported_as_a_race():
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    specs = [classify_argument("x", x)[0]] * 2
    fn = compile_to_simt(compile_tile_ir(transpose, specs, {"BM": 32, "BN": 32}), 4, persist=False)
    emulator.run(fn, (1, 1), [x, np.zeros_like(x)])                    # fine as compiled
    fn.body.ops = [o for o in fn.body.ops if o.op is not SimtOp.BARRIER]
    with pytest.raises(emulator.EmulatorError, match="race"):
        emulator.run(fn, (1, 1), [x, np.zeros_like(x)])


def test_vector_access_claims_are_checked():
    x = np.zeros(257, np.float32)[1:]                                  # 4 bytes past alignment
    spec = classify_argument("x", np.zeros(256, np.float32))[0]       # ... but claimed aligned
    fn = compile_to_simt(compile_tile_ir(copy2d_1d, [spec, spec], {"B": 256}), 4)
    with pytest.raises(emulator.EmulatorError, match="aligned"):
        emulator.run(fn, (1,), [x, np.zeros(256, np.float32)])


def copy2d_1d(x, y, B: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (0,), (B,)))


def test_a_prefix_mask_claim_is_checked():
    """The lowering's bounds masks hold on a prefix of each vector group (``GlobalAttrs.prefix``:
    codegen tests only a group's last and first); a load whose mask breaks that is refused."""
    x, y = np.arange(200, dtype=np.float32), np.zeros(200, np.float32)
    spec = classify_argument("x", x)[0]
    fn = compile_to_simt(compile_tile_ir(copy2d_1d, [spec, spec], {"B": 256}), 4)
    [load] = [o for o in fn.walk() if o.op is SimtOp.LOAD_GLOBAL]
    assert load.attrs.vec > 1 and load.attrs.prefix
    [store] = [o for o in fn.walk() if o.op is SimtOp.STORE_GLOBAL]
    assert store.attrs.prefix
    emulator.run(fn, (1,), [x, y])                                     # a ragged last group: fine
    np.testing.assert_array_equal(y, x)
    n, v = load.operands[2].type.n, load.attrs.vec
    holes = ir.Operation(SimtOp.CONSTANT, [], [load.operands[2].type],
                         simt.VectorConstAttrs(tuple(r % v != 0 for r in range(n))))
    cut = ir.Operation(SimtOp.ELEMENTWISE, [load.operands[2], holes.result], [load.operands[2].type],
                       simt.EwAttrs(TileOp.AND))
    fn.body.ops[fn.body.ops.index(load):fn.body.ops.index(load)] = [holes, cut]
    load.operands[2] = cut.result                                      # each group's first register off
    with pytest.raises(emulator.EmulatorError, match="prefix"):
        emulator.run(fn, (1,), [x, y])


def test_shuffle_xor_matches_ptx_butterfly():
    """out[tid] = tid of lane (lane ^ 5) in the same warp, from SIMT IR written by hand."""
    i32 = D.int32
    blk = ir.Block()
    b = ir.Builder(blk)
    ptr = b.create(SimtOp.PARAM, [], [simt.PtrType(i32)], AxisAttrs(0)).result
    tid = b.create(SimtOp.THREAD_ID, [], [simt.RegType(i32)]).result
    other = b.create(SimtOp.SHUFFLE_XOR, [tid], [simt.RegType(i32)], simt.MaskAttrs(5)).result
    yes = b.create(SimtOp.CONSTANT, [], [simt.RegType(D.bool_)], simt.VectorConstAttrs((True,))).result
    b.create(SimtOp.STORE_GLOBAL, [ptr, tid, other, yes], [], simt.GlobalAttrs())
    fn = ir.Function("shfl", blk, ["out"], simt.SimtMeta("shfl", [simt.ParamDesc("ptr", 0, None, i32)], 2))
    out = np.zeros(64, np.int32)
    emulator.run(fn, 1, [out])
    tids = np.arange(64)
    np.testing.assert_array_equal(out, (tids & ~31) | ((tids & 31) ^ 5))


def test_emulate_backend_is_registered_and_launches(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    assert isinstance(backends.get("emulate"), emulator.EmulateBackend)
    kernel = tj.kernel(softmax) if hasattr(tj, "kernel") else pytest.skip("no tj.kernel yet")
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    y = np.zeros_like(x)
    kernel[(3,)](x, y, BLOCK=128)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5)
    assert "shuffle_xor" in kernel.inspect(x, y, BLOCK=128).simt_ir


# ------------------------------------------------------------------ data movement between threads
def reshape_and_bias(x, bias, y, M: tj.constexpr, N: tj.constexpr):
    t = tj.load(x, (0, 0), (M, N))
    flat = t.reshape((M * N,)).reshape((N, M))                 # moves elements between threads
    row = tj.load(bias, (0,), (M,)).reshape((1, M))           # (1, M) row broadcast over N rows
    tj.store(y, (0, 0), flat + tj.broadcast_to(row, (N, M)) * tj.num_programs(0))


@pytest.mark.parametrize("nw", [1, 4])
def test_reshape_and_row_broadcast_through_shared_memory(nw):
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    bias = np.arange(16, dtype=np.float32) * 100
    y = np.zeros((8, 16), np.float32)
    emulate(reshape_and_bias, [x, bias, y], (2,), nw, M=16, N=8)
    np.testing.assert_array_equal(y, x.reshape(8, 16) + bias[None, :] * 2)


def transpose_if(x, y, flip, B: tj.constexpr):
    t = tj.load(x, (0, 0), (B, B))
    if flip > 0:
        t = t.T + 1
    else:
        t = t - 1
    tj.store(y, (0, 0), t)


@pytest.mark.parametrize("flip", [0, 1])
def test_shared_memory_inside_a_branch(flip):
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    y = np.zeros_like(x)
    emulate(transpose_if, [x, y, flip], (1,), 4, B=32)
    np.testing.assert_array_equal(y, x.T + 1 if flip else x - 1)


def test_64_bit_index_math_for_large_arrays():
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    spec = tj.specs.ArraySpec(D.float32, 1, large=True)
    fn = compile_to_simt(compile_tile_ir(axpy_like, [spec, spec], {"B": 256}), 4)
    offsets = [o.operands[1].type.dtype for o in fn.walk() if o.op is SimtOp.LOAD_GLOBAL]
    assert offsets == [D.int64]
    emulator.run(fn, (4,), [x, y])
    np.testing.assert_array_equal(y, x * 3)


def scale_by_shape(x, y, B: tj.constexpr):
    n = x.shape[0]
    i = tj.program_id(0) * B
    tj.store(y, (i,), tj.load(x, (i,), (B,)) * (n - 997))


def test_shape_of_a_large_array_is_int64_and_verifies():
    """``x.shape[i]`` of an array spanning 2**31 elements is int64: the verifier accepts it
    (it required int32 and failed every such kernel with 'VerifyError dim')."""
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    spec = tj.specs.ArraySpec(D.float32, 1, large=True)
    tile_fn = compile_tile_ir(scale_by_shape, [spec, spec], {"B": 256})
    assert [o.result.type.dtype for o in tile_fn.walk() if o.op is TileOp.DIM] == [D.int64]
    from tilejit.verifier import verify
    verify(tile_fn)
    fn = compile_to_simt(tile_fn, 4, verify=True)            # verify after every pass
    emulator.run(fn, (4,), [x, y])
    np.testing.assert_array_equal(y, x * 3)


def axpy_like(x, y, B: tj.constexpr):
    i = tj.program_id(0) * B
    tj.store(y, (i,), tj.load(x, (i,), (B,)) * 3)


# ------------------------------------------------------------ aranges, odd shapes, other dtypes
def causal_mask(x, y, BM: tj.constexpr, BN: tj.constexpr):
    rows = tj.arange(0, BM)
    cols = tj.arange(0, BN)
    t = tj.load(x, (0, 0), (BM, BN))
    keep = rows[:, None] >= cols[None, :]
    tj.store(y, (0, 0), tj.where(keep, t, rows[:, None] * 100 + cols[None, :]))


@pytest.mark.parametrize("nw", [1, 4, 8])
def test_arange_masks_materialise_in_the_tiles_layout(nw):
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    y = np.zeros_like(x)
    emulate(causal_mask, [x, y], (1,), nw, BM=16, BN=64)
    r, c = np.mgrid[:16, :64]
    np.testing.assert_array_equal(y, np.where(r >= c, x, r * 100 + c))


def odd_tile(x, y, s, BM: tj.constexpr, BN: tj.constexpr):
    t = tj.load(x, (0, 0), (BM, BN))
    tj.store(y, (0, 0), t.T - tj.sum(t, axis=1, keepdims=True).T)
    tj.store(s, (0,), tj.max(t, axis=0))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.float32])
def test_non_power_of_two_tiles_and_narrow_dtypes(dtype):
    x = np.arange(-20, 28).reshape(6, 8)[:, :6].astype(dtype)   # (6, 6) with a stride of 8
    y = np.zeros((6, 6), dtype)
    s = np.zeros(6, dtype)
    emulate(odd_tile, [x, y, s], (1,), 4, BM=6, BN=6)
    np.testing.assert_array_equal(y, (x.T - x.sum(1, keepdims=True, dtype=x.dtype).T).astype(dtype))
    np.testing.assert_array_equal(s, x.max(0))


def add_bias(x, bias, y, BM: tj.constexpr, BN: tj.constexpr):
    m = tj.program_id(0) * BM
    t = tj.load(x, (m, 0), (BM, BN))
    tj.store(y, (m, 0), t + tj.load(bias, (0,), (BN,))[None, :])


@pytest.mark.parametrize("nw", [1, 4])
def test_bias_row_is_loaded_in_the_broadcast_layout_without_shared_memory(nw):
    x = np.arange(40 * 24, dtype=np.float32).reshape(40, 24)
    bias = np.arange(24, dtype=np.float16) * 100        # 16-bit: its own layout would differ
    y = np.zeros_like(x)
    fn = emulate(add_bias, [x, bias, y], (3,), nw, persist=False, BM=16, BN=32)
    np.testing.assert_array_equal(y, x + bias)
    assert fn.meta.shared_bytes == 0


def transpose_twice(x, y, B: tj.constexpr):
    t = tj.load(x, (0, 0), (B, B))
    tj.store(y, (0, 0), t.T)
    tj.store(x, (0, 0), (t * 2).T)


def test_missing_barrier_before_buffer_reuse_is_reported():
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    specs = [classify_argument("x", x)[0]] * 2
    fn = compile_to_simt(compile_tile_ir(transpose_twice, specs, {"B": 32}), 4)
    barriers = [i for i, o in enumerate(fn.body.ops) if o.op is SimtOp.BARRIER]
    assert len(barriers) == 3
    del fn.body.ops[barriers[1]]                 # the one guarding the reuse of the bytes
    with pytest.raises(emulator.EmulatorError, match="read by"):
        emulator.run(fn, (1,), [x.copy(), np.zeros_like(x)])


def scale_tail(x, y, a, first, BLOCK: tj.constexpr):
    i = (tj.program_id(0) + first) * BLOCK              # past 2**31 - 1: int32 would wrap
    tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)) * a)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_offsets_past_2_31_elements_do_not_wrap(backend, monkeypatch):
    """The last two blocks of a 2**31 + 2**20 element array, as zero-stride views (one element of
    memory each): the offsets are computed in 64 bits, so the blocks are in range and written
    (in int32 they wrapped negative, were masked off, and nothing was written)."""
    from numpy.lib.stride_tricks import as_strided
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    n, block = 2**31 + 2**20, 1024
    xb, yb = np.array([1.5], np.float16), np.zeros(1, np.float16)
    x, y = as_strided(xb, shape=(n,), strides=(0,)), as_strided(yb, shape=(n,), strides=(0,))
    tj.kernel(scale_tail)[(2,)](x, y, np.float16(2.0), n // block - 2, BLOCK=block)
    assert yb[0] == 3.0


def test_only_large_arrays_get_64_bit_offsets():
    from tilejit.passes.widen_offsets import widen_offsets
    small, large = tj.specs.ArraySpec(D.float16, 1), tj.specs.ArraySpec(D.float16, 1, large=True)
    for specs, width in (([small, small], 32), ([large, large], 64)):
        fn = widen_offsets(compile_tile_ir(scale_tail, specs + [tj.specs.ScalarSpec(D.float16),
                                                                 tj.specs.ScalarSpec(D.int32)], {"BLOCK": 1024}))
        offsets = [o.operands[1] for o in fn.walk() if o.op in (TileOp.LOAD, TileOp.STORE)]
        assert {v.type.dtype.bits for v in offsets} == {width}
        if width == 64:                              # the product itself is 64-bit, not a cast of it
            assert all(v.owner.op is TileOp.MUL for v in offsets)


def count_inside(out, start, n, B: tj.constexpr):
    offs = start * 4 + tj.arange(0, B)                  # 2**32 + i: wraps to i in int32
    tj.store(out, (0,), tj.where(offs < n, 1, 0))


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_int32_arithmetic_compared_with_an_int64_does_not_wrap_first(backend, monkeypatch):
    """``offs < n`` with an int64 ``n`` promotes ``offs``: it is computed in 64 bits rather than
    cast after it wrapped (which made every lane look inside)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    out = np.full(8, 7, np.int32)
    tj.kernel(count_inside)[(1,)](out, 2**30, 2**32 + 2, B=8)
    np.testing.assert_array_equal(out, [1, 1, 0, 0, 0, 0, 0, 0])
