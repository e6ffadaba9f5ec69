"""Small launches of row kernels split over a thread-block cluster (``passes.cluster_rows``), for
compute-sanitizer: softmax, layernorm and RMSNorm, float32 and bfloat16, checked against NumPy."""
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import tilejit as tj  # noqa: E402
from examples import layernorm, rmsnorm, softmax  # noqa: E402

rng = np.random.default_rng(0)
for dtype in (np.float32, tj.bfloat16.np):
    for cols in (9000, 65536):
        x = rng.standard_normal((5, cols)).astype(dtype)
        w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
        tol = 2e-2 if dtype != np.float32 else 1e-4
        for name, got, want in (("softmax", softmax.run(x), softmax.reference(x)),
                                ("layernorm", layernorm.run(x, w, b), layernorm.reference(x, w, b)),
                                ("rmsnorm", rmsnorm.run(x, w), rmsnorm.reference(x, w))):
            tj.testing.assert_close(got, want, rtol=tol, atol=tol)
            print(f"{name} {np.dtype(dtype).name} {cols}: max err {np.abs(got.astype(np.float64) - want).max():.2e}")
