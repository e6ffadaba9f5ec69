"""Tutorial 6: autotuning. The one idea: let the GPU pick the block sizes. ``tj.autotune`` times
each ``tj.Config`` once per *key* (here: per shape and dtype of the inputs) and then launches the
fastest; the choice is kept on disk for the next process.

    python3 tutorials/06_autotuning.py

- ``tj.Config.space(BM=[32, 64], ...)`` writes the product of the options; ``where=`` drops
  combinations; ``num_warps`` and ``num_stages`` are options too.
- The grid may be a function of the chosen constexprs: ``lambda meta: (tj.cdiv(m, meta["BM"]), ...)``.
- ``kernel.viable_configs(...)`` compiles every config for the GPU without running anything
  (also on a machine without one) and says which cannot run there and why (too much shared
  memory, registers spilled where others do not, a ``tj.static_assert``). Uncached configs are
  compiled in parallel worker processes first.
- On the CPU backends there is nothing to time: the first viable config is used.
"""
import numpy as np

import tilejit as tj

CONFIGS = tj.Config.space(BM=[32, 64, 128], BN=[32, 64], num_warps=[4, 8],
                          where=lambda BM, BN, num_warps: BM * BN >= 64 * 32 * (num_warps // 4))


@tj.autotune(configs=CONFIGS, key=["a", "b"])
@tj.kernel
def matmul_kernel(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m0, n0 = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k0 in range(0, a.shape[1], BK):
        acc = tj.dot(tj.load(a, (m0, k0), (BM, BK)), tj.load(b, (k0, n0), (BK, BN)), acc)
    tj.store(c, (m0, n0), acc.to(c.dtype))


def matmul(a, b):
    c = np.empty((a.shape[0], b.shape[1]), np.float32)
    grid = lambda meta: (tj.cdiv(a.shape[0], meta["BM"]), tj.cdiv(b.shape[1], meta["BN"]))  # noqa: E731
    matmul_kernel[grid](a, b, c, BK=32)
    return c


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((160, 96)).astype(np.float16)
    b = rng.standard_normal((96, 200)).astype(np.float16)
    print(f"{len(CONFIGS)} configs: {', '.join(c.label() for c in CONFIGS[:3])}, ...")
    kept, dropped = matmul_kernel.viable_configs(a, b, np.empty((160, 200), np.float32), BK=32, backend="cuda")
    print(f"{len(kept)} compile for the GPU without spilling; left out: {len(dropped)}")
    c = matmul(a, b)
    tj.testing.assert_close(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-2)
    print(f"chosen: {matmul_kernel.best_config.label()} (timed on the GPU; the first viable one on the CPU)")


if __name__ == "__main__":
    main()
