"""The in-kernel language surface (``import tilejit as tj``): markers the frontend recognises.

Each in-kernel operation here is a *builtin*: a Python function tagged with
``__tilejit_builtin__ = name``.  Called from ordinary Python it raises a clear error; inside a
kernel the frontend never calls it but dispatches by name to ``tilejit.frontend.semantics``.  Host
helpers (``cdiv``, ``next_power_of_2``) are plain functions, folded when their arguments are
compile-time values.
"""
from __future__ import annotations

import functools as _functools
import math as _math

from tilejit.dtypes import (bfloat16, bool_, float8e4m3, float8e5m2, float16, float32, float64, int8,  # noqa: F401
                            int16, int32, int64, uint8, uint16, uint32, uint64, int4, uint4, float4e2m1)
from tilejit.errors import outside_kernel

inf = _math.inf
nan = _math.nan
pi = _math.pi


class constexpr:
    """Annotation for compile-time parameters: ``BLOCK: tj.constexpr``.
    Example: ``def k(x, y, BLOCK: tj.constexpr): ...``."""


def builtin(fn):
    """Mark ``fn`` as an in-kernel operation named ``fn.__name__``."""
    @_functools.wraps(fn)
    def marker(*args, **kwargs):
        outside_kernel(f"tj.{fn.__name__}()")
    marker.__tilejit_builtin__ = fn.__name__
    return marker


# --- program ----------------------------------------------------------------------------------
@builtin
def program_id(axis):
    """The index (int32 scalar) of this program along grid ``axis`` (0, 1 or 2): ``kernel[(g0, g1)](...)``
    runs programs ``(0..g0-1, 0..g1-1)``.
    Example: ``row = tj.program_id(0)`` in a kernel launched as ``k[(rows,)](...)``."""
@builtin
def num_programs(axis):
    """The number of programs (int32 scalar) along grid ``axis`` (the launch grid's size there).
    Example: ``last = tj.program_id(0) == tj.num_programs(0) - 1``."""


# --- creation ---------------------------------------------------------------------------------
@builtin
def arange(start, end):
    """The int32 tile ``[start, start + 1, ..., end - 1]`` (``tj.arange(0, BLOCK)``); ``start`` and ``end``
    are compile-time ints and the length ``end - start`` a positive int.
    Example: ``cols = start + tj.arange(0, BLOCK)``."""
@builtin
def zeros(shape, dtype=float32):
    """A tile of ``shape`` (compile-time ints) filled with 0 of ``dtype`` (default float32).
    Example: ``acc = tj.zeros((BM, BN), tj.float32)``."""
@builtin
def full(shape, value, dtype=None):
    """A tile of ``shape`` filled with ``value`` (a number or a scalar): ``dtype`` default is the value's
    (int32 for ints, float32 for floats).
    Example: ``tj.full((BLOCK,), -tj.inf, tj.float32)``."""


# --- memory -----------------------------------------------------------------------------------
@builtin
def load(x, offsets, shape, other=0, mask=None):
    """The ``shape`` tile of array ``x`` starting at element ``offsets`` (one per dim, in elements, not
    blocks: ``tj.load(x, (row, 0), (1, BLOCK))``).  Elements past the array's edge, or where the
    boolean ``mask`` (broadcast to ``shape``) is False, read ``other`` (default 0).  An offset may
    also be a 1-D integer tile of length ``shape[d]``: row i of dim d comes from that index (a
    gather; indices outside the array read ``other``).
    Example: ``t = tj.load(x, (row, 0), (1, BLOCK), other=-tj.inf)``."""
@builtin
def store(x, offsets, tile, mask=None):
    """Write ``tile`` into array ``x`` at element ``offsets`` (as ``load``'s).  Elements past the edge, or
    where ``mask`` is False, are not written; an integer-tile offset scatters (one writer of
    duplicate indices wins, as on the GPU).  Values are cast to the array's dtype.
    Example: ``tj.store(out, (row, 0), tj.exp(x))`` writes a (1, BLOCK) tile at row ``row``."""


