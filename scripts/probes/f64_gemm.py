"""float64 GEMM on the H200: tilejit's tj.dot on DMMA (tests/test_float64.py's f64_matmul, a
plain-range loop) for a few tile configs against torch.matmul (cuBLAS DGEMM), same inputs, same
run, CUDA events (benchmarks/common.time_cuda: outputs poisoned, L2 flushed, medians); prints
TFLOP/s, the ratio to cuBLAS and the error against cuBLAS."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# tests first: both folders have a conftest, and test_float64 needs the tests one
sys.path[:0] = [os.path.join(HERE, "..", "..", "tests"), os.path.join(HERE, "..", "..", "benchmarks")]

import common  # noqa: E402
import tilejit as tj  # noqa: E402
from test_float64 import f64_matmul  # noqa: E402

torch = common.require_cuda_torch()
size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
a = common.random_tensor(torch, (size, size), torch.float64, 1)
b = common.random_tensor(torch, (size, size), torch.float64, 2)
c = torch.empty((size, size), dtype=torch.float64, device="cuda")
flops = 2 * size ** 3
ref = torch.matmul(a, b)
t_ref = common.time_cuda(lambda: torch.matmul(a, b), reps=10).median_ms
print(f"cuBLAS DGEMM {size}^3: {flops / t_ref / 1e9:.1f} TFLOP/s")
for BM, BN, BK, warps in [(64, 64, 16, 4), (128, 64, 16, 8), (64, 128, 16, 8), (128, 128, 16, 8), (64, 64, 32, 4)]:
    def launch():
        f64_matmul[(tj.cdiv(size, BM), tj.cdiv(size, BN))](a, b, c, BM=BM, BN=BN, BK=BK, num_warps=warps)
    try:
        t = common.time_cuda(launch, setup=lambda: c.fill_(float("nan")), reps=10).median_ms
        err = float((c - ref).abs().max() / ref.abs().max())
        print(f"tilejit {BM}x{BN}x{BK} w{warps}: {flops / t / 1e9:.1f} TFLOP/s, {t_ref / t:.2f}x cuBLAS, "
              f"rel err {err:.1e}", flush=True)
    except Exception as e:
        print(f"tilejit {BM}x{BN}x{BK} w{warps}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
