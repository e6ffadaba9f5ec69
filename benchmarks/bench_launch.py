"""Python launch overhead of a one-program kernel that adds 1 to a one-element float32 tensor:
tilejit ``kernel[grid](x, ...)`` on a torch tensor, against raw ``cuda.bindings``
``cuLaunchKernel`` of the same cubin and Triton 3.6 ``kernel[grid](...)`` of the same kernel.

    python3 benchmarks/bench_launch.py [--per-batch 1000] [--batches 20] [--warmup 200]
    python3 -m pytest benchmarks/bench_launch.py --benchmark-only

Each launcher is timed as host wall time over ``per-batch`` back-to-back launches with a
synchronisation only at the batch's end; the figure is the median over batches, in µs per
launch. The kernel takes ~2 µs of GPU time, so the host is the bottleneck and the figure is the
launch path's cost. Every launcher's tensor must end up incremented exactly once per launch.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
import traceback

import pytest

import common
from tilejit.abi import ParamKind
import tilejit as tj

BLOCK = 32
NUM_WARPS = 1


@tj.kernel
def increment_kernel(x, BLOCK: tj.constexpr):
    start = tj.program_id(0) * BLOCK
    tj.store(x, (start,), tj.load(x, (start,), (BLOCK,)) + 1.0)


@tj.kernel
def add_two_kernel(x, a, b, BLOCK: tj.constexpr):
    """x += a + b with a = 1 and b = 0: the increment with three tensor arguments (the launch
    target's kernel), each read by the launch path."""
    start = tj.program_id(0) * BLOCK
    t = tj.load(x, (start,), (BLOCK,)) + tj.load(a, (start,), (BLOCK,)) + tj.load(b, (start,), (BLOCK,))
    tj.store(x, (start,), t)


class Launcher:
    """One way to launch the increment kernel on its own one-element tensor ``x``."""

    def __init__(self, name: str, x, launch, before=None):
        self.name, self.x, self.launch, self.before = name, x, launch, before
        self.launched = 0

    def run(self, count: int) -> None:
        if self.before is not None:          # e.g. the driver binding this launcher measures
            self.before()
        launch = self.launch
        for _ in range(count):
            launch()
        self.launched += count

    def check(self, torch) -> None:
        """The tensor started at 1.0 and every launch added 1 (exact in float32 below 2²⁴)."""
        torch.cuda.synchronize()
        value, expected = float(self.x.item()), 1.0 + self.launched
        assert value == expected, f"{self.name}: x = {value}, expected {expected} after {self.launched} launches"


def _one(torch):
    return torch.ones(1, dtype=torch.float32, device="cuda")


def tilejit_launchers(torch) -> list[Launcher]:
    """tilejit's launch as users get it (the native re-launch path, ``runtime/native.py``, where
    it builds), then its Python re-launch path through the default driver binding
    (``driver.DEFAULT_BINDING``) and through the other (``runtime.launch.use_binding``; ctypes is
    cuda-python where libcuda cannot be opened).  Each launcher launches a kernel object of its
    own, so the native launcher of the first never serves the others."""
    from tilejit.runtime import driver, launch, native
    x = _one(torch)
    launchers = [Launcher(f"tilejit kernel[grid](...) (native: {native.status()})", x,
                          lambda x=x: increment_kernel[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS),
                          before=lambda: (launch.use_binding(driver.DEFAULT_BINDING), setattr(native, "ENABLED", True)))]
    x, one, zero = _one(torch), _one(torch), torch.zeros(1, dtype=torch.float32, device="cuda")
    launchers.append(Launcher(f"tilejit kernel[grid](...), 3 tensors (native: {native.status()})", x,
                              lambda x=x: add_two_kernel[(1,)](x, one, zero, BLOCK=BLOCK, num_warps=NUM_WARPS),
                              before=lambda: (launch.use_binding(driver.DEFAULT_BINDING),
                                              setattr(native, "ENABLED", True))))
    other = "cuda-python" if driver.DEFAULT_BINDING == "ctypes" else "ctypes"
    for binding in dict.fromkeys((launch.use_binding(driver.DEFAULT_BINDING), launch.use_binding(other))):
        x, kernel = _one(torch), tj.kernel(increment_kernel.fn)
        launchers.append(Launcher(f"tilejit kernel[grid](...) (Python path, {binding})", x,
                                  lambda x=x, k=kernel: k[(1,)](x, BLOCK=BLOCK, num_warps=NUM_WARPS),
                                  before=lambda b=binding: (launch.use_binding(b), setattr(native, "ENABLED", False))))
    return launchers


# ----------------------------------------------------------------------------- raw cuLaunchKernel
def _checked(result, call: str):
    from cuda.bindings import driver as cu
    err, values = result[0], result[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{call} failed: {err}")
    return values[0] if len(values) == 1 else values


def _load_function(torch, artifact):
    """The artifact's kernel loaded with the driver API alone, in the primary context torch uses."""
    from cuda.bindings import driver as cu
    _checked(cu.cuInit(0), "cuInit")
    device = _checked(cu.cuDeviceGet(torch.cuda.current_device()), "cuDeviceGet")
    context = _checked(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
    _checked(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    image = artifact.cubin if artifact.cubin else artifact.ptx.encode() + b"\0"
    module = _checked(cu.cuModuleLoadData(image), "cuModuleLoadData")
    function = _checked(cu.cuModuleGetFunction(module, artifact.name.encode()), "cuModuleGetFunction")
    return module, function


def _param_values(artifact, x) -> list:
    """One ctypes value per kernel parameter, laid out by the artifact's ParamDesc list; a
    kernel packed several programs to a CTA (``pack_programs``) takes grid axis 0 (here 1) as one
    more int32 after ``x``."""
    values = []
    for p in artifact.params:
        if p.kind is ParamKind.SCALAR and p.arg == 1 and artifact.programs_per_cta > 1:
            values.append(ctypes.c_int32(1))
            continue
        if p.kind is ParamKind.PTR:
            values.append(ctypes.c_uint64(x.data_ptr()))
        elif p.kind is ParamKind.DIM:
            values.append(ctypes.c_int32(x.shape[p.axis]))
        elif p.kind is ParamKind.STRIDE:
            values.append((ctypes.c_int64 if p.dtype.bits == 64 else ctypes.c_int32)(x.stride(p.axis)))
        else:
            raise RuntimeError(f"unexpected parameter {p} for the increment kernel")
    return values


def raw_launchers(torch) -> list[Launcher]:
    """cuLaunchKernel of the tilejit-compiled cubin: kernelParams packed once (the floor for any
    Python launcher), and packed by cuda-python from a (values, ctypes types) tuple per call."""
    from cuda.bindings import driver as cu
    x_packed, x_tuple = _one(torch), _one(torch)
    specs, consts, _ = increment_kernel.specialise(increment_kernel.bind((x_packed,), {"BLOCK": BLOCK}))
    artifact = increment_kernel.compile(specs, consts, NUM_WARPS, "cuda").artifact
    assert artifact.shared_bytes == 0, "the increment kernel should need no shared memory"
    module, function = _load_function(torch, artifact)
    stream = torch.cuda.current_stream().cuda_stream
    threads = artifact.cta_threads            # every warp of a CTA holding several programs
    success, launch_kernel = cu.CUresult.CUDA_SUCCESS, cu.cuLaunchKernel

    values = _param_values(artifact, x_packed)
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    packed = ctypes.addressof(pointers)

    def launch_packed():
        err, = launch_kernel(function, 1, 1, 1, threads, 1, 1, 0, stream, packed, 0)
        if err != success:
            raise RuntimeError(f"cuLaunchKernel failed: {err}")

    tuple_values = _param_values(artifact, x_tuple)
    as_ctype = {ctypes.c_uint64: ctypes.c_void_p}          # device pointers go as void*
    args = (tuple(v.value for v in tuple_values),
            tuple(as_ctype.get(type(v), type(v)) for v in tuple_values))

    def launch_tuple():
        err, = launch_kernel(function, 1, 1, 1, threads, 1, 1, 0, stream, args, 0)
        if err != success:
            raise RuntimeError(f"cuLaunchKernel failed: {err}")

    libcuda = ctypes.CDLL("libcuda.so.1")

    def ctypes_launcher(argtypes: bool) -> Launcher:
        """cuLaunchKernel through ctypes on libcuda: with argtypes (ctypes converts every
        argument), or without (handles pre-made as c_void_p, ints passed as C ints)."""
        x = _one(torch)
        values = _param_values(artifact, x)
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        uint, void = ctypes.c_uint, ctypes.c_void_p
        c_launch = libcuda["cuLaunchKernel"]          # a function object of its own (not cached)
        c_launch.restype = ctypes.c_int
        if argtypes:
            c_launch.argtypes = [void, uint, uint, uint, uint, uint, uint, uint, void, void, void]
            f, s, p = int(function), stream or None, ctypes.addressof(pointers)
        else:
            f, s, p = void(int(function)), void(stream) if stream else None, void(ctypes.addressof(pointers))

        def launch():
            err = c_launch(f, 1, 1, 1, threads, 1, 1, 0, s, p, None)
            if err:
                raise RuntimeError(f"cuLaunchKernel failed: {err}")
        launcher = Launcher(f"raw cuLaunchKernel (ctypes{', argtypes' if argtypes else ''}, packed once)", x, launch)
        launcher.keep = (values, pointers, module)
        return launcher

    packed_launcher = Launcher("raw cuLaunchKernel (packed once)", x_packed, launch_packed)
    tuple_launcher = Launcher("raw cuLaunchKernel (args tuple)", x_tuple, launch_tuple)
    packed_launcher.keep = (values, pointers, module)     # alive as long as the launchers
    tuple_launcher.keep = (module,)
    return [packed_launcher, ctypes_launcher(False), ctypes_launcher(True), tuple_launcher]


def triton_launcher(torch) -> Launcher:
    from triton_kernels import increment_kernel as triton_increment
    x = _one(torch)
    return Launcher("triton kernel[grid](...)", x,
                    lambda: triton_increment[(1,)](x, 1, BLOCK=BLOCK, num_warps=NUM_WARPS))


# ---------------------------------------------------------------------------------------- timing
def time_round_robin(torch, launchers: list[Launcher], per_batch: int, batches: int, warmup: int) -> list[dict]:
    """Median and min µs per launch of each launcher over ``batches`` batches, after ``warmup``
    launches (which include any compile and module load) and a correctness check.  The batches
    take turns (batch i of every launcher, then batch i+1), so a slow spell of the host or the
    order the launchers come in weighs on all of them alike."""
    for launcher in launchers:
        launcher.run(warmup)
        launcher.check(torch)
    per_launch = {id(launcher): [] for launcher in launchers}
    for _ in range(batches):
        for launcher in launchers:
            start = time.perf_counter()
            launcher.run(per_batch)
            torch.cuda.synchronize()
            per_launch[id(launcher)].append((time.perf_counter() - start) / per_batch * 1e6)
    rows = []
    for launcher in launchers:
        launcher.check(torch)
        times = per_launch[id(launcher)]
        rows.append({"launcher": launcher.name, "us": statistics.median(times), "min_us": min(times),
                     "max_us": max(times)})
    return rows


def all_launchers(torch) -> list:
    """(name, factory) for every launcher; a factory that fails is reported, not fatal."""
    return [("tilejit", lambda: tilejit_launchers(torch)), ("raw", lambda: raw_launchers(torch)),
            ("triton", lambda: [triton_launcher(torch)])]


def measure_all(torch, per_batch: int, batches: int, warmup: int) -> tuple[list[dict], int]:
    launchers, rows, failures = [], [], 0
    for label, factory in all_launchers(torch):
        try:
            launchers.extend(factory())
        except Exception as err:        # e.g. Triton missing: the other rows still count
            failures += 1
            traceback.print_exc()
            print(f"bench_launch: {label} FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            rows.append({"launcher": label, "status": f"FAILED ({type(err).__name__})"})
    rows[:0] = time_round_robin(torch, launchers, per_batch, batches, warmup)
    tilejit_us = next((r["us"] for r in rows if r["launcher"].startswith("tilejit") and "us" in r), None)
    for row in rows:
        if "us" in row and tilejit_us is not None:
            row["tilejit_over"] = tilejit_us / row["us"]
            row["status"] = "ok"
    return rows, failures


def record_rows(rows: list[dict]) -> None:
    tilejit = next((r for r in rows if r["launcher"].startswith("tilejit") and "us" in r), None)
    if tilejit is None:
        return
    for row in rows:
        if row is not tilejit and "us" in row:
            common.record("launch overhead", "grid 1, 1 element", "float32", tilejit["us"], "µs",
                          row["launcher"], row["us"], tilejit["us"] / row["us"],
                          tilejit_min_us=tilejit["min_us"], reference_min_us=row["min_us"])


COLUMNS = [("launcher", "launcher", ""), ("us", "µs/launch", ".2f"), ("min_us", "min", ".2f"),
           ("max_us", "max", ".2f"), ("tilejit_over", "tilejit ÷ this", ".2f"), ("status", "status", "")]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=200)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_launch: skipped (needs torch with a CUDA GPU)")
        return 0
    rows, failures = measure_all(torch, args.per_batch, args.batches, args.warmup)
    record_rows(rows)
    common.print_table(rows, COLUMNS, title=f"launch overhead on {common.gpu_name()} (wall time, "
                       f"median of {args.batches} batches of {args.per_batch} launches)")
    return 1 if failures else 0


# ------------------------------------------------------------------------------- pytest-benchmark
@pytest.mark.gpu
def test_launch_overhead(benchmark):
    """pytest-benchmark times tilejit launches; extra_info holds every launcher's µs and ratios."""
    torch = common.require_cuda_torch()
    rows, _ = measure_all(torch, per_batch=500, batches=10, warmup=100)
    for row in rows:
        if "us" in row:
            benchmark.extra_info[row["launcher"] + " us"] = row["us"]
            benchmark.extra_info["tilejit / " + row["launcher"]] = row.get("tilejit_over")
    launcher = tilejit_launchers(torch)[0]
    launcher.run(10)
    launcher.check(torch)
    benchmark(launcher.launch)
    torch.cuda.synchronize()
    assert any(r["launcher"].startswith("tilejit") and "us" in r for r in rows)


if __name__ == "__main__":
    sys.exit(main())
