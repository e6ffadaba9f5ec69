"""Triton twins of the benchmark kernels, kept apart so that importing the benchmarks never needs
Triton (``bench_launch`` imports this module only when it times Triton)."""
import triton
import triton.language as tl


@triton.jit
def increment_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """x[i] += 1 for the i < n of this program's BLOCK: the same work as bench_launch's tilejit
    kernel, with the same parameters (a pointer and a length)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=inside) + 1.0, mask=inside)
