"""GPU check of TMA multicast (``passes/multicast.py``): the fp8 blockwise GEMM (its B K-major
boxes shared by paired programs; an odd number of row blocks, so one CTA pads the last pair) and
full attention (K and V shared by paired query blocks) and its backward (dK/dV's pairs share q and
dO, dQ's K and V) with ``MULTICAST`` on, against float64.
Prints each maximum error and whether the kernel was paired.  Run under compute-sanitizer too.

    python3 scripts/probes/multicast_check.py [--off]
"""
import sys

import numpy as np

from tilejit.passes import multicast

multicast.MULTICAST = "--off" not in sys.argv

import tilejit as tj  # noqa: E402
from tilejit.examples import attention as at  # noqa: E402
from tilejit.examples import fp8_blockwise_gemm as f8  # noqa: E402

rng = np.random.default_rng(0)
a, sa = f8.quantize_rows(rng.standard_normal((384, 512)).astype(np.float32))
b, sb = f8.quantize_blocks(rng.standard_normal((512, 384)).astype(np.float32))
out = f8.run_nk(a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T))
ref = f8.reference(a, sa, b, sb)
print("fp8 blockwise 384x384x512: max error", float(np.abs(out.astype(np.float64) - ref).max()),
      "of", float(np.abs(ref).max()))
for s, d in ((320, 64), (1024, 128)):
    q, k, v = (rng.standard_normal((1, 4, s, d)).astype(tj.bfloat16.np) for _ in range(3))
    o = at.run(q, k, v, causal=False, BM=128, BN=128 if d == 128 else 64)
    print(f"attention S{s} D{d}: max error", float(np.abs(o.astype(np.float64) - at.reference(q, k, v)).max()))
from tilejit.examples import attention_backward as ab  # noqa: E402
q, k, v, do = ab.example_inputs(rng, batch=1, heads=4, kv_heads=2, seq=640, dim=128, dtype=tj.bfloat16.np)
o, lse = ab.forward(q, k, v, False, BM=128, BN=128, num_warps=8)
grads = ab.backward(q, k, v, o, lse, do, False, BM=64, BN=128, num_warps=8, dq_config=(128, 64, 8))
want = ab.gradients(q, k, v, do)[1:]
print("attention backward S640 D128 (dq, dk, dv): max errors",
      [round(float(np.abs(g.astype(np.float64) - w).max()), 5) for g, w in zip(grads, want)])
kernel = f8.fp8_blockwise_matmul_kernel
print("paired:", sorted({getattr(e.artifact, "paired_ctas", None) for e in kernel._cache.values()})
      if hasattr(kernel, "_cache") else "?")
