"""GPU probe: a small-M GEMM (M rows of activations times K x N weights, bf16) spelled as the
transposed product C^T = B^T A^T, so that the weights' columns are wgmma's M and the M rows its
N (n16 / n32: no zero rows in shared memory), against the example matmul and cuBLAS, same run.
    python3 scripts/probes/small_m.py [M ...]     (N = K = 8192; TILEJIT_WS=1 for a producer warpgroup)
The transposed-A path is switched on here (``passes.wgmma.TRANSPOSED_A``); use a fresh
TILEJIT_CACHE_DIR (the cache key does not see module switches)."""
import sys

sys.path.insert(0, "benchmarks")
import common  # noqa: E402
import tilejit as tj  # noqa: E402
from tilejit.passes import wgmma  # noqa: E402

wgmma.TRANSPOSED_A = True


@tj.kernel
def transposed(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    acc = tj.zeros((BN, BM), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc = tj.dot(tj.trans(tj.load(b, (k, n), (BK, BN))), tj.trans(tj.load(a, (m, k), (BM, BK))), acc)
    tj.store(c, (m, n), tj.trans(acc).to(c.dtype))


def main():
    torch = common.cuda_torch()
    mm = common.load_example("matmul").matmul_kernel.kernel
    n = k = 8192
    for m in [int(x) for x in sys.argv[1:]] or [16]:
        a = common.random_tensor(torch, (m, k), torch.bfloat16, seed=1)
        b = common.random_tensor(torch, (k, n), torch.bfloat16, seed=2)
        c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        ref = (a.float() @ b.float())
        cublas = common.time_cuda(lambda: torch.matmul(a, b, out=c), reps=30).median_ms
        runs = [("example 64x128x128x4", lambda: mm[(tj.cdiv(m, 64), tj.cdiv(n, 128))](a, b, c, BM=64, BN=128, BK=128,
                                                                                        STAGES=4, num_warps=4))]
        for bm, bn, bk, w, s in [(16, 64, 128, 4, 6), (16, 64, 64, 4, 8), (16, 128, 128, 8, 5), (16, 64, 256, 4, 4),
                                 (32, 64, 128, 4, 6), (32, 128, 128, 8, 5)]:
            if bm >= m:
                runs.append((f"transposed {bm}x{bn}x{bk}x{w} s{s}", lambda bm=bm, bn=bn, bk=bk, w=w, s=s: transposed[
                    (tj.cdiv(m, bm), tj.cdiv(n, bn))](a, b, c, BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s)))
        for name, fn in runs:
            try:
                common.checked(torch, fn, c, lambda: ref, 2e-2, name)
                ms = common.time_cuda(fn, reps=30).median_ms
            except Exception as e:                  # a config that does not compile or fit
                print(f"M{m} {name}: {type(e).__name__}: {str(e)[:200]}")
                continue
            print(f"M{m} N{n} K{k} {name}: {2 * m * n * k / ms / 1e9:.1f} TFLOP/s, {ms * 1e3:.1f} us, "
                  f"B at {k * n * 2 / ms / 1e6:.0f} GB/s -> {cublas / ms:.3f}x cuBLAS ({cublas * 1e3:.1f} us)")


if __name__ == "__main__":
    main()
