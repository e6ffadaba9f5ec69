"""Helpers shared by the benchmarks: CUDA-event timing (``/work/.library/device/METHOD.md``:
warm-up, median of reps, L2 flushed before each rep, a per-rep ``setup`` outside the timed
region), random never-zero inputs, loading the example kernels, a table printer, and JSON-lines
records written to ``$TILEJIT_BENCH_OUT``.

torch is imported only by the GPU helpers, so the CPU benchmarks and ``pytest --collect-only``
work without it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:      # run from a checkout even where tilejit is not installed
    sys.path.append(str(REPO_ROOT))

L2_FLUSH_BYTES = 256 * 2**20    # far over the H200's 50 MB L2: writing it evicts every input line
BENCH_OUT_ENV = "TILEJIT_BENCH_OUT"
GPU_HEADSTART_CYCLES = 400_000  # ~0.2 ms at the H200's ~2 GHz: room for a slow Python launch


# ------------------------------------------------------------------------------------ environment
def cuda_torch():
    """The torch module when it is installed and sees a CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def require_cuda_torch():
    """torch with a CUDA device, or ``pytest.skip`` (only call this from a test)."""
    import pytest
    torch = cuda_torch()
    if torch is None:
        pytest.skip("needs torch with a CUDA GPU")
    return torch


def gpu_name() -> str:
    """The name of the CUDA device torch uses, else a CPU description (for the records)."""
    torch = cuda_torch()
    if torch is not None:
        return torch.cuda.get_device_name()
    return f"cpu {platform.machine()} (no GPU)"


def load_example(name: str):
    """``examples/<name>.py`` as a module: the one ``tilejit demo`` runs (``tilejit.examples``)."""
    from tilejit.demo import load_example as load
    return load(name)


# ----------------------------------------------------------------------------------------- inputs
def random_tensor(torch, shape, dtype, seed: int, scale: float = 1.0):
    """N(0, scale²) values of ``dtype`` on the current CUDA device; an exact zero (not expected,
    but it would hide unwritten outputs) is replaced by ``scale``."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)
    return x.masked_fill_(x == 0, scale)


def fp8_blockwise_inputs(torch, size: int, seed: int = 0):
    """Square operands for ``examples/fp8_blockwise_gemm.py`` with the weights stored (N, K):
    ``(host (a8, sa, b8, sb), device (a, sa, b_nk, sb_nk))``, the host ones in the example's
    (K, N) layout for its ``reference``."""
    import numpy as np
    ex = load_example("fp8_blockwise_gemm")
    rng = np.random.default_rng(seed)
    a8, sa = ex.quantize_rows(rng.standard_normal((size, size)).astype(np.float32))
    b8, sb = ex.quantize_blocks(rng.standard_normal((size, size)).astype(np.float32))

    def dev(x):
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()
    a, b = (dev(x.view(np.uint8)).view(torch.float8_e4m3fn) for x in (a8, b8.T))
    return (a8, sa, b8, sb), (a, dev(sa), b, dev(sb.T))


def relative_error(torch, out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (METHOD.md); inf when out has a NaN or inf."""
    out64, ref64 = out.double(), ref.double()
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64))


def row_inputs(torch, m: int, n: int, dtype, reps: int):
    """The tensors of a row-kernel benchmark and its copy reference, measured now: (x (m, n),
    weight (n,), bias (n,), an output like x, bytes moved (x read + y written), copy GB/s of an
    equal-size tensor)."""
    x = random_tensor(torch, (m, n), dtype, 1)
    w, b = (random_tensor(torch, (n,), dtype, s) for s in (2, 3))
    src, dst = random_tensor(torch, (m, n), dtype, 4), torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    copy = time_cuda(lambda: dst.copy_(src), warmup=10, reps=reps).gbps(nbytes)
    return x, w, b, torch.empty_like(x), nbytes, copy


def copy_ratio(torch, launch, out, nbytes: int, copy_gbps: float, what, reps: int = 20) -> float:
    """Poison ``out`` with NaN, run ``launch`` once (AssertionError naming ``what`` if any output
    stays unwritten), then its bandwidth over ``nbytes`` as a ratio to ``copy_gbps``."""
    out.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), what
    return round(time_cuda(launch, warmup=5, reps=reps).gbps(nbytes) / copy_gbps, 3)


def copy_gbps(torch, reps: int = 30) -> float:
    """Device-to-device copy bandwidth of 256 MiB (bytes read plus written, GB/s): the
    memory-bound kernels' reference."""
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return time_cuda(lambda: dst.copy_(src), reps=reps).gbps(2 * src.numel())


