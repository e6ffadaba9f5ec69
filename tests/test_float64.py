"""float64 tiles: NumPy's default dtype works in kernels for IEEE arithmetic (``//`` and ``%``
too, exact), comparisons,
``where``, ``sqrt``/``abs``/rounding, ``maximum``/``minimum``, reductions and casts, on interpret
and emulate against NumPy (cuda under ``-m gpu``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilejit as tj

from conftest import assemble_or_skip

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]
OPS = ["add", "sub", "mul", "div", "floordiv", "mod", "rsqrt", "max", "min", "where", "sqrt", "abs", "floor", "ceil", "trunc", "round", "neg"]


@tj.kernel
def f64_ops(x, y, z, s, B: tj.constexpr, OP: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    u = tj.load(y, (0,), (B,))
    if OP == "add":
        r = t + u
    elif OP == "sub":
        r = t - u * 0.1
    elif OP == "mul":
        r = t * u
    elif OP == "div":
        r = t / u
    elif OP == "floordiv":
        r = t // u
    elif OP == "mod":
        r = t % u
    elif OP == "rsqrt":
        r = tj.rsqrt(tj.abs(t))
    elif OP == "max":
        r = tj.maximum(t, u)
    elif OP == "min":
        r = tj.minimum(t, u)
    elif OP == "where":
        r = tj.where(t > u, t, u + 1)
    elif OP == "sqrt":
        r = tj.sqrt(tj.abs(t))
    elif OP == "abs":
        r = tj.abs(t)
    elif OP == "floor":
        r = tj.floor(t * 3.0)
    elif OP == "ceil":
        r = tj.ceil(t * 3.0)
    elif OP == "trunc":
        r = tj.trunc(t * 3.0)
    elif OP == "round":
        r = tj.round(t * 3.0)
    else:
        r = -t
    tj.store(z, (0,), r)
    tj.store(s, (0,), tj.sum(t * u, axis=0, keepdims=True))
    tj.store(s, (1,), tj.max(t, axis=0, keepdims=True))
    tj.store(s, (2,), tj.argmax(t, axis=0, keepdims=True).to(tj.float64))


def reference(op, t, u):
    with np.errstate(all="ignore"):
        return {"add": t + u, "sub": t - u * 0.1, "mul": t * u, "div": t / u,
                "floordiv": np.floor_divide(t, u), "mod": np.remainder(t, u),
                "rsqrt": 1.0 / np.sqrt(np.abs(t)), "max": np.maximum(t, u),
                "min": np.minimum(t, u), "where": np.where(t > u, t, u + 1), "sqrt": np.sqrt(np.abs(t)),
                "abs": np.abs(t), "floor": np.floor(t * 3.0), "ceil": np.ceil(t * 3.0),
                "trunc": np.trunc(t * 3.0), "round": np.round(t * 3.0), "neg": -t}[op]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=20, deadline=None)
@given(op=st.sampled_from(OPS), n=st.sampled_from([1, 16, 128]), warps=st.sampled_from([1, 4]),
       scale=st.sampled_from([1e-300, 1.0, 1e200]), seed=st.integers(0, 99))
def test_float64_ops_match_numpy_bit_for_bit(backend, op, n, warps, scale, seed):
    """Elementwise results are NumPy's to the bit (IEEE double, also far outside float32's range);
    the sum agrees to reassociation and max/argmax exactly."""
    rng = np.random.default_rng(seed)
    t, u = rng.standard_normal(n) * scale, rng.standard_normal(n) * scale + scale / 3
    z, s = np.zeros(n), np.zeros(3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", backend)
        f64_ops[(1,)](t, u, z, s, B=n, OP=op, num_warps=warps)
    want = reference(op, t, u)
    assert np.array_equal(z, want, equal_nan=True), (z[:4], want[:4])
    with np.errstate(all="ignore"):           # 1e200 * 1e200 overflows to inf, as on the device
        total = np.sum(t * u)
    np.testing.assert_allclose(s[0], total, rtol=1e-12, atol=1e-300 * n)
    assert s[1] == t.max() and s[2] == np.argmax(t)


@tj.kernel
def f64_casts(x, f32, bf, i64, u8, back, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    tj.store(f32, (0,), t.to(tj.float32))
    tj.store(bf, (0,), t.to(tj.bfloat16))
    tj.store(i64, (0,), t.to(tj.int64))
    tj.store(u8, (0,), (t > 0).to(tj.uint8))
    tj.store(back, (0,), t.to(tj.float32).to(tj.float64) + tj.load(i64, (0,), (B,)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_casts_round_once_like_numpy(backend, monkeypatch):
    """float64 -> float32 / bfloat16 round once (no float32 step for bfloat16), -> int64 truncates
    exactly past 2**24 (no float32 step), and ints and floats promote to float64."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(60) * 1e6, [2.0 ** 40 + 1.5, -(2.0 ** 50) - 0.5, 1 + 2.0 ** -9 + 2.0 ** -30,
                                                        -0.0]])
    f32, bf, i64, u8, back = (np.zeros(64, d) for d in (np.float32, tj.bfloat16.np, np.int64, np.uint8, np.float64))
    f64_casts[(1,)](x, f32, bf, i64, u8, back, B=64)
    np.testing.assert_array_equal(f32, x.astype(np.float32))
    np.testing.assert_array_equal(bf.view(np.uint16), x.astype(tj.bfloat16.np).view(np.uint16))
    np.testing.assert_array_equal(i64, x.astype(np.int64))
    np.testing.assert_array_equal(u8, (x > 0).astype(np.uint8))
    np.testing.assert_array_equal(back, x.astype(np.float32).astype(np.float64) + x.astype(np.int64))


