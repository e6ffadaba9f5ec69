"""Where a tilejit launch's host time goes, per driver binding: cProfile of 5,000 launches of
bench_launch's increment kernel through ``ctypes`` and through ``cuda-python`` (interleaved
twice, so neither binding always runs first), the top functions by own time, and the wall time
of the ctypes calls alone (cuCtxGetCurrent, cuLaunchKernel) against cuda-python's."""
import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "benchmarks")]

import common  # noqa: E402
from bench_launch import BLOCK, NUM_WARPS, increment_kernel  # noqa: E402
from tilejit.runtime import launch  # noqa: E402

torch = common.require_cuda_torch()
x = torch.ones(1, dtype=torch.float32, device="cuda")
N = 5000


def run(count):
    for _ in range(count):
        increment_kernel[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS)
    torch.cuda.synchronize()


for binding in ("ctypes", "cuda-python", "ctypes", "cuda-python"):
    launch.use_binding(binding)
    run(200)
    start = time.perf_counter()
    run(N)
    print(f"{binding}: {(time.perf_counter() - start) / N * 1e6:.2f} µs/launch (wall)")
for binding in ("ctypes", "cuda-python"):
    launch.use_binding(binding)
    profile = cProfile.Profile()
    profile.enable()
    run(N)
    profile.disable()
    print(f"== cProfile, {binding}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)

lib = launch.LibcudaLaunch.open()
import ctypes  # noqa: E402
current = ctypes.c_void_p()
ref = ctypes.byref(current)
start = time.perf_counter()
for _ in range(N):
    lib.get_current(ref)
print(f"ctypes cuCtxGetCurrent: {(time.perf_counter() - start) / N * 1e6:.2f} µs")
from cuda.bindings import driver as cu  # noqa: E402
start = time.perf_counter()
for _ in range(N):
    cu.cuCtxGetCurrent()
print(f"cuda-python cuCtxGetCurrent: {(time.perf_counter() - start) / N * 1e6:.2f} µs")