# --- atomics: each element of ``tile`` is combined into ``x`` at the block starting at
# ``offsets`` as one atomic read-modify-write; the old values come back as a tile.  Elements
# outside ``x`` or where ``mask`` is false are left alone (their old value reads 0).  ``sem``:
# "relaxed" (default), "acquire", "release", "acq_rel"; ``scope``: "gpu" (default), "cta", "sys".
@builtin
def atomic_add(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] += tile`` atomically, returning the old values (int32/uint32/int64/uint64 and
    float32).  Programs that add into one element add in some order: float sums may differ in
    the last bits from run to run.  Every atomic's ``sem`` orders the whole program's memory
    accesses, not only its own elements': with "release" or "acq_rel" every store the program
    made before it is visible to whoever acquires what it wrote; with "acquire" or "acq_rel"
    every load after it sees what was released before.  So a program can publish a block with
    plain stores and one counter (a split-K's last program sums the others' blocks).
    Example: ``tj.atomic_add(hist, (bins,), tj.full((BLOCK,), 1, tj.int32))`` (a histogram);
    ``done = tj.atomic_add(count, (t,), tj.full((1,), 1, tj.int32), sem="acq_rel")``."""
@builtin
def atomic_max(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] = max(x[block], tile)`` atomically (integers), returning the old values.
    Example: ``tj.atomic_max(best, (0,), tj.max(t, axis=0, keepdims=True))``."""
@builtin
def atomic_min(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] = min(x[block], tile)`` atomically (integers), returning the old values.
    Example: ``tj.atomic_min(lowest, (0,), tj.min(t, axis=0, keepdims=True))``."""
@builtin
def atomic_and(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] &= tile`` atomically (integers), returning the old values.
    Example: ``old = tj.atomic_and(flags, (i,), bits)``."""
@builtin
def atomic_or(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] |= tile`` atomically (integers), returning the old values.
    Example: ``tj.atomic_or(seen, (ids,), tj.full((B,), 1, tj.int32))``."""
@builtin
def atomic_xor(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] ^= tile`` atomically (integers), returning the old values.
    Example: ``tj.atomic_xor(parity, (0,), bits)``."""
@builtin
def atomic_cas(x, offsets, cmp, tile, mask=None, sem="relaxed", scope="gpu"):
    """Where ``x[block]`` equals ``cmp``, write ``tile``, atomically per element (32/64-bit
    integers); returns the old values (equal to ``cmp`` exactly where the write happened).
    Example: ``old = tj.atomic_cas(lock, (0,), 0, 1)   # take the lock if it was free``."""
@builtin
def atomic_xchg(x, offsets, tile, mask=None, sem="relaxed", scope="gpu"):
    """``x[block] = tile`` atomically (32/64-bit integers and float32), returning the old values.
    Example: ``previous = tj.atomic_xchg(slots, (i,), values)``."""


# --- elementwise ------------------------------------------------------------------------------
@builtin
def exp(x):
    """``e**x`` elementwise (float32 math for float16/bfloat16/integers; within 1 ulp in float32;
    float64 by a series after an exact range reduction, within 1.5 ulp).  A softmax's float32
    ``exp(s - m)`` with ``m`` a maximum of ``s`` (also ``exp((s - m) * scale)`` for a scale known
    positive: a constant, or a float argument, which launches specialise on its sign) costs one
    FMA and one ``ex2.approx`` an element (error below 2e-6 absolute: the argument is <= 0);
    any other argument takes the accurate sequence (~20 instructions).  Where an argument is known
    <= 0 without a maximum in sight (a backward pass's ``s - lse``), ``tj.exp2(s * 1.4426950408889634
    - lse * 1.4426950408889634)`` is the one-FMA form.
    Example: ``p = tj.exp(s - tj.max(s, axis=1, keepdims=True))``."""
@builtin
def exp2(x):
    """``2**x`` elementwise (float32 math for narrower floats and integers).
    Example: ``tj.exp2(x * 1.4426950408889634)   # e**x``."""
