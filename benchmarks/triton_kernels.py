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


# ------------------------------------------------------------ the row kernels of Triton's tutorials
@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    """Triton's fused-softmax tutorial kernel (one row per program, the row in one block), with
    the math in float32 as the tutorial's inputs are."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=inside)


def softmax(x, y):
    """The tutorial's launch: BLOCK = next power of two of the row, warps 4/8/16 by BLOCK."""
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    warps = 16 if block >= 4096 else 8 if block >= 2048 else 4
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK=block, num_warps=warps)


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    """Triton's layer-norm tutorial forward (``_layer_norm_fwd_fused``) without its Mean/Rstd
    outputs: three passes over the row in BLOCK chunks (mean, variance, normalise)."""
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < n_cols, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.).to(tl.float32)
        x = tl.where(cols < n_cols, x - mean, 0.)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        inside = cols < n_cols
        w = tl.load(w_ptr + cols, mask=inside)
        b = tl.load(b_ptr + cols, mask=inside)
        x = tl.load(x_ptr + cols, mask=inside, other=0.).to(tl.float32)
        tl.store(y_ptr + cols, (x - mean) * rstd * w + b, mask=inside)


def _norm_launch(x):
    """The layer-norm tutorial's launch: (rows, columns, BLOCK = min(64 KB of elements, next
    power of two of the row), warps = BLOCK / 256 clamped to 1..8)."""
    n_rows, n_cols = x.shape
    block = min(65536 // x.element_size(), triton.next_power_of_2(n_cols))
    return n_rows, n_cols, block, min(max(block // 256, 1), 8)


def layernorm(x, w, b, y, eps):
    n_rows, n_cols, block, warps = _norm_launch(x)
    layernorm_kernel[(n_rows,)](x, y, w, b, x.stride(0), n_cols, eps, BLOCK=block, num_warps=warps)


@triton.jit
def rmsnorm_kernel(x_ptr, y_ptr, w_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    """RMSNorm in the layer-norm tutorial's style: a pass for the mean square, one to write."""
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=0.).to(tl.float32)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        inside = cols < n_cols
        w = tl.load(w_ptr + cols, mask=inside)
        x = tl.load(x_ptr + cols, mask=inside, other=0.).to(tl.float32)
        tl.store(y_ptr + cols, x * rstd * w, mask=inside)


def rmsnorm(x, w, y, eps):
    n_rows, n_cols, block, warps = _norm_launch(x)
    rmsnorm_kernel[(n_rows,)](x, y, w, x.stride(0), n_cols, eps, BLOCK=block, num_warps=warps)
