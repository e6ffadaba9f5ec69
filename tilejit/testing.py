"""``tj.testing``: Hypothesis strategies for dtypes, shapes and arrays, a dtype-aware
``assert_close`` that reports the worst element, and a small ``benchmark`` timer.

Hypothesis is imported only when a strategy is built, so ``import tilejit`` does not need it.
"""
from __future__ import annotations

import functools
import statistics
import time

import numpy as np

from tilejit import dtypes as _dt

# (rtol, atol) per dtype name; integers and bool compare exactly
TOLERANCES = {
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
    "float8e4m3": (1.25e-1, 1.25e-1),
    "float8e5m2": (2.5e-1, 2.5e-1),
}
_L2_FLUSH_BYTES = 256 * 2**20


# ----------------------------------------------------------------------------------- strategies
def dtypes(kinds: str = "fiub", include_float8: bool = False):
    """Strategy for tile dtypes whose kind is in ``kinds`` (f float, i signed, u unsigned, b bool)."""
    from hypothesis import strategies as st
    return st.sampled_from([d for d in _dt.ALL if d.kind in kinds
                            and (include_float8 or not d.name.startswith("float8"))])


def shapes(rank: int, min_side: int = 1, max_side: int = 64):
    """Strategy for shapes of ``rank``: any side in [min_side, max_side], ragged sizes and powers
    of two both likely."""
    from hypothesis import strategies as st
    powers = [2**k for k in range(12) if min_side <= 2**k <= max_side]
    side = st.integers(min_side, max_side)
    if powers:
        side = st.one_of(side, st.sampled_from(powers), st.sampled_from(powers).map(
            lambda p: min(max(p + 1, min_side), max_side)))
    return st.tuples(*[side] * rank)


def arrays(dtype, shape, elements=None, *, min_value=None, max_value=None):
    """Strategy for NumPy arrays of ``dtype`` (a DType, name, or strategy) and ``shape`` (a tuple
    or strategy). Values are finite and random (floats ~ N(0, 1), ints in [-100, 100] unless
    bounded) and never all zero; ``elements`` (a strategy) draws every element instead."""
    from hypothesis import strategies as st

    @st.composite
    def draw_array(draw):
        dt = _dt.lookup(draw(dtype) if isinstance(dtype, st.SearchStrategy) else dtype)
        shp = tuple(draw(shape) if isinstance(shape, st.SearchStrategy) else shape)
        if elements is not None:
            n = int(np.prod(shp, dtype=np.int64))
            values = draw(st.lists(elements, min_size=n, max_size=n))
            return np.array(values).astype(dt.np).reshape(shp)
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return random_array(rng, dt, shp, min_value, max_value)
    return draw_array()


def random_array(rng: np.random.Generator, dtype, shape, min_value=None, max_value=None) -> np.ndarray:
    """Finite random values of ``dtype``, never all zero (see ``arrays``)."""
    dt = _dt.lookup(dtype)
    if dt.is_bool:
        a = rng.random(shape) < 0.5
    elif dt.is_int:
        info = np.iinfo(dt.np)
        lo = max(info.min, -100) if min_value is None else min_value
        hi = min(info.max, 100) if max_value is None else max_value
        a = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64)
    elif min_value is None and max_value is None:
        a = rng.standard_normal(shape)
    else:
        a = rng.uniform(-1.0 if min_value is None else min_value, 1.0 if max_value is None else max_value, shape)
    a = np.asarray(a).astype(dt.np)
    if a.size and not a.any():
        a.flat[0] = 1 if max_value is None or max_value >= 1 else max_value
    return a


# -------------------------------------------------------------------------------- assert_close
def _as_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy") and callable(x.numpy):     # tj.DeviceArray, CPU torch tensors
        return np.asarray(x.numpy())
    return np.asarray(x)


def _tolerance_dtype(dtype, out: np.ndarray) -> str:
    if dtype is not None:
        return _dt.lookup(dtype).name
    try:
        return _dt.from_numpy(out.dtype).name
    except TypeError:
        return "float32" if out.dtype.kind == "f" else "int64"