@builtin
def log(x):
    """The natural logarithm elementwise (float32 math for narrower floats and integers; float64 by
    fdlibm's form of the mantissa's atanh series, within an ulp).
    Example: ``logp = s - m - tj.log(l)``."""
@builtin
def log2(x):
    """The base-2 logarithm elementwise (float32 math for narrower floats and integers).
    Example: ``tj.log2(x)``."""
@builtin
def sqrt(x):
    """The correctly rounded square root elementwise.
    Example: ``norm = tj.sqrt(tj.sum(t * t, axis=1))``."""
@builtin
def rsqrt(x):
    """``1 / sqrt(x)`` elementwise, by the GPU's approximate ``rsqrt`` (about 2 ulp in float32;
    float64 as ``1.0 / sqrt(x)``, two IEEE roundings).
    Example: ``t * tj.rsqrt(tj.sum(t * t, axis=1, keepdims=True) / n + eps)``."""
@builtin
def sin(x):
    """The sine elementwise (within 1 ulp over the whole float32 range; ``fast_math=True`` launches
    take the approximate instruction).  float64 stays float64: on the GPU within an ulp over the
    whole range (an exact reduction by pi/2 with 1,280 bits of 2/pi, fdlibm's kernels); the CPU
    backends use NumPy's.
    Example: ``s = tj.sin(angle)``."""
@builtin
def cos(x):
    """The cosine elementwise (as ``sin``).
    Example: ``c = tj.cos(angle)``."""
@builtin
def tanh(x):
    """The hyperbolic tangent elementwise (within 1 ulp in float32).
    Example: ``tj.tanh(x)``."""
@builtin
def sigmoid(x):
    """``1 / (1 + exp(-x))`` elementwise.
    Example: ``silu = x * tj.sigmoid(x)``."""
@builtin
def erf(x):
    """The error function 2/sqrt(pi) * integral of exp(-t**2) from 0 to x, elementwise on floats
    (``math.erf`` in a kernel means the same); within an ulp of float32 on the GPU; float64 from
    its Taylor series below 1.5 and 1 - erfc above (2 ulp).
    Example: ``gelu = 0.5 * x * (1.0 + tj.erf(x * 0.7071067811865476))``."""
@builtin
def erfc(x):
    """``1 - erf(x)`` elementwise without the cancellation where erf is near 1 (``math.erfc`` in a
    kernel means the same): float32 and narrower results within 2.3 ulp of float32 down to its
    subnormals (a Chebyshev fit evaluated in float64); float64 within 3 ulp, also down to its
    subnormals (Taylor pieces of exp(x²) erfc(x) below 4, the continued fraction above).
    Example: ``tail = 0.5 * tj.erfc(z * 0.7071067811865476)``."""
@builtin
def log1p(x):
    """``log(1 + x)`` elementwise, accurate for tiny ``x`` (Kahan's form from ``log``; float32 math;
    ``math.log1p`` in a kernel means the same).
    Example: ``tj.log1p(tj.exp(-tj.abs(x)))   # part of a stable softplus``."""
@builtin
def expm1(x):
    """``exp(x) - 1`` elementwise, accurate for tiny ``x`` (Kahan's form from ``exp`` and ``log``).
    Example: ``tj.expm1(x)``."""
@builtin
def sinh(x):
    """The hyperbolic sine elementwise (from ``expm1`` below |x| = 1, ``exp(|x| / 2)`` above).
    Example: ``tj.sinh(x)``."""
@builtin
def cosh(x):
    """The hyperbolic cosine elementwise (from ``exp(|x| / 2)``: finite wherever float32's is).
    Example: ``tj.cosh(x)``."""
@builtin
def atan(x):
    """The arc tangent elementwise, in radians (Cephes' reduction and polynomial in float32;
    float64 by fdlibm's, within an ulp).
    Example: ``tj.atan(y / x)``."""
