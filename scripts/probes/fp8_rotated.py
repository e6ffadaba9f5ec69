"""Probe: the fp8 blockwise GEMM (weights (N, K), 128x128x128, 8 warps) with each K block's
product issued one iteration before it is scaled into the accumulator (``p_next = dot(...);
acc = fma(p, scale, acc); p = p_next``: ``wgmma.carried_products`` keeps that group in flight and
unrolls the loop by two), against the example's plain loop, same inputs, alternating.

    python3 scripts/probes/fp8_rotated.py [SIZE ...]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import common  # noqa: E402
import tilejit as tj  # noqa: E402


@tj.kernel
def fp8_rotated(a, a_scale, b, b_scale, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    p = tj.dot(tj.load(a, (m, 0), (BM, BK)), tj.load(b, (n, 0), (BN, BK)).T)
    for k in range(0, a.shape[1], BK):
        # the next block's product (past the end on the last trip: zero-filled, unused)
        p_next = tj.dot(tj.load(a, (m, k + BK), (BM, BK)), tj.load(b, (n, k + BK), (BN, BK)).T)
        sa = tj.load(a_scale, (m, k // 128), (BM, 1))
        sb = tj.load(b_scale, (n // 128, k // 128), (1, 1))
        acc = tj.fma(p, sa * sb, acc)
        p = p_next
    tj.store(c, (m, n), acc.to(c.dtype))


def main(sizes):
    torch = common.cuda_torch()
    ex = common.load_example("fp8_blockwise_gemm")
    for size in sizes:
        rng = np.random.default_rng(size)
        a8, sa = ex.quantize_rows(rng.standard_normal((size, size)).astype(np.float32))
        b8, sb = ex.quantize_blocks(rng.standard_normal((size, size)).astype(np.float32))
        to_dev = lambda x: torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn)  # noqa: E731
        a, b_nk = to_dev(a8), to_dev(np.ascontiguousarray(b8.T))
        sa_d, sb_nk = torch.from_numpy(sa).cuda(), torch.from_numpy(np.ascontiguousarray(sb.T)).cuda()
        exact = torch.from_numpy(ex.reference(a8, sa, b8, sb)).cuda()
        c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
        grid = (size // 128, size // 128)
        kernels = {
            "plain": lambda: ex.fp8_blockwise_matmul_kernel[grid](a, sa_d, b_nk, sb_nk, c, BM=128, BN=128, BK=128,
                                                                 B_NK=True, num_warps=8),
            "rotated": lambda: fp8_rotated[grid](a, sa_d, b_nk, sb_nk, c, BM=128, BN=128, BK=128, num_warps=8)}
        flop = 2 * size ** 3
        for name, launch in kernels.items():
            common.checked(torch, launch, c, lambda: exact, 2e-2, f"fp8 {name} {size}")
        for rnd in range(2):
            for name, launch in kernels.items():
                ms = common.time_cuda(launch, reps=30).median_ms
                print(f"fp8 blockwise {size}³ {name} (round {rnd + 1}): {flop / (ms * 1e-3) / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [4096, 8192])
