"""GPU: small ragged GEMMs and attention through the TMA paths (plain, warp-specialised), each
checked against NumPy in float64; run under compute-sanitizer by scripts/sanitize_tma.sh."""
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from examples import attention, fp8_matmul, matmul  # noqa: E402

rng = np.random.default_rng(0)
bad = 0
for m, n, k, BM, BN, BK, stages, warps in [(100, 128, 88, 64, 128, 64, 3, 4), (130, 256, 200, 128, 256, 64, 3, 8),
                                           (257, 129, 300, 128, 128, 64, 4, 8)]:
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = matmul.run(a, b, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
    err = np.abs(out - matmul.reference(a, b)).max()
    bad += err > 1e-2
    print(f"gemm {m}x{n}x{k} {BM}x{BN}x{BK}x{stages}x{warps} WS={os.environ.get('TILEJIT_WS', 'auto')}: max err {err:.2e}")
for m, n, k in [(200, 136, 256), (100, 64, 96)]:
    a8, sa = fp8_matmul.quantize(rng.standard_normal((m, k)).astype(np.float32))
    w8, sw = fp8_matmul.quantize(rng.standard_normal((n, k)).astype(np.float32))
    out = fp8_matmul.run_linear(a8, w8, sa, sw, BM=64, BN=64, BK=64, num_warps=4).astype(np.float64)
    ref = (a8.astype(np.float64) @ w8.astype(np.float64).T) * float(sa) * float(sw)
    err = np.abs(out - ref).max() / np.abs(ref).max()
    bad += err > 2**-7
    print(f"fp8 linear {m}x{n}x{k}: max rel err {err:.2e}")
for causal in (False, True):
    q, k, v = (rng.standard_normal((1, 2, 200, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = attention.run(q, k, v, causal=causal, BM=128, BN=128)
    err = np.abs(o.astype(np.float64) - attention.reference(q, k, v, causal)).max()
    bad += err > 3e-2
    print(f"attention causal={causal}: max err {err:.2e}")
sys.exit(1 if bad else 0)