@builtin
def atan2(y, x):
    """The angle of the point ``(x, y)``, in ``[-pi, pi]``, elementwise with NumPy broadcasting
    (``np.arctan2``'s results for infinities; the signs of zeros are not told apart).
    Example: ``angle = tj.atan2(y, x)``."""
@builtin
def asin(x):
    """The arc sine elementwise (``atan2(x, sqrt((1 - x) * (1 + x)))``); NaN outside [-1, 1].
    Example: ``tj.asin(tj.clamp(s, -1.0, 1.0))``."""
@builtin
def acos(x):
    """The arc cosine elementwise (``atan2(sqrt((1 - x) * (1 + x)), x)``); NaN outside [-1, 1].
    Example: ``theta = tj.acos(tj.clamp(c, -1.0, 1.0))``."""
@builtin
def pow(x, y):
    """``x ** y`` elementwise with NumPy broadcasting and promotion (as the operator).
    Example: ``tj.pow(x, 2.5)``."""
@builtin
def floor(x):
    """The largest integer not above ``x``, elementwise, in ``x``'s float dtype (integers unchanged).
    Example: ``tj.floor(x * 4.0) / 4.0``."""
@builtin
def ceil(x):
    """The smallest integer not below ``x``, elementwise (as ``floor``).
    Example: ``tj.ceil(x * 4.0) / 4.0``."""
@builtin
def trunc(x):
    """``x`` rounded toward zero, elementwise (as ``floor``).
    Example: ``tj.trunc(x)``."""
@builtin
def round(x):
    """``x`` rounded to the nearest integer, ties to even (``np.round``), elementwise.
    Example: ``tj.round(x * 2.0) / 2.0``."""
@builtin
def isnan(x):
    """A bool tile: where ``x`` is NaN (False for integers).
    Example: ``tj.where(tj.isnan(t), 0.0, t)``."""
@builtin
def isinf(x):
    """A bool tile: where ``x`` is +inf or -inf (False for integers).
    Example: ``tj.sum(tj.isinf(t).to(tj.int32), axis=0)``."""
@builtin
def isfinite(x):
    """A bool tile: where ``x`` is neither NaN nor infinite (True for integers).
    Example: ``tj.where(tj.isfinite(t), t, 0.0)``."""
@builtin
def abs(x):
    """The absolute value elementwise (``np.abs``; the most negative integer stays itself).
    Example: ``d = tj.abs(t - u)``."""
@builtin
def maximum(x, y):
    """The elementwise maximum with NumPy broadcasting and promotion; a NaN operand gives NaN.
    Example: ``relu = tj.maximum(t, 0.0)``."""
@builtin
def minimum(x, y):
    """The elementwise minimum (as ``maximum``).
    Example: ``tj.minimum(t, 6.0)``."""
@builtin
def where(cond, x, y):
    """``x`` where the bool tile ``cond`` holds, else ``y``, elementwise with NumPy broadcasting and
    promotion (``np.where``).
    Example: ``tj.where(x > 0, x, 0.0)`` (a ReLU)."""
@builtin
def unpack(t, dtype):
    """The 4-bit values packed two per byte in the uint8 tile ``t`` (low nibble first), with the
    last dimension doubled: ``tj.int4`` -> int8, ``tj.uint4`` -> uint8, ``tj.float4e2m1`` ->
    float32 (the e2m1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives).  On the GPU,
    ``tj.unpack(t, tj.uint4 or tj.int4).to(tj.bfloat16 or tj.float16)`` converts each byte's two
    values together: one byte permute, one logic op and one paired subtraction per byte; a
    constant ``c`` added right after (``q.to(tj.bfloat16) + c``) joins that subtraction when
    ``128 - c`` (float16: ``1024 - c``; int4: ``136 - c`` / ``1032 - c``) is a value of the type,
    the same bits at no cost (``+ 128`` leaves no subtraction at all).  Such values used as the B
    of a ``tj.dot`` on mma.sync (32 or more columns a warp) are read from the packed bytes straight
    into the tensor cores' fragments, two rows of a column per logic op.
    Example: ``q = tj.unpack(tj.load(w, (k, n // 2), (BK, BN // 2)), tj.uint4)`` gives (BK, BN) values 0..15."""
