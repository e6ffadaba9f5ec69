"""Tiled matmul C = A @ B: one program per (BM, BN) block of C, float32 accumulation; ragged
M, N and K work because loads past the edge read zeros and stores past it are dropped.
``tj.autotune`` picks the tile sizes, warps and pipeline depth per shape and dtype on the GPU
(the first config on the CPU backends); ``run(..., BM=, BN=, BK=)`` sets them by hand.  On an
sm_90a GPU the configs with one 64-row warpgroup slice per four warps and BN a multiple of 64
run on Hopper's warpgroup mma (``passes/wgmma.py``), the others on mma.sync."""
import numpy as np

import tilejit as tj

CONFIGS = [tj.Config(BM=64, BN=64, BK=32, STAGES=3, num_warps=4),
           tj.Config(BM=128, BN=256, BK=64, STAGES=4, num_warps=8),    # wgmma on sm_90a
           tj.Config(BM=128, BN=128, BK=64, STAGES=4, num_warps=8),    # wgmma on sm_90a
           tj.Config(BM=64, BN=256, BK=64, STAGES=4, num_warps=4),     # wgmma on sm_90a
           tj.Config(BM=128, BN=128, BK=32, STAGES=3, num_warps=4),
           tj.Config(BM=256, BN=128, BK=64, STAGES=3, num_warps=8),
           tj.Config(BM=128, BN=64, BK=32, STAGES=4, num_warps=4),
           tj.Config(BM=64, BN=128, BK=32, STAGES=4, num_warps=4),
           tj.Config(BM=64, BN=128, BK=64, STAGES=4, num_warps=4),     # wgmma; 128 tiles at 1024x1024
           tj.Config(BM=128, BN=64, BK=64, STAGES=4, num_warps=8),     # wgmma; the same, two warpgroups
           tj.Config(BM=16, BN=64, BK=64, STAGES=4, num_warps=4),     # skinny M (decode GEMV-like)
           # 8-32 rows on sm_90a: computed transposed (passes/swap_small_dots.py), the weights as
           # wgmma's M; 1.00x cuBLAS at M16 and M32, N8192 K8192 (H200, 2026-12-05)
           tj.Config(BM=32, BN=64, BK=128, STAGES=6, num_warps=4),
           # small M, large K: deep rings keep the weights streaming (H200, M128 / M16 N8192 K8192)
           tj.Config(BM=64, BN=128, BK=64, STAGES=7, num_warps=4),
           tj.Config(BM=64, BN=128, BK=128, STAGES=4, num_warps=4),
           # 1024x1024: 6-deep rings (H200, 0.94x cuBLAS against 0.87-0.91 at 4 stages)
           tj.Config(BM=64, BN=128, BK=64, STAGES=6, num_warps=4),
           tj.Config(BM=64, BN=64, BK=64, STAGES=6, num_warps=4)]


@tj.autotune(configs=CONFIGS, key=["a", "b"])
@tj.kernel
def matmul_kernel(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr, STAGES: tj.constexpr = 3):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in tj.range(0, a.shape[1], BK, stages=STAGES):
        acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)
    tj.store(c, (m, n), acc.to(c.dtype))


def run(a, b, out_dtype=np.float32, **config):
    c = np.empty((a.shape[0], b.shape[1]), out_dtype)

    def grid(meta):
        return tj.cdiv(a.shape[0], meta["BM"]), tj.cdiv(b.shape[1], meta["BN"])
    if config:                                           # by hand: the kernel under the tuner
        matmul_kernel.kernel[grid](a, b, c, **config)
    else:
        matmul_kernel[grid](a, b, c)
    return c


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def example_inputs(rng):
    a = rng.standard_normal((257, 300)).astype(np.float16)
    b = rng.standard_normal((300, 129)).astype(np.float16)
    return a, b


if __name__ == "__main__":
    a, b = example_inputs(np.random.default_rng(0))
    out, ref = run(a, b), reference(a, b)
    tj.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    print(f"matmul {a.shape} @ {b.shape} (float16 -> float32): max error {np.abs(out - ref).max():.2e}, "
          f"config {matmul_kernel.best_config}")
