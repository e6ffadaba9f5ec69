"""Where a native re-launch's host time goes on a GPU host: bench_launch's increment kernel on a
torch tensor, timed whole (kernel[grid](...)), as its launch function, as the native launcher's
C call alone, and the torch reads that call makes, each the best of 7 batches of 1000 (launches
synchronised per batch)."""
import os
import sys
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "benchmarks")]

import common  # noqa: E402
from bench_launch import BLOCK, NUM_WARPS, increment_kernel  # noqa: E402
from tilejit.runtime import native  # noqa: E402

torch = common.require_cuda_torch()
x = torch.ones(1, dtype=torch.float32, device="cuda")
print("native:", native.status())
for _ in range(5):
    increment_kernel[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS)
native.status()                                   # the module built (a thread builds it)
for _ in range(3):
    increment_kernel[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS)
launch = increment_kernel[(1,)]                   # the C front, where a native launcher was made
print("kernel[grid] returns:", type(launch).__name__)
python = getattr(launch, "python", launch)
call = getattr(launch, "launcher", None)
kwargs = {"BLOCK": BLOCK}
raw_stream = torch._C._cuda_getCurrentRawStream
cases = [("kernel[grid](...)", "increment_kernel[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS)", True),
         ("kernel[grid]'s result", "launch(x, BLOCK=BLOCK, num_warps=NUM_WARPS)", True),
         ("its Python launch function", "python(x, BLOCK=BLOCK, num_warps=NUM_WARPS)", True),
         ("kernel[grid]", "increment_kernel[(1,)]", False),
         ("x.dtype", "x.dtype", False), ("x.shape", "x.shape", False), ("x.stride()", "x.stride()", False),
         ("x.data_ptr()", "x.data_ptr()", False), ("x.get_device()", "x.get_device()", False),
         ("_cuda_getCurrentRawStream(0)", "raw_stream(0)", False)]
if call is not None:
    cases.insert(2, ("native C call", "call((x,), kwargs, NUM_WARPS, None)", True))


def best_of(stmt: str, sync: bool) -> float:
    times = []
    for _ in range(7):
        if sync:
            torch.cuda.synchronize()
        seconds = timeit.timeit(stmt, globals=globals(), number=1000)
        if sync:
            torch.cuda.synchronize()
        times.append(seconds)
    return min(times) / 1000 * 1e6


for name, stmt, sync in cases:
    print(f"{name:32s} {best_of(stmt, sync):7.3f} µs")
torch.cuda.synchronize()
