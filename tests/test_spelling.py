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
    assert "wgmma" in plain if target == "sm_90a" and warps == 8 else "mma.sync" in plain


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_k_dot_T_and_tj_trans_of_k_compile_alike(target):
    args = (bf16(256, 64), bf16(256, 64), np.zeros((256, 128), np.float32))
    consts = {"BM": 64, "BN": 128, "BD": 64}
    assert ptx(scores_dot_t, args, consts, 4, target) == ptx(scores_trans, args, consts, 4, target)
