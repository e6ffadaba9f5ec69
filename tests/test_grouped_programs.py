"""Grouped program order for tensor-core kernels (``passes/lower.py``, ``GROUP_PROGRAMS``):
CTAs launched one after another walk ``GROUP_PROGRAMS`` blocks along grid axis 0 before
stepping along axis 1, so a GEMM's concurrent CTAs share A row blocks and B column blocks in
L2.  The order is a permutation of the grid: a GEMM over grids that are not multiples of the
group gives NumPy's result on emulate with its output poisoned (a program run twice or never
would leave NaN or a wrong block), and the SIMT prologue holds the grouped arithmetic only for
kernels with tensor-core DOTs and only while the switch is on."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit.passes import lower
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp

from examples import matmul, softmax


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    for k in (matmul.matmul_kernel.kernel, softmax.softmax_kernel):
        k._cache.clear()
        k._fast.clear()
    yield monkeypatch
    for k in (matmul.matmul_kernel.kernel, softmax.softmax_kernel):
        k._cache.clear()
        k._fast.clear()


def simt_of(kernel, *args, num_warps=4, **consts):
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return compile_to_simt(kernel.tile_ir(specs, consts), num_warps, cluster=False)


def grouped(fn) -> bool:
    """Whether the program ids come from the grouped arithmetic (a MINIMUM of the grid's rows)."""
    return any(o.op is SimtOp.ELEMENTWISE and o.attrs.op is tj.ir.TileOp.MINIMUM for o in fn.body.ops) \
        and any(o.op is SimtOp.GRID_DIM and o.attrs.axis == 1 for o in fn.body.ops)


@pytest.mark.parametrize("group", [8, 3, 1])
@pytest.mark.parametrize("m, n", [(16 * 11, 16 * 3), (16 * 5 + 7, 16 * 9 + 1), (16 * 17, 16)])
def test_a_gemm_over_any_grid_writes_every_block_once(fresh, group, m, n):
    fresh.setattr(lower, "GROUP_PROGRAMS", group)
    rng = np.random.default_rng(m * n + group)
    a = rng.standard_normal((m, 40)).astype(np.float16)
    b = rng.standard_normal((40, n)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float32)
    grid = (tj.cdiv(m, 16), tj.cdiv(n, 16))
    matmul.matmul_kernel.kernel[grid](a, b, c, BM=16, BN=16, BK=16, num_warps=1)
    np.testing.assert_allclose(c, matmul.reference(a, b), rtol=1e-3, atol=1e-3)


def test_only_tensor_core_kernels_with_the_switch_on_are_grouped(fresh):
    a = np.zeros((256, 64), np.float16)
    b = np.zeros((64, 256), np.float16)
    c = np.zeros((256, 256), np.float32)
    fn = simt_of(matmul.matmul_kernel.kernel, a, b, c, BM=64, BN=64, BK=32)
    assert grouped(fn)
    fresh.setattr(lower, "GROUP_PROGRAMS", 1)
    assert not grouped(simt_of(matmul.matmul_kernel.kernel, a, b, c, BM=64, BN=64, BK=32))
    fresh.setattr(lower, "GROUP_PROGRAMS", 8)
    x = np.zeros((4, 256), np.float32)
    assert not grouped(simt_of(softmax.softmax_kernel, x, x, BLOCK=256))


@tj.kernel
def gemm_plain(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """A Triton user's spelling: a plain ``range`` loop, ``acc +=``, B's columns along axis 0."""
    n = tj.program_id(0) * BN
    m = tj.program_id(1) * BM
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)))
    tj.store(c, (m, n), acc)


def test_a_plain_range_gemm_with_its_axes_swapped_is_grouped_and_exact(fresh):
    gemm_plain._cache.clear()
    gemm_plain._fast.clear()
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16 * 7 + 3, 48)).astype(np.float16)
    b = rng.standard_normal((48, 16 * 10)).astype(np.float16)
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    assert grouped(simt_of(gemm_plain, a, b, c, num_warps=1, BM=16, BN=16, BK=16))
    gemm_plain[(tj.cdiv(b.shape[1], 16), tj.cdiv(a.shape[0], 16))](a, b, c, BM=16, BN=16, BK=16, num_warps=1)
    np.testing.assert_allclose(c, matmul.reference(a, b), rtol=1e-3, atol=1e-3)