def checked(torch, launch, out, exact, tolerance: float, what: str) -> float:
    """Poison ``out`` with NaN, run ``launch`` once and return its relative error against
    ``exact()``; AssertionError over ``tolerance`` (every output must have been written)."""
    out.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    err = relative_error(torch, out.float(), exact())
    assert err <= tolerance, f"{what}: relative error {err:.3g}"
    return err


# ----------------------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Per-rep times of one measured function, in milliseconds."""
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int

    def gbps(self, nbytes: int) -> float:
        """Bandwidth at the median time: ``nbytes`` over the median, in GB/s (10⁹ B/s)."""
        return nbytes / (self.median_ms * 1e-3) / 1e9


_flush_buffers: dict = {}


def _l2_flush_buffer(torch):
    device = torch.cuda.current_device()
    if device not in _flush_buffers:
        _flush_buffers[device] = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    return _flush_buffers[device]


def time_cuda(fn, setup=None, warmup: int = 10, reps: int = 100) -> Timing:
    """Median time of ``fn()`` over ``reps`` runs with CUDA events on torch's current stream.

    Before each timed run, outside the timed region: ``setup()`` (e.g. poison the outputs with
    NaN; it runs before each warm-up run too), then a 256 MB buffer is read so no input is
    left in L2, and the lines left there are clean (``BENCH_L2_FLUSH=write``, the method before
    2026-12-06: the buffer is written instead, which leaves up to an L2 of dirty lines whose
    write-back to DRAM then falls inside the timed run: on the H100 it cost decode at KV 8192
    ~10 us of 105 and SDPA the same, copy ~4%), then the GPU spins for ~``GPU_HEADSTART_CYCLES`` (no memory traffic) so that
    the host has enqueued the start event and ``fn``'s kernels before the GPU reaches them: a
    slow Python launch path does not leak into the GPU time (bench_launch measures that path).

    (``tilejit.testing.benchmark`` has no ``setup`` hook yet; unify once it does.)"""
    import torch
    buffer = _l2_flush_buffer(torch)
    if os.environ.get("BENCH_L2_FLUSH", "read") != "write":
        words = buffer.view(torch.int32)

        def flush():
            words.max()
    else:
        flush = buffer.zero_
    spin = getattr(torch.cuda, "_sleep", None)         # torch's spin kernel (a private helper)
    headstart = (lambda: spin(GPU_HEADSTART_CYCLES)) if spin else (lambda: None)
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if setup is not None:
            setup()
        flush()
        headstart()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) for start, end in zip(starts, ends)]
    return Timing(statistics.median(times), min(times), max(times), reps)


def sweep(torch, configs, launcher, out, ref, tolerance: float, reps: int) -> dict:
    """Check then time each config: ``launcher(cfg)`` gives a no-argument launch writing ``out``,
    which is poisoned with NaN and compared with ``ref`` (relative error under ``tolerance``)
    before timing. Returns {config: (Timing, rel err)}; wrong or refused configs are reported
    on stderr and left out."""
    import tilejit as tj
    timed = {}
    for cfg in configs:
        label = "x".join(map(str, cfg))
        run = launcher(cfg)
        try:
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = relative_error(torch, out.float(), ref)
            if not err < tolerance:
                print(f"  config {label}: WRONG (rel err {err:.2e})", file=sys.stderr)
                continue
            timed[cfg] = (time_cuda(run, reps=reps), err)
        except tj.TilejitError as e:
            print(f"  config {label}: dropped: {str(e).splitlines()[0]}", file=sys.stderr)
    return timed


# ---------------------------------------------------------------------------------------- results
def record(benchmark: str, shape: str, dtype: str, figure: float, unit: str, reference: str,
           reference_figure: float | None, ratio: float | None, **extra) -> dict:
    """One result row (the README table's columns, plus ``extra``); appended as a JSON line to
    ``$TILEJIT_BENCH_OUT`` when it is set. Returns the row."""
    row = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "gpu": gpu_name(), "benchmark": benchmark, "shape": shape, "dtype": dtype,
           "figure": figure, "unit": unit, "reference": reference,
           "reference_figure": reference_figure, "ratio": ratio, **extra}
    path = os.environ.get(BENCH_OUT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
    return row


def format_number(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def print_table(rows: list[dict], columns: list[tuple[str, str, str]], title: str = "") -> None:
    """Print ``rows`` as an aligned text table; ``columns`` lists (key, header, format spec)."""
    cells = [[header for _, header, _ in columns]]
    cells += [[format_number(row.get(key), spec) for key, _, spec in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    if title:
        print(title)
    for n, line in enumerate(cells):
        print("  ".join(text.rjust(w) if n and text[:1].isdigit() else text.ljust(w)
                        for text, w in zip(line, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    sys.stdout.flush()
