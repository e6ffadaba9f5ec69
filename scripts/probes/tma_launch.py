"""Host time of re-launching a TMA GEMM (examples/matmul.py's kernel, its A and B read through
tensor maps) on a one-CTA problem, native against the Python path (a kernel object of its own
with no native launcher): median of 20 batches of 1000 launches, synchronised per batch, the
two taking turns."""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "benchmarks")]

import common  # noqa: E402
import tilejit as tj  # noqa: E402
from tilejit.examples import matmul  # noqa: E402
from tilejit.runtime import native  # noqa: E402

torch = common.require_cuda_torch()
print("native:", native.status())
a = torch.randn(128, 128, device="cuda").bfloat16()
b = torch.randn(128, 128, device="cuda").bfloat16()
c = torch.empty(128, 128, device="cuda")
config = dict(BM=128, BN=128, BK=64, num_warps=8)
native_kernel = matmul.matmul_kernel.kernel
python_kernel = tj.kernel(native_kernel.fn)


def launcher(kernel, enabled):
    def run(count):
        native.ENABLED = enabled
        for _ in range(count):
            kernel[(1, 1)](a, b, c, **config)
        torch.cuda.synchronize()
    return run


runs = {"native": launcher(native_kernel, True), "Python path": launcher(python_kernel, False)}
for run in runs.values():
    run(50)
print("kernel[grid] returns:", type(native_kernel[(1, 1)]).__name__, "/", type(python_kernel[(1, 1)]).__name__)
times = {name: [] for name in runs}
for _ in range(20):
    for name, run in runs.items():
        start = time.perf_counter()
        run(1000)
        times[name].append((time.perf_counter() - start) / 1000 * 1e6)
torch.testing.assert_close(c, a.float() @ b.float(), rtol=2e-2, atol=2e-1)
for name, values in times.items():
    print(f"{name:12s} {statistics.median(values):7.2f} µs a launch (min {min(values):.2f})")
