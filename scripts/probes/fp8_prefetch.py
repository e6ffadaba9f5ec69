"""GPU probe: the fp8 blockwise GEMM ((N, K) weights) with its scale loads issued one K tile
ahead by hand (register prefetch), against the example kernel, same run.
    python3 scripts/probes/fp8_prefetch.py [SIZE]"""
import sys

sys.path.insert(0, "benchmarks")
import common  # noqa: E402
import tilejit as tj  # noqa: E402


@tj.kernel
def prefetched(a, a_scale, b, b_scale, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    sa = tj.load(a_scale, (m, 0), (BM, 1))
    sb = tj.load(b_scale, (n // 128, 0), (1, 1))
    for k in range(0, a.shape[1], BK):
        sa_next = tj.load(a_scale, (m, (k + BK) // 128), (BM, 1))
        sb_next = tj.load(b_scale, (n // 128, (k + BK) // 128), (1, 1))
        w = tj.load(b, (n, k), (BN, BK)).T
        acc = tj.dot_scaled(tj.load(a, (m, k), (BM, BK)), sa, w, sb, acc)
        sa, sb = sa_next, sb_next
    tj.store(c, (m, n), acc.to(c.dtype))


@tj.kernel
def rotated(a, a_scale, b, b_scale, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """The product of K tile t issued before tile t-1's is scaled into the accumulator."""
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    p = tj.dot(tj.load(a, (m, 0), (BM, BK)), tj.load(b, (n, 0), (BN, BK)).T)
    for k in range(BK, a.shape[1], BK):
        p_next = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (n, k), (BN, BK)).T)
        j = (k - BK) // 128
        acc = tj.fma(p, tj.load(a_scale, (m, j), (BM, 1)) * tj.load(b_scale, (n // 128, j), (1, 1)), acc)
        p = p_next
    j = (a.shape[1] - 1) // 128
    acc = tj.fma(p, tj.load(a_scale, (m, j), (BM, 1)) * tj.load(b_scale, (n // 128, j), (1, 1)), acc)
    tj.store(c, (m, n), acc.to(c.dtype))


def main():
    torch = common.cuda_torch()
    ex = common.load_example("fp8_blockwise_gemm")
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    (a8, sa, b8, sb), (a, sa_d, b, sb_d) = common.fp8_blockwise_inputs(torch, size)
    c = torch.empty((size, size), device="cuda", dtype=torch.bfloat16)
    ref = torch.from_numpy(ex.reference(a8, sa, b8, sb)).cuda()
    for bm, bn, bk, w in [(128, 128, 128, 8), (64, 128, 128, 4)]:
        grid = (tj.cdiv(size, bm), tj.cdiv(size, bn))
        for name, fn in [("example", lambda: ex.fp8_blockwise_matmul_kernel[grid](a, sa_d, b, sb_d, c, BM=bm, BN=bn,
                                                                                   BK=bk, B_NK=True, num_warps=w)),
                         ("prefetched", lambda: prefetched[grid](a, sa_d, b, sb_d, c, BM=bm, BN=bn, BK=bk, num_warps=w)),
                         ("rotated", lambda: rotated[grid](a, sa_d, b, sb_d, c, BM=bm, BN=bn, BK=bk, num_warps=w)),
                         ("rotated 4 stages", lambda: rotated[grid](a, sa_d, b, sb_d, c, BM=bm, BN=bn, BK=bk,
                                                                    num_warps=w, num_stages=4))]:
            common.checked(torch, fn, c, lambda: ref, 2e-2, name)
            ms = common.time_cuda(fn, reps=20).median_ms
            print(f"{size}³ {bm}x{bn}x{bk}x{w} {name}: {2 * size**3 / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