def test_promotion_to_float64_follows_numpy():
    D = tj.dtypes
    assert D.promote(D.float32, D.float64) is D.float64 and D.promote(D.bfloat16, D.float64) is D.float64
    assert D.promote(D.int64, D.float64) is D.float64 and D.weak_promote(D.float64, 1.5) is D.float64
    assert D.from_numpy(np.float64) is D.float64


def test_the_float64_ptx_computes_in_double_and_assembles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    x = np.zeros(128)
    specs, consts, _ = f64_ops.specialise(f64_ops.bind((x, x, x, x), {"B": 128, "OP": "div"}))
    ptx = f64_ops.compile(specs, consts, 4, "cuda").artifact.ptx
    assert "div.rn.f64" in ptx and "add.rn.f64" in ptx and "cvt.rn.f32.f64" not in ptx
    assemble_or_skip(ptx, "sm_90a")


@tj.kernel
def f64_divmod(x, y, q, r, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    u = tj.load(y, (0,), (B,))
    tj.store(q, (0,), t // u)
    tj.store(r, (0,), t % u)


def wide_pairs(n: int, seed: int):
    """Operands whose quotients span float64's range: 1e300 % 1e-300, subnormals, zeros, inf, NaN."""
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308, 1e300,
                        -1.7976931348623157e308, np.inf, -np.inf, np.nan, 0.1, 7.0, -2.5])
    t = np.concatenate([special, np.exp(rng.uniform(-744, 709, n - 16)) * rng.choice([-1.0, 1.0], n - 16)])
    return t, rng.permutation(t)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_float64_floor_division_and_modulo_are_numpys_across_the_range(backend, seed, monkeypatch):
    """``//`` and ``%`` give NumPy's floor_divide and remainder to the bit, also where x / y
    passes 2**53 (the remainder is exact, not x - trunc(x / y) * y)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    t, u = wide_pairs(256, seed)
    q, r = np.zeros(256), np.zeros(256)
    f64_divmod[(1,)](t, u, q, r, B=256)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(t, u), np.remainder(t, u)
    assert np.array_equal(q.view(np.int64), want_q.view(np.int64)) or np.array_equal(q, want_q, equal_nan=True)
    signed = ~np.isnan(want_r)          # a NaN's sign is the platform's (the GPU's is always +)
    np.testing.assert_array_equal(np.signbit(r)[signed], np.signbit(want_r)[signed])
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(q, want_q)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_float64_remainder_is_a_loop_of_exact_steps_and_assembles(arch):
    """No ``rem`` instruction (NVPTX's frem is inexact): a truncated quotient, an FMA, and a loop."""
    from tilejit.backends import cuda
    x = np.zeros(128)
    specs, consts, _ = f64_divmod.specialise(f64_divmod.bind((x, x, x, x), {"B": 128}))
    ptx = cuda.build(f64_divmod.tile_ir(specs, consts), 4, arch, stop_after="ptx")["ptx"]
    assert "cvt.rzi.f64.f64" in ptx and "fma.rn.f64" in ptx and "rem." not in ptx
    assemble_or_skip(ptx, arch)


# --- tj.dot in float64 on the DMMA tensor cores (mma.sync.m8n8k4.f64, sm_80+) ---------------------
@tj.kernel
def f64_matmul(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float64)
    for k in range(0, a.shape[1], BK):              # a plain range, as a Triton user writes it
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)))
    tj.store(c, (m, n), acc)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("BM, BN, BK, warps", [(32, 32, 16, 4), (64, 32, 32, 4), (16, 16, 8, 1), (64, 64, 16, 8)])