@builtin
def pack(t, dtype):
    """The inverse of ``unpack``: an (…, 2n) tile of int4 / uint4 values (integers, taken modulo
    16) or float4e2m1 values (floats, rounded to the nearest e2m1 value, ties to even, saturating
    at ±6) as an (…, n) uint8 tile, two per byte, low nibble first.
    Example: ``packed = tj.pack(q, tj.uint4)   # (..., 2n) values -> (..., n) uint8``."""
@builtin
def clamp(x, lo, hi):
    """``x`` limited to ``[lo, hi]`` elementwise, as ``np.clip`` (NaN stays NaN); ``lo`` and ``hi``
    broadcast like any operand.
    Example: ``tj.clamp(x, -1.0, 1.0)``."""
@builtin
def fma(x, y, z):
    """``x * y + z`` elementwise with one rounding (a fused multiply-add; floats).
    Example: ``tj.fma(a, b, c)   # a * b + c, rounded once``."""
@builtin
def cast(x, dtype, bitcast=False):
    """``x`` converted to ``dtype`` (also ``x.to(dtype)``): floats to integers truncate toward zero
    (NaN and values out of the integer's range give backend-dependent results, as in C), to bool
    is ``!= 0``; ``bitcast=True`` reinterprets the bits (``tj.bitcast``).
    Example: ``tj.cast(acc, tj.bfloat16)`` (as ``acc.to(tj.bfloat16)``); ``tj.cast(x, tj.int32, bitcast=True)``."""
@builtin
def bitcast(x, dtype):
    """``x``'s bits as ``dtype``, which must have the same width and neither be bool
    (``tj.bitcast(t, tj.int32)`` of a float32 tile; also ``t.to(dtype, bitcast=True)``).
    Example: ``bits = tj.bitcast(t, tj.uint32)``."""


# --- shape ------------------------------------------------------------------------------------
@builtin
def trans(x, *perm):
    """``x`` with its dims permuted (``perm``, default: reversed), as ``np.transpose``; ``x.T`` and
    ``tj.trans(k)`` reach the same tensor-core paths in ``tj.dot``.  A transposed tile computed in
    registers (``tj.dot(p.T, do)`` of a softmax ``p``) is computed transposed from the start where
    only its transpose is read, so it costs nothing either (FlashAttention's backward written
    ``S = Q Kᵀ`` runs as ``Sᵀ = K Qᵀ``).
    Example: ``tj.dot(q, tj.trans(k))`` (also spelled ``k.T``)."""
@builtin
def permute(x, *dims):
    """``x`` with its dims in the order ``dims`` (``np.transpose(x, dims)``).
    Example: ``tj.permute(t, 2, 0, 1)``."""
@builtin
def reshape(x, shape):
    """The same elements in row-major order in ``shape`` (also ``x.reshape(shape)``).
    Example: ``tj.reshape(x, (BLOCK // 2, 2))``."""
