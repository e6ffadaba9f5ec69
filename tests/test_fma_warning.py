"""A ``tj.dot`` of a tensor-core dtype that the compiler leaves on CUDA cores (FMA) says so: a
``PerformanceWarning`` naming the kernel, the dot's line and what to change (FlashAttention-3's
128x176 tile is the common case: the tensor-core layouts take power-of-two tiles).  Built for
sm_90a on the CPU (no GPU needed); the dot plan's dump gives the same reason."""
import os
import warnings

import numpy as np
import pytest

import tilejit as tj
from tilejit.passes.pipeline import compile_to_simt

BF16 = tj.bfloat16.np


@tj.kernel
def tile_product(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    acc = tj.dot(tj.load(a, (m, 0), (BM, BK)), tj.load(b, (0, 0), (BK, BN)))    # the dot's line
    tj.store(c, (m, 0), acc)


DOT_LINE = next(i for i, line in enumerate(open(__file__), 1) if "the dot's line" in line and "tj.dot(" in line)


def _compile(a, b, consts, num_warps=4):
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    kernel = getattr(tile_product, "kernel", tile_product)
    specs, consts, _ = kernel.specialise(kernel.bind((a, b, c), consts))
    kernel._cache.clear()
    return kernel.compile(specs, consts, num_warps, "cuda")


@pytest.mark.parametrize("bk, bn, why", [(64, 48, r"power-of-two tiles \(M=64, N=48, K=64\)"),
                                         (8, 64, r"K=8 is not a multiple of the tensor-core step \(16")])
def test_a_bf16_dot_left_on_fma_warns_with_its_line_and_why(tmp_path, monkeypatch, bk, bn, why):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    a, b = np.zeros((128, bk), BF16), np.zeros((bk, bn), BF16)
    pattern = rf"kernel 'tile_product', line {DOT_LINE} of test_fma_warning.py: this tj.dot runs on CUDA cores \(FMA\).*{why}"
    with pytest.warns(tj.PerformanceWarning, match=pattern):
        entry = _compile(a, b, {"BM": 64, "BN": bn, "BK": bk})
    assert len(entry.artifact.scalar_dots) == 1
    with pytest.warns(tj.PerformanceWarning, match=pattern):        # read back from the disk cache: still said
        again = _compile(a, b, {"BM": 64, "BN": bn, "BK": bk})
    assert again.artifact.scalar_dots[0][0].line == DOT_LINE


def test_tensor_core_dots_and_float32_dots_do_not_warn(tmp_path, monkeypatch):
    """A power-of-two bf16 tile takes tensor cores; a float32 dot without allow_tf32 is FMA by design."""
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tj.PerformanceWarning)
        assert _compile(np.zeros((128, 64), BF16), np.zeros((64, 64), BF16),
                        {"BM": 64, "BN": 64, "BK": 64}).artifact.scalar_dots == ()
        assert _compile(np.zeros((128, 64), np.float32), np.zeros((64, 48), np.float32),
                        {"BM": 64, "BN": 48, "BK": 64}).artifact.scalar_dots == ()


def test_the_dot_plan_dump_gives_the_reason():
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 48), BF16)
    c = np.zeros((128, 48), np.float32)
    kernel = getattr(tile_product, "kernel", tile_product)
    specs, consts, _ = kernel.specialise(kernel.bind((a, b, c), {"BM": 64, "BN": 48, "BK": 64}))
    stages = {}
    compile_to_simt(kernel.tile_ir(specs, consts), 4, "sm_90a", dump=lambda name, text: stages.setdefault(name, text))
    assert f"(line {DOT_LINE}): fma (tensor cores take power-of-two tiles (M=64, N=48, K=64)" in stages["plan_dots"]
