"""The compiler picks the warps when a launch gives none (``passes.warps.choose_num_warps``)."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj

from examples.matmul import matmul_kernel
from examples.softmax import softmax_kernel


def picked(kernel, *args, **consts) -> int:
    kernel = getattr(kernel, "kernel", kernel)
    return kernel.inspect(*args, **consts).num_warps


@pytest.mark.parametrize("cols,dtype,warps", [
    (128, np.float32, 1), (256, tj.bfloat16.np, 1), (256, np.float32, 1),   # up to 1 KiB: 1 warp, packed
    (512, tj.bfloat16.np, 1), (512, np.float32, 2), (1024, tj.bfloat16.np, 2), (1024, np.float32, 2), (2048, np.float32, 2),
    (4096, tj.bfloat16.np, 4), (4096, np.float32, 4),         # 64 bytes of 16-bit values per thread, 128 of 32-bit
    (8192, tj.bfloat16.np, 8), (8192, np.float32, 8), (16384, np.float32, 16), (16384, tj.bfloat16.np, 16),
    (65536, np.float32, 32), (65536, tj.bfloat16.np, 16)])
def test_a_row_kernel_gets_about_32_values_of_its_row_per_thread(cols, dtype, warps, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_CLUSTER", "0")          # one CTA per row (sm_80)
    x = np.zeros((2, cols), dtype)
    assert picked(softmax_kernel, x, x, BLOCK=cols) == warps


@pytest.mark.parametrize("kernel,cols,dtype,warps,ctas", [
    ("softmax", 32768, np.float32, 16, 2), ("softmax", 65536, tj.bfloat16.np, 16, 4),
    ("softmax", 131072, np.float32, 16, 8),              # 16384 columns per CTA
    ("layernorm", 16384, tj.bfloat16.np, 16, 1),         # norms are not split over a cluster (measured slower)
    ("layernorm", 65536, np.float32, 32, 1), ("rmsnorm", 16384, tj.bfloat16.np, 16, 1)])
def test_a_row_split_over_a_cluster_gets_the_warps_of_its_part(kernel, cols, dtype, warps, ctas, monkeypatch):
    import examples.layernorm as ln
    import examples.rmsnorm as rms
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
    k, args = {"softmax": (softmax_kernel, (x, x)), "layernorm": (ln.layernorm_kernel, (x, w, w, x, 1e-5)),
               "rmsnorm": (rms.rmsnorm_kernel, (x, w, x, 1e-5))}[kernel]
    k = getattr(k, "kernel", k)
    found = k.inspect(*args, BLOCK=cols)
    assert (found.num_warps, found.cluster_ctas) == (warps, ctas)


@pytest.mark.parametrize("kernel,cols,dtype,warps,split", [
    ("layernorm", 4096, tj.bfloat16.np, 8, False),     # 12288 values loaded: 8 warps, not the bytes' 4
    ("layernorm", 8192, tj.bfloat16.np, 16, False),    # 24576 values: not split (LOADS_BUDGET), 16 warps
    ("layernorm", 8192, np.float32, 16, False),
    ("layernorm", 16384, tj.bfloat16.np, 16, True),    # 49152 values: chunks
    ("rmsnorm", 4096, tj.bfloat16.np, 4, False), ("rmsnorm", 8192, tj.bfloat16.np, 8, False),
    ("rmsnorm", 16384, tj.bfloat16.np, 16, True),      # 32768: past the budget (unsplit it spilled)
])
def test_a_norm_gets_warps_for_all_it_loads_and_is_split_past_the_budget(kernel, cols, dtype, warps, split,
                                                                          monkeypatch):
    import examples.layernorm as ln
    import examples.rmsnorm as rms
    from tilejit.passes.chunk_rows import plan_chunks
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_CLUSTER", "0")
    x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
    k, args = (ln.layernorm_kernel, (x, w, w, x, 1e-5)) if kernel == "layernorm" else (rms.rmsnorm_kernel, (x, w, x, 1e-5))
    assert picked(k, *args, BLOCK=cols) == warps
    specs, consts, _ = k.specialise(k.bind(args, {"BLOCK": cols}))
    assert (plan_chunks(k.tile_ir(specs, consts)) is not None) == split


def test_a_kernel_with_a_dot_keeps_four_warps_and_an_explicit_count_wins(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    a = np.zeros((128, 128), np.float16)
    c = np.zeros((128, 128), np.float32)
    assert picked(matmul_kernel, a, a, c, BM=64, BN=64, BK=32) == 4
    x = np.zeros((2, 8192), np.float32)
    assert picked(softmax_kernel, x, x, BLOCK=8192, num_warps=4) == 4


def test_a_launch_without_num_warps_runs_with_the_choice(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    y = np.zeros_like(x)
    softmax_kernel._cache.clear()
    softmax_kernel[(3,)](x, y, BLOCK=1024)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    [entry] = [e for key, e in softmax_kernel._cache.items() if key[2] is None]
    assert entry.artifact.fn.meta.num_warps == 2
    with pytest.raises(tj.LaunchError, match="num_warps"):
        softmax_kernel[(3,)](x, y, BLOCK=1024, num_warps=3)
    with pytest.raises(tj.LaunchError, match="num_warps"):
        tj.Config(num_warps=None)


def test_a_spilling_kernel_warns_once_and_the_compilers_choice_does_not_spill(tmp_path, monkeypatch):
    """An 8192-column float32 row on one warp is 256 values per thread: it spills, and the
    compile says so (once); without num_warps the compiler picks 16 warps and nothing spills."""
    import warnings
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    kernel = getattr(softmax_kernel, "kernel", softmax_kernel)
    x = np.zeros((2, 8192), np.float32)
    specs, consts, _ = kernel.specialise(kernel.bind((x, x), {"BLOCK": 8192}))
    kernel._cache.clear()
    with pytest.warns(tj.PerformanceWarning, match="spills .* bytes per thread .*num_warps=1"):
        kernel.compile(specs, consts, 1, "cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", tj.PerformanceWarning)
        kernel.compile(specs, consts, 1, "cuda")                 # from the in-process cache: no repeat
        assert kernel.compile(specs, consts, None, "cuda").artifact.spills == 0


@tj.kernel
def softmax_rows(x, y, R: tj.constexpr, BLOCK: tj.constexpr):
    row = tj.program_id(0) * R                            # several rows per program
    t = tj.load(x, (row, 0), (R, BLOCK), other=-tj.inf)
    t = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(y, (row, 0), t / tj.sum(t, axis=1, keepdims=True))


@pytest.mark.parametrize("rows_per_program,warps", [(1, 2), (4, 4)])   # 4 KiB, 16 KiB of float32
def test_several_rows_per_program_get_warps_for_their_tile_and_the_same_result(rows_per_program, warps,
                                                                              monkeypatch):
    """The warp choice follows the tile a program moves, however the rows are spelled."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(1).standard_normal((8, 1000)).astype(np.float32)
    y = np.zeros_like(x)
    assert softmax_rows.inspect(x, y, R=rows_per_program, BLOCK=1024).num_warps == warps
    softmax_rows[(8 // rows_per_program,)](x, y, R=rows_per_program, BLOCK=1024)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