@builtin
def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` by NumPy's rules (``np.broadcast_to``).
    Example: ``tj.broadcast_to(bias[None, :], (BM, BN))``."""
@builtin
def expand_dims(x, axis):
    """``x`` with a new unit dim at ``axis`` (``np.expand_dims``; also ``x[None, :]``).
    Example: ``tj.expand_dims(v, 0)   # (N,) -> (1, N)``."""


# --- reductions and matmul --------------------------------------------------------------------
@builtin
def sum(x, axis=None, keepdims=False):
    """The sum along ``axis`` (all axes when None; ``keepdims`` as NumPy; also ``x.sum(axis)``):
    integers under 32 bits and bool sum in int32, floats in their own dtype.
    Example: ``tj.sum(x, axis=1, keepdims=True)`` gives a (rows, 1) tile of row sums."""
@builtin
def max(x, axis=None, keepdims=False):
    """The maximum along ``axis`` (as ``sum``'s axes); NaN propagates.
    Example: ``m = tj.max(x, axis=1, keepdims=True)`` (a softmax's row maxima)."""
@builtin
def min(x, axis=None, keepdims=False):
    """The minimum along ``axis`` (as ``max``).
    Example: ``tj.min(x, axis=0)``."""
@builtin
def argmax(x, axis, keepdims=False):
    """The int32 index of the (first) maximum along ``axis``.
    Example: ``best = tj.argmax(scores, axis=1)   # (BM, N) -> (BM,) int32``."""
@builtin
def argmin(x, axis, keepdims=False):
    """The int32 index of the (first) minimum along ``axis``.
    Example: ``nearest = tj.argmin(dist, axis=1)``."""
@builtin
def cumsum(x, axis=0, reverse=False):
    """Running sums along ``axis`` (``np.cumsum``; ``reverse=True`` sums from the end).  bool and
    integers under 32 bits sum in int32, 16-bit floats in float32 (the result's dtype).
    Example: ``tj.cumsum(x, axis=0)`` of ``[1, 2, 3]`` is ``[1, 3, 6]``."""
@builtin
def cumprod(x, axis=0, reverse=False):
    """Running products along ``axis`` (``np.cumprod``), with ``cumsum``'s dtypes.
    Example: ``tj.cumprod(t, axis=1)``."""
@builtin
def sort(x, axis=-1, descending=False):
    """The values of ``x`` sorted along ``axis`` (``np.sort``; ``descending=True`` largest first),
    by a bitonic network: the order of NaNs is not specified.
    Example: ``tj.sort(scores, axis=1, descending=True)`` (top-k takes the first k columns)."""
@builtin
def reduce(x, axis, combine, keepdims=False):
    """Reduce ``x`` along ``axis`` with ``combine``, a ``@tj.func`` of two tiles returning one
    of their shape (elementwise, and associative: neighbouring elements are combined pairwise,
    the left one first, log2(n) times, so the order of the elements is kept and ``combine`` need
    not commute; the axis length is a power of two).  ``tj.sum``/``max``/``min`` are faster for those operations.

        @tj.func
        def first_nonzero(a, b):
            return tj.where(a != 0, a, b)
        tj.reduce(t, 1, first_nonzero)
    Example: ``tj.reduce(t, 1, largest)`` with ``@tj.func def largest(a, b): return tj.maximum(a, b)``."""
@builtin
def associative_scan(x, axis, combine, reverse=False):
    """The inclusive scan of ``x`` along ``axis`` with ``combine``, a ``@tj.func`` of two tiles
    returning one of their shape and dtype (elementwise and associative; it need not commute):
    ``out[i] = x[0] ⊕ ... ⊕ x[i]`` (``reverse=True``: ``x[i] ⊕ ... ⊕ x[n-1]``), over a
    power-of-two axis, in O(log² n) rounds of tile reshapes.  ``tj.cumsum``/``cumprod`` are faster.
    Example: ``tj.associative_scan(t, 1, add)`` with ``@tj.func def add(a, b): return a + b``."""
@builtin
def histogram(x, bins):
    """int32 counts of the values 0, 1, ..., ``bins - 1`` in the 1-D integer tile ``x``
    (``np.bincount(x, minlength=bins)[:bins]`` without the values outside ``[0, bins)``);
    ``bins`` is a compile-time int.  Computed as one compare per (value, bin) and a sum, so at
    most 65,536 of them: count larger inputs chunk by chunk, or with ``tj.atomic_add``.
    Example: ``counts = tj.histogram(bucket, 16)   # int tile in [0, 16) -> (16,) counts``."""
@builtin
def dot(a, b, acc=None, allow_tf32=False):
    """``a @ b (+ acc)`` for 2-D tiles (M, K) @ (K, N), accumulated in float32 (int32 for int8,
    float64 for float64): tensor cores (wgmma on sm_90a, mma.sync on sm_80) for
    float16/bfloat16/float8/int8, tf32 when ``allow_tf32`` and float64 (DMMA
    ``mma.m8n8k4.f64``, sm_80+), FMAs otherwise (float32 without ``allow_tf32``, tiles that
    are not powers of two or too small for the instruction).  ``acc`` is the (M, N)
    accumulator.
    Example: ``acc = tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)), acc)``."""
@builtin
def dot_scaled(a, a_scale, b, b_scale, acc=None):
    """``acc + (a @ b) * (a_scale * b_scale)`` in float32, the add fused with the multiply (one
    rounding), for one K block of block-scaled operands: ``a_scale`` broadcasts to (M, 1),
    ``b_scale`` to (1, N); a K tile must lie inside one scale block (fp8 with 1x128 activation
    and 128x128 weight scales: BK = 128).
    Example: ``acc = tj.dot_scaled(a_tile, a_scales, b_tile, b_scales, acc)`` (a DeepSeek-style fp8 GEMM)."""


# --- loops ------------------------------------------------------------------------------------
@builtin
def range(start, stop=None, step=1, stages=None):
    """A loop ``for i in tj.range(start, stop, step, stages=N)``: like ``range``, and ``stages`` sets how
    many iterations ahead its loads are issued (software pipelining; plain ``range`` loops get
    the compiler's depth, ``stages=1`` turns it off).
    Example: ``for k0 in tj.range(0, K, BK, stages=3):``."""
@builtin
def static_range(start, stop=None, step=1):
    """A loop unrolled at compile time: ``start``, ``stop`` and ``step`` are compile-time ints.
    Example: ``for i in tj.static_range(4):   # unrolled: i is a Python int``."""


# --- programmatic dependent launch (sm_90+) ----------------------------------------------------
@builtin
def wait_prior_kernels():
    """Wait here until the kernels launched before this one on its stream have ended and their
    memory writes are visible. A kernel containing it is launched (sm_90 and later) with
    programmatic stream serialization: its CTAs may start while the previous kernel finishes, so
    the work before this call (index math, loads of inputs that kernel does not write) overlaps
    that kernel's tail; everything after it sees that kernel's results. It must stand in the
    kernel's top level (not in a loop or branch). On sm_80, interpret and emulate it does nothing:
    launches there run one after another.
    Example: ``tj.wait_prior_kernels()   # then read what the previous kernel wrote``."""
@builtin
def launch_dependents():
    """Let the next kernel on the stream start launching (its CTAs run what they do before their
    ``tj.wait_prior_kernels()``), before this kernel ends. A hint only: that kernel's wait still
    waits for this whole kernel, so results stay correct wherever it stands (top level). Without
    it, each CTA counts as triggered when it exits. In a kernel that itself waits, release after
    the wait when the next kernel reads what the kernel before this one wrote: only then has that
    kernel ended once every CTA has released (the emulator checks one launch back, not two).
    Example: ``tj.launch_dependents()   # early in a long kernel whose successor waits``."""


# --- compile-time debugging --------------------------------------------------------------------
@builtin
def static_assert(cond, msg=""):
    """Fail the compile with a CompileError at this line when the compile-time ``cond`` is false.
    Example: ``tj.static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16")``."""
@builtin
def device_print(prefix, *values):
    """Print ``values`` (tiles of one shape, or scalars) while the kernel runs, one line per
    element: ``pid (x, y, z) idx (i, j) <prefix> <v1> <v2>`` (floats as C's ``%g``), on every
    backend (``vprintf`` on the GPU, where lines of different programs interleave in no set order).
    Example: ``tj.device_print("row max", tj.max(t, axis=1))``."""
@builtin
def device_assert(cond, msg=""):
    """Check ``cond`` (a boolean tile or scalar) while the kernel runs, in kernels compiled with
    ``debug=True`` (``kernel[grid](..., debug=True)``) or ``TILEJIT_DEBUG=1``; otherwise it
    compiles to nothing. Where an element is false the launch raises ``tj.DeviceAssertError``
    naming the kernel, this line, the program and the element: on interpret and emulate at once,
    on the GPU after the kernel ends (the kernel runs to its end, the context stays usable, and
    the first failure recorded is reported).
    Example: ``tj.device_assert(idx < n, "index out of range")``."""
@builtin
def static_print(*values):
    """Print compile-time values while the kernel is traced (tiles print as their types): once
    per specialisation compiled (not on an on-disk cache hit), nothing at run time.
    Example: ``tj.static_print("scores", s)   # prints tile<64x64xfloat32> once, at compile time``."""


# --- host helpers (also folded inside kernels on compile-time values) --------------------------
def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of size-``b`` blocks covering ``a``.
    Example: ``grid = (tj.cdiv(n, BLOCK),)``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1).
    Example: ``kernel[(rows,)](x, y, BLOCK=tj.next_power_of_2(n))``."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


del annotations          # the __future__ import: not a tj name (``from tilejit.language import *``)


# Methods and attributes of tiles inside kernels (``t.to(...)``, ``t.T``, ...): what the frontend
# accepts, documented in docs/language.md's "Tile methods" section. name -> (form, meaning, example)
_TILE_METHOD_DOCS = {
    "to": ("t.to(dtype, bitcast=False)", "``tj.cast(t, dtype, bitcast)``: each element converted (rounded to "
           "nearest even), or its bits reinterpreted with ``bitcast=True``.", "acc.to(tj.bfloat16)"),
    "astype": ("t.astype(dtype)", "NumPy's spelling of ``t.to(dtype)``.", "t.astype(tj.float32)"),
    "reshape": ("t.reshape(shape)", "``tj.reshape``: the same elements in row-major order, another shape "
                "(also ``t.reshape(a, b)``; ``can_reorder=`` is accepted and ignored).", "t.reshape((BM, BD))"),
    "trans": ("t.trans(*dims)", "``tj.trans``: the axes reversed, or in the order ``dims``.", "k.trans()"),
    "T": ("t.T", "The transpose of a 2-D tile, ``tj.trans(t)``; as a ``tj.dot`` operand it costs nothing (a loaded tile, or one computed where only its transpose is read).",
          "tj.dot(q, k.T)"),
    "permute": ("t.permute(*dims)", "``tj.permute``: the axes in the order ``dims``.", "t.permute(2, 0, 1)"),
    "sum": ("t.sum(axis, keepdims=False)", "``tj.sum(t, axis, keepdims)``.", "t.sum(axis=1, keepdims=True)"),
    "max": ("t.max(axis, keepdims=False)", "``tj.max(t, axis, keepdims)``.", "s.max(axis=1)"),
    "min": ("t.min(axis, keepdims=False)", "``tj.min(t, axis, keepdims)``.", "d.min(axis=0)"),
    "argmax": ("t.argmax(axis, keepdims=False)", "``tj.argmax``: int32 index of the first maximum.",
               "scores.argmax(axis=1)"),
    "argmin": ("t.argmin(axis, keepdims=False)", "``tj.argmin``: int32 index of the first minimum.",
               "dist.argmin(axis=1)"),
    "broadcast_to": ("t.broadcast_to(shape)", "``tj.broadcast_to``.", "bias[None, :].broadcast_to((BM, BN))"),
    "expand_dims": ("t.expand_dims(axis)", "``tj.expand_dims`` (``t[None, :]`` is the same).", "v.expand_dims(0)"),
    "shape": ("t.shape", "The tile's shape: a tuple of ints, known when compiling.", "acc.shape[0]"),
    "dtype": ("t.dtype", "The tile's dtype (a ``tj.DType``).", "t.to(y.dtype)"),
    "ndim": ("t.ndim", "The number of dimensions.", "tj.static_assert(t.ndim == 2)"),
}
_TILE_ATTRIBUTES = ("T", "shape", "dtype", "ndim")            # read as attributes, not called

