"""Same code however it is spelled: pairs of kernels that differ only in how a user wrote the
same computation compile to the same PTX (line info and the kernel's name set aside), so a fast
path reached by one spelling is reached by the other."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tilejit as tj
from tilejit.backends.cuda import build

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from ptx_snapshot import strip_line_info  # noqa: E402


def ptx(kernel, args, consts, warps, target) -> str:
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    text = strip_line_info(build(kernel.tile_ir(specs, consts), warps, target, stop_after="ptx")["ptx"])
    return re.sub(rf"\b{kernel.name}(?=\b|_param)", "KERNEL", text)


@tj.kernel
def gemm_tuned(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=4):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc.to(c.dtype))


@tj.kernel
def gemm_plain(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):                  # Triton's spelling: plain range, +=
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)))
    tj.store(c, (m, n), acc.to(c.dtype))


@tj.kernel
def scores_trans(q, k, s, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    qt = tj.load(q, (tj.program_id(0) * BM, 0), (BM, BD))
    acc = tj.zeros((BM, BN), tj.float32)
    for n0 in tj.range(0, k.shape[0], BN, stages=2):
        acc = tj.maximum(acc, tj.dot(qt, tj.trans(tj.load(k, (n0, 0), (BN, BD)))))
    tj.store(s, (tj.program_id(0) * BM, 0), acc)


@tj.kernel
def scores_dot_t(q, k, s, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    qt = tj.load(q, (tj.program_id(0) * BM, 0), (BM, BD))
    acc = tj.zeros((BM, BN), tj.float32)
    for n0 in tj.range(0, k.shape[0], BN, stages=2):
        acc = tj.maximum(acc, tj.dot(qt, tj.load(k, (n0, 0), (BN, BD)).T))      # k.T
    tj.store(s, (tj.program_id(0) * BM, 0), acc)


@tj.kernel
def scores_permute(q, k, s, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    qt = tj.load(q, (tj.program_id(0) * BM, 0), (BM, BD))
    acc = tj.zeros((BM, BN), tj.float32)
    for n0 in tj.range(0, k.shape[0], BN, stages=2):
        acc = tj.maximum(acc, tj.dot(qt, tj.permute(tj.load(k, (n0, 0), (BN, BD)), (1, 0))))
    tj.store(s, (tj.program_id(0) * BM, 0), acc)


@tj.kernel
def scores_method_permute(q, k, s, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    qt = tj.load(q, (tj.program_id(0) * BM, 0), (BM, BD))
    acc = tj.zeros((BM, BN), tj.float32)
    for n0 in tj.range(0, k.shape[0], BN, stages=2):
        acc = tj.maximum(acc, tj.dot(qt, tj.load(k, (n0, 0), (BN, BD)).permute(1, 0)))     # torch's
    tj.store(s, (tj.program_id(0) * BM, 0), acc)


@tj.kernel
def gemm_batched(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """Batched GEMM as a TileLang/Triton user writes it: 3-D arrays, unit leading tile dims
    dropped with reshape."""
    z, m, n = tj.program_id(2), tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[2], BK):
        x = tj.load(a, (z, m, k), (1, BM, BK)).reshape((BM, BK))
        y = tj.reshape(tj.load(b, (z, k, n), (1, BK, BN)), (BK, BN))
        acc += tj.dot(x, y)
    tj.store(c, (z, m, n), acc.to(c.dtype).reshape((1, BM, BN)))


def bf16(*shape):
    return np.zeros(shape, tj.bfloat16.np)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("tiles,warps", [((128, 256, 64), 8), ((64, 64, 32), 4)])
def test_a_plain_range_gemm_with_acc_plus_equals_is_the_tuned_gemm(tiles, warps, target):
    """On sm_90a the compiler's depth for a wgmma GEMM loop is the tuned example's 4; on sm_80
    (mma.sync, depth 3) the comparison is with the tuned spelling at its own depth."""
    bm, bn, bk = tiles
    args = (bf16(1024, 1024), bf16(1024, 1024), bf16(1024, 1024))
    consts = {"BM": bm, "BN": bn, "BK": bk}
    plain = ptx(gemm_plain, args, consts, warps, target)
    if target == "sm_90a":
        assert plain == ptx(gemm_tuned, args, consts, warps, target)
    assert "wgmma" in plain if target == "sm_90a" else "mma.sync" in plain


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_k_dot_T_and_tj_trans_of_k_compile_alike(target):
    args = (bf16(256, 64), bf16(256, 64), np.zeros((256, 128), np.float32))
    consts = {"BM": 64, "BN": 128, "BD": 64}
    assert ptx(scores_dot_t, args, consts, 4, target) == ptx(scores_trans, args, consts, 4, target)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_tj_permute_and_the_permute_method_compile_like_tj_trans(target):
    args = (bf16(256, 64), bf16(256, 64), np.zeros((256, 128), np.float32))
    consts = {"BM": 64, "BN": 128, "BD": 64}
    want = ptx(scores_trans, args, consts, 4, target)
    assert ptx(scores_permute, args, consts, 4, target) == want
    assert ptx(scores_method_permute, args, consts, 4, target) == want


def test_permute_without_axes_or_with_a_wrong_order_is_a_compile_error():
    @tj.kernel
    def no_axes(x, y):
        tj.store(y, (0, 0), tj.permute(tj.load(x, (0, 0), (8, 8))))

    @tj.kernel
    def repeated(x, y):
        tj.store(y, (0, 0), tj.load(x, (0, 0), (8, 8)).permute(0, 0))
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(tj.CompileError, match="permute: give the new order"):
        no_axes.inspect(x, x)
    with pytest.raises(tj.CompileError, match=r"permute: \(0, 0\) is not a permutation"):
        repeated.inspect(x, x)


@pytest.mark.parametrize("target,instruction", [("sm_90a", "wgmma"), ("sm_80", "mma.sync")])
def test_a_batched_gemm_with_unit_leading_dims_takes_the_tensor_core_path(target, instruction, monkeypatch):
    """3-D loads of (1, BM, BK) reshaped to 2-D reach the same pipelined tensor-core loop as the
    2-D GEMM (cp.async ring and wgmma / mma.sync), and give NumPy's product on emulate."""
    args = (bf16(2, 256, 256), bf16(2, 256, 256), bf16(2, 256, 256))
    consts = {"BM": 128, "BN": 128, "BK": 64}
    text = ptx(gemm_batched, args, consts, 8, target)
    assert instruction in text and "cp.async" in text
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 64, 64)).astype(tj.bfloat16.np) for _ in range(2))
    c = np.zeros((2, 64, 64), tj.bfloat16.np)
    gemm_batched[(2, 2, 2)](a, b, c, BM=32, BN=32, BK=32, num_warps=4)
    want = np.einsum("zmk,zkn->zmn", a.astype(np.float32), b.astype(np.float32))
    tj.testing.assert_close(c, want.astype(tj.bfloat16.np))


@pytest.mark.parametrize("causal", [False, True])
def test_the_benchmarked_plain_attention_matches_numpy(causal, monkeypatch):
    """``benchmarks/bench_spelling.py``'s Triton-style attention (plain ``range``, ``k.T``, causal
    by a ``where``) computes attention on the emulator, so its GPU figures time the right thing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_spelling import attention_plain
    rng = np.random.default_rng(3)
    B, H, S, D = 1, 2, 96, 32
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
    o = np.zeros_like(q)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    attention_plain[(S // 32, B * H)](q, k, v, o, D ** -0.5, BM=32, BN=16, BD=D, CAUSAL=causal)
    s = q @ k.transpose(0, 1, 3, 2) * D ** -0.5
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(-1, keepdims=True)) @ v, atol=2e-5)