def assert_close(out, ref, dtype=None, rtol: float | None = None, atol: float | None = None) -> None:
    """Assert ``|out - ref| <= atol + rtol * |ref|`` elementwise, with tolerances from ``dtype``
    (default: out's dtype; integers and bool exact). NaN must meet NaN, inf the same inf.
    The AssertionError names the worst element, its values and its error."""
    out_a, ref_a = _as_numpy(out), _as_numpy(ref)
    if out_a.shape != ref_a.shape:
        raise AssertionError(f"shape mismatch: out has shape {out_a.shape}, ref has {ref_a.shape}")
    name = _tolerance_dtype(dtype, out_a)
    default_rtol, default_atol = TOLERANCES.get(name, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    o, r = out_a.astype(np.float64), ref_a.astype(np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(o - r)
        allowed = atol + rtol * np.abs(r)
        special = ~np.isfinite(o) | ~np.isfinite(r)          # NaN meets NaN, inf the same inf
        same_special = (np.isnan(o) & np.isnan(r)) | (np.isinf(o) & (o == r))
        bad = np.where(special, ~same_special, ~(err <= allowed))
        if not bad.any():
            return
        badness = np.where(bad, np.nan_to_num(err / np.maximum(allowed, 1e-300), nan=np.inf), -1.0)
        worst = np.unravel_index(int(np.argmax(badness)), o.shape) if o.ndim else ()
        rel = err[worst] / abs(r[worst]) if r[worst] else np.inf
    raise AssertionError(
        f"{int(bad.sum())} of {o.size} elements differ beyond rtol={rtol:g}, atol={atol:g} ({name})\n"
        f"  worst at index {tuple(int(i) for i in worst)}: out={out_a[worst].item()!r} "
        f"ref={ref_a[worst].item()!r} |error|={err[worst]:.4g} (relative {rel:.4g})\n"
        f"  max |error| over all elements: {np.nanmax(np.where(same_special, 0, err)):.4g}")


# ----------------------------------------------------------------------------------- benchmark
@functools.cache
def _cuda_event_timer():
    """(make_event, flush_l2, synchronize, elapsed_ms) from torch or CuPy, or None without a GPU;
    made once per process, so the 256 MB flush buffer is allocated once.  The flush reads the
    buffer, leaving clean lines in L2: a written buffer would leave dirty lines whose write-back
    to DRAM then falls inside the timed run (on the H100 ~10% of a 100 us memory-bound kernel)."""
    try:
        import torch
        if torch.cuda.is_available():
            buf = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            return (lambda: torch.cuda.Event(enable_timing=True), buf.max, torch.cuda.synchronize,
                    lambda start, end: start.elapsed_time(end))
    except ImportError:
        pass
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            buf = cupy.empty(_L2_FLUSH_BYTES // 4, dtype=cupy.int32)
            return (cupy.cuda.Event, buf.max, cupy.cuda.Device().synchronize,
                    cupy.cuda.get_elapsed_time)
    except Exception:            # no CuPy, or no driver/device behind it
        pass
    return None


def benchmark(fn, warmup: int = 10, rep: int = 50, setup=None) -> float:
    """Median time of ``fn()`` in milliseconds: CUDA events with the L2 flushed before each run
    when a GPU and torch or CuPy are present, else ``time.perf_counter`` on the host.
    ``setup()``, when given, runs before every run (warm-up ones too), outside the timed region
    and before the L2 flush: e.g. restore the inputs a kernel overwrites."""
    setup = setup or (lambda: None)
    for _ in range(warmup):
        setup()
        fn()
    timer = _cuda_event_timer()
    if timer is None:
        times = []
        for _ in range(rep):
            setup()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    make_event, flush_l2, synchronize, elapsed_ms = timer
    synchronize()
    pairs = []
    for _ in range(rep):
        setup()
        flush_l2()
        start, end = make_event(), make_event()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    synchronize()
    return statistics.median(elapsed_ms(s, e) for s, e in pairs)