def test_float64_dot_matches_numpy_on_ragged_shapes(backend, BM, BN, BK, warps, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(BM + BN + BK + warps)
    a, b = rng.standard_normal((100, 90)), rng.standard_normal((90, 70))
    c = np.full((100, 70), np.nan)
    f64_matmul[(tj.cdiv(100, BM), tj.cdiv(70, BN))](a, b, c, BM=BM, BN=BN, BK=BK, num_warps=warps)
    np.testing.assert_allclose(c, a @ b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_float64_dot_runs_on_dmma_and_assembles(arch):
    """Every product is one mma.sync.m8n8k4.f64: 64x32 tile, 4 warps, K 32 -> 64 per warp."""
    from tilejit.backends import cuda
    x = np.zeros((64, 64))
    specs, consts, _ = f64_matmul.specialise(f64_matmul.bind((x, x, x), {"BM": 64, "BN": 32, "BK": 32}))
    ptx = cuda.build(f64_matmul.tile_ir(specs, consts), 4, arch, stop_after="ptx")["ptx"]
    assert ptx.count("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64") == 64
    assert "fma.rn.f64" not in ptx                   # not the FMA fallback
    # the loads are made in the fragment layouts (assign_layouts.pin_dmma_operands): per warp
    # and k tile, 2 x 8 doubles of A and 8 x 4 of B, with no trip through shared memory
    assert "st.shared" not in ptx and "bar.sync" not in ptx and ptx.count("ld.global") == 48
    assemble_or_skip(ptx, arch)


@tj.kernel
def f64_matmul_nt(a, b_t, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """c = a @ b_t.T, B given N x K as a Linear layer's weight, spelled with .T."""
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float64)
    for k in tj.range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b_t, (n, k), (BN, BK)).T, acc)
    tj.store(c, (m, n), acc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_dot_of_a_transposed_weight(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((70, 40)), rng.standard_normal((50, 40))
    c = np.full((70, 50), np.nan)
    f64_matmul_nt[(tj.cdiv(70, 32), tj.cdiv(50, 32))](a, w, c, BM=32, BN=32, BK=16, num_warps=4)
    np.testing.assert_allclose(c, a @ w.T, rtol=1e-13, atol=1e-13)


def test_the_transposed_spelling_reaches_dmma_too():
    from tilejit.backends import cuda
    x = np.zeros((64, 64))
    specs, consts, _ = f64_matmul_nt.specialise(f64_matmul_nt.bind((x, x, x), {"BM": 32, "BN": 32, "BK": 16}))
    ptx = cuda.build(f64_matmul_nt.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]
    assert ptx.count("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64") == 16 and "fma.rn.f64" not in ptx
