"""Cold compile and new-process cache hit of a kernel, each measured in a fresh Python process
(``subprocess``) and reported as the median of a few runs: the softmax (``examples/softmax.py``),
or with ``--kernel gemm`` the bf16 128x256x64 GEMM of ``examples/matmul.py`` (8 warps, 4096³
inputs) or ``--kernel attention`` the bf16 D128 128x128 attention of ``examples/attention.py``.

    python3 benchmarks/bench_compile.py [--kernel softmax|gemm|attention] [--mode auto|cpu|gpu|both]
        [--runs 3] [--cols 1024] [--profile] [--stages] [--keep-jit-cache] [--set MODULE.NAME=VALUE]
    python3 -m pytest benchmarks/bench_compile.py --benchmark-only

Modes (what a child process times, from the launch call on; imports are timed separately):
  cpu  cuda-backend compile with no device use: ``Kernel.compile(..., "cuda")`` on NumPy-array
       specs, from specialisation to PTX + cubin written to the cache (cold), or to the artifact
       read back from the cache (hit).
  gpu  ``kernel[grid](x, y, ...)`` on torch CUDA tensors until ``torch.cuda.synchronize()``
       returns: the first launch done, module load included.
  auto gpu + cpu on a machine with a GPU and torch, else cpu.
Cold runs get a fresh empty ``TILEJIT_CACHE_DIR`` and no CUDA JIT cache (``CUDA_CACHE_DISABLE=1``:
nvJitLink and the driver keep assemblies in ``~/.nv/ComputeCache``; ``--keep-jit-cache`` keeps
it); hit runs reuse the last cold run's entry and check that it was read, not rewritten. Every
process caches Python's bytecode (``PYTHONPYCACHEPREFIX`` beside the cache directories, even
where the host sets ``PYTHONDONTWRITEBYTECODE``), as an installed package has it. One
unrecorded cold run first warms the bytecode and the file cache. ``--stages`` adds one
unrecorded cold process that times each stage of the compile (frontend, passes, LLVM IR, O3,
NVPTX emission, assembly (nvJitLink; for a warp-specialised kernel the toolkit's ptxas command,
else none: the driver JIT-compiles its PTX in the module load), module load).
Targets: cold ≤ 800 ms (softmax) and ≤ 1000 ms (GEMM, attention), cache hit to first launch
≤ 50 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import common
import switch_probe

TARGET_MS = {"cold": 800.0, "hit": 50.0}
COLD_TARGET_MS = {"softmax": 800.0, "gemm": 1000.0, "attention": 1000.0}
CHILD_TAG = "BENCH_COMPILE_RESULT "
CHILD_TIMEOUT_S = 180
WHAT = {("cpu", "cold"): "cold compile to cubin (no load)",
        ("cpu", "hit"): "cache hit to artifact read (no load)",
        ("gpu", "cold"): "cold compile to first launch done",
        ("gpu", "hit"): "cache hit to first launch done"}


# ---------------------------------------------------------------------------------- child process
def _manifests(cache_dir: str) -> dict:
    """manifest path -> (inode, mtime_ns) of every entry in the cache: a rewrite changes both."""
    found = {}
    for path in Path(cache_dir).glob("*/*/manifest.json"):
        st = path.stat()
        found[str(path)] = (st.st_ino, st.st_mtime_ns)
    return found


def _problem(kind: str, args, np_or_torch):
    """(kernel, arguments, constexprs, grid, num_warps, reference or None) of the measured kernel,
    on NumPy arrays (``np_or_torch`` is numpy: untouched pages, no reference) or torch CUDA
    tensors (with the reference to check the first launch against)."""
    torch = None if np_or_torch.__name__ == "numpy" else np_or_torch

    def array(shape, dtype_name, seed):
        if torch is None:
            from tilejit import dtypes
            return np_or_torch.empty(shape, dtype=dtypes.lookup(dtype_name).np)
        return common.random_tensor(torch, shape, getattr(torch, dtype_name), seed=seed, scale=1.0)
    if kind == "gemm":
        kernel = common.load_example("matmul").matmul_kernel.kernel
        a, b, c = (array((4096, 4096), "bfloat16", s) for s in (1, 2, 3))
        ref = (lambda: (a.float() @ b.float())) if torch is not None else None
        return kernel, (a, b, c), dict(BM=128, BN=256, BK=64, STAGES=3), (32, 16), 8, ref
    if kind == "attention":
        kernel = common.load_example("attention").attention_kernel
        q, k, v, o = (array((4, 32, 4096, 128), "bfloat16", s) for s in (1, 2, 3, 4))
        ref = (lambda: torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())) \
            if torch is not None else None
        return kernel, (q, k, v, o, 128 ** -0.5), dict(BM=128, BN=128, BD=128, CAUSAL=False), (32, 128), 8, ref
    kernel = common.load_example("softmax").softmax_kernel
    x, y = array((args.rows, args.cols), args.dtype, 1), array((args.rows, args.cols), args.dtype, 2)
    ref = (lambda: torch.softmax(x.float(), dim=-1)) if torch is not None else None
    return kernel, (x, y), {"BLOCK": _block(args.cols)}, (args.rows,), args.num_warps, ref


def _compile_without_device(args) -> dict:
    import numpy as np
    kernel, values, consts, _, num_warps, _ = _problem(args.kernel, args, np)
    start = time.perf_counter()
    specs, consts, _ = kernel.specialise(kernel.bind(values, consts))
    entry = kernel.compile(specs, consts, num_warps, "cuda")
    ms = (time.perf_counter() - start) * 1e3
    art = entry.artifact
    return {"ms": ms, "has_cubin": art.cubin is not None, "registers": art.registers,
            "spills": art.spills}


def _first_launch(args) -> dict:
    import torch
    kernel, values, consts, grid, num_warps, reference = _problem(args.kernel, args, torch)
    out = values[-1] if args.kernel == "softmax" else values[2] if args.kernel == "gemm" else values[3]
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    start = time.perf_counter()
    kernel[grid](*values, num_warps=num_warps, **consts)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1e3
    error = common.relative_error(torch, out.float(), reference())
    return {"ms": ms, "rel_error": error,
            "ok": error <= (1e-4 if args.kernel == "softmax" and args.dtype == "float32" else 2e-2)}


# (stage, module, attribute): what --stages times in a cold child; "ptx" includes "O3"
STAGE_HOOKS = (("frontend", "tilejit.kernel", "Kernel._compile_job"),
               ("passes", "tilejit.backends.cuda", "STAGES.simt"),
               ("LLVM IR", "tilejit.backends.cuda", "STAGES.llvm"),
               ("O3", "tilejit.codegen.llvm", "optimize"),
               ("ptx", "tilejit.backends.cuda", "STAGES.ptx"),
               ("nvJitLink", "tilejit.codegen.ptxas", "assemble"),
               ("module load", "tilejit.runtime.launch", "load"))


def _time_stages() -> dict:
    """Wrap each STAGE_HOOKS function so that its wall time adds up in the returned dict
    (milliseconds by stage).  Imports the compiler's modules first: run it in an unrecorded child."""
    import importlib
    spent: dict[str, float] = {}

    def timed(stage, fn):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[stage] = spent.get(stage, 0.0) + (time.perf_counter() - start) * 1e3
        return wrapper
    for stage, module_name, attr in STAGE_HOOKS:
        owner = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if isinstance(owner, dict):
            owner[name] = timed(stage, owner[name])
        else:
            setattr(owner, name, timed(stage, getattr(owner, name)))
    return spent


def _profiled(measure, args) -> dict:
    """``measure`` under cProfile; the top functions by cumulative and by own time go to stdout."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    result = profiler.runcall(measure, args)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    return result


def child_main(args) -> int:
    """Run one measurement in this (fresh) process and print its JSON result line."""
    started = time.perf_counter()
    before = _manifests(os.environ["TILEJIT_CACHE_DIR"])
    import tilejit  # noqa: F401  (imports are timed apart from the compile)
    switch_probe.apply(args.set)
    common.load_example({"gemm": "matmul", "attention": "attention"}.get(args.kernel, "softmax"))
    if args.mode == "gpu":
        import torch
        torch.cuda.init()
    import_ms = (time.perf_counter() - started) * 1e3
    measure = _first_launch if args.mode == "gpu" else _compile_without_device
    spent = _time_stages() if args.stages else None
    result = _profiled(measure, args) if args.profile else measure(args)
    if spent is not None:
        result["stages"] = spent
    after = _manifests(os.environ["TILEJIT_CACHE_DIR"])
    if args.child == "cold":
        result["cache_ok"] = not before and bool(after)     # a miss that wrote an entry
    else:
        result["cache_ok"] = bool(before) and after == before   # read, not recompiled
    result["import_ms"] = import_ms
    from tilejit.passes import switches
    result["switches"] = [f"{name}={value!r}" for name, value in switches.overrides()]
    print(CHILD_TAG + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------- parent process
def _block(cols: int) -> int:
    return 1 << max(cols - 1, 0).bit_length()


def child_env(kind: str, mode: str, cache_dir: str, keep_jit_cache: bool = False) -> dict:
    """The environment of one measured process.  Python's bytecode is cached beside the tilejit
    cache directory (as in any installed package: a host that sets ``PYTHONDONTWRITEBYTECODE``
    would otherwise time compiling tilejit's sources in every process; the warm-up process
    writes it), and a cold process starts without the CUDA JIT cache (``CUDA_CACHE_DISABLE``:
    nvJitLink and the driver keep their assemblies in ``~/.nv/ComputeCache``, where the warm-up
    process left this very kernel's), unless ``keep_jit_cache``."""
    env = dict(os.environ, TILEJIT_CACHE_DIR=cache_dir, PYTHONUNBUFFERED="1",
               PYTHONPYCACHEPREFIX=os.path.join(os.path.dirname(cache_dir), "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop(common.BENCH_OUT_ENV, None)
    if kind == "cold" and not keep_jit_cache:
        env["CUDA_CACHE_DISABLE"] = "1"
    if mode == "gpu":
        env["TILEJIT_BACKEND"] = "cuda"     # never fall back to emulate silently
    return env


def run_child(kind: str, mode: str, cache_dir: str, args, profile: bool = False, stages: bool = False) -> dict:
    """One new process measuring ``kind`` (cold|hit) in ``mode``; its result with the wall time
    of the whole process added (and, with ``profile``, the child's cProfile text under
    "profile"). RuntimeError with the child's output if it failed."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--mode", mode,
           "--rows", str(args.rows), "--cols", str(args.cols), "--dtype", args.dtype,
           "--num-warps", str(args.num_warps), "--kernel", args.kernel] + (["--profile"] if profile else []) \
        + (["--stages"] if stages else []) + [f"--set={s}" for s in args.set]
    env = child_env(kind, mode, cache_dir, getattr(args, "keep_jit_cache", False))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S)
    wall_ms = (time.perf_counter() - start) * 1e3
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(CHILD_TAG)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{kind}/{mode} child failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len(CHILD_TAG):])
    result["process_ms"] = wall_ms
    if profile:
        result["profile"] = "\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith(CHILD_TAG))
    return result


def measure_mode(mode: str, args) -> list[dict]:
    """Median cold and hit rows for one mode (``args.runs`` processes each, after a warm-up)."""
    runs = {"cold": [], "hit": []}
    with tempfile.TemporaryDirectory(prefix="tj-bench-compile-") as root:
        run_child("cold", mode, os.path.join(root, "warmup"), args)      # warms .pyc and disk
        for i in range(args.runs):
            last_dir = os.path.join(root, f"cold{i}")
            runs["cold"].append(run_child("cold", mode, last_dir, args))
        for _ in range(args.runs):
            runs["hit"].append(run_child("hit", mode, last_dir, args))
        if args.profile:         # extra, unrecorded runs: cProfile slows what it watches
            for kind, directory in (("cold", os.path.join(root, "profiled")), ("hit", last_dir)):
                text = run_child(kind, mode, directory, args, profile=True)["profile"].strip()
                print(f"--- cProfile of one {kind} run ({mode} mode), top by cumulative time\n{text}\n")
        if args.stages:          # an extra, unrecorded cold run (its imports happen before the clock)
            result = run_child("cold", mode, os.path.join(root, "staged"), args, stages=True)
            spent = dict(result["stages"])
            if "ptx" in spent:                  # the PTX stage is O3, then NVPTX's instruction selection
                spent["ptx"] -= spent.get("O3", 0.0)
            names = {"ptx": "NVPTX emission"}
            print(f"--- stages of one cold run ({mode} mode; {result['ms']:.1f} ms in all, compiler imported first): "
                  + ", ".join(f"{names.get(stage, stage)} {spent[stage]:.1f}" for stage, _, _ in STAGE_HOOKS
                              if stage in spent) + " ms\n")
    return [summarise(kind, mode, results, args) for kind, results in runs.items()]


def summarise(kind: str, mode: str, results: list[dict], args) -> dict:
    median = statistics.median(r["ms"] for r in results)
    target = COLD_TARGET_MS[args.kernel] if kind == "cold" else TARGET_MS[kind]
    if not all(r.get("ok", True) for r in results):
        status = "WRONG OUTPUT"
    elif not all(r["cache_ok"] for r in results):     # e.g. sources edited between the runs
        status = "NO ENTRY WRITTEN" if kind == "cold" else "CACHE MISSED"
    else:
        status = "ok" if median <= target else "OVER"
    return {"what": WHAT[(mode, kind)], "mode": mode, "kind": kind, "ms": median,
            "min_ms": min(r["ms"] for r in results), "max_ms": max(r["ms"] for r in results),
            "target_ms": target, "vs_target": median / target,
            "status": status,
            "import_ms": statistics.median(r["import_ms"] for r in results),
            "process_ms": statistics.median(r["process_ms"] for r in results),
            "runs": len(results), "details": results}


def record_row(row: dict, args) -> None:
    shape = {"gemm": "GEMM 4096³ 128x256x64 8 warps", "attention": "attention B4 H32 S4096 D128 128x128 8 warps"}
    common.record("compile " + row["kind"], shape.get(args.kernel, f"softmax {args.rows}x{args.cols}"),
                  "bfloat16" if args.kernel != "softmax" else args.dtype,
                  row["ms"], "ms", f"target ≤ {row['target_ms']:g} ms", row["target_ms"],
                  row["vs_target"], what=row["what"], mode=row["mode"], status=row["status"],
                  import_ms=row["import_ms"], process_ms=row["process_ms"], runs=row["runs"],
                  num_warps=args.num_warps)


COLUMNS = [("what", "what", ""), ("ms", "median ms", ".1f"), ("min_ms", "min", ".1f"),
           ("max_ms", "max", ".1f"), ("target_ms", "target ms", ".0f"), ("status", "status", ""),
           ("import_ms", "import ms", ".0f"), ("process_ms", "process ms", ".0f")]


def modes_for(requested: str) -> list[str]:
    if requested == "both":
        return ["cpu", "gpu"]
    if requested == "auto":
        return ["cpu", "gpu"] if common.cuda_torch() is not None else ["cpu"]
    return [requested]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["auto", "cpu", "gpu", "both"], default="auto")
    parser.add_argument("--kernel", choices=["softmax", "gemm", "attention"], default="softmax")
    parser.add_argument("--runs", type=int, default=3, help="processes per measurement")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--num-warps", type=int, default=4)
    parser.add_argument("--profile", action="store_true",
                        help="also profile one cold and one hit run (cProfile, not recorded)")
    parser.add_argument("--stages", action="store_true",
                        help="also time each stage of one cold run (frontend, passes, LLVM, O3, NVPTX, nvJitLink, load)")
    parser.add_argument("--keep-jit-cache", action="store_true",
                        help="cold processes keep the CUDA JIT cache (~/.nv/ComputeCache), which the "
                             "warm-up process fills with this kernel's assembly")
    parser.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                        help="set a compiler switch in every measured process (a Python literal, "
                             "as switch_probe.py takes), e.g. tilejit.codegen.llvm.IR_OPT=1")
    parser.add_argument("--child", choices=["cold", "hit"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    rows, failed = [], False
    for mode in modes_for(args.mode):
        try:
            mode_rows = measure_mode(mode, args)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"bench_compile: {mode} mode FAILED: {err}", file=sys.stderr)
            failed = True
            continue
        for row in mode_rows:
            record_row(row, args)
            failed |= row["status"] not in ("ok", "OVER")
        rows += mode_rows
    what = f"softmax BLOCK={_block(args.cols)} {args.dtype} num_warps={args.num_warps}" \
        if args.kernel == "softmax" else f"{args.kernel} (bf16, 8 warps)"
    what += "".join(f" {s}" for s in args.set)
    common.print_table(rows, COLUMNS, title=f"compile {what} on {common.gpu_name()} "
                       f"(median of {args.runs} new processes each)")
    return 1 if failed else 0


# ------------------------------------------------------------------------------- pytest-benchmark
@pytest.mark.parametrize("mode", ["cpu", "gpu"])
@pytest.mark.parametrize("kind", ["cold", "hit"])
def test_compile_time(benchmark, kind, mode, tmp_path):
    """Wall time of a whole new process (pytest-benchmark) with the in-process compile/launch
    time and the target in extra_info."""
    if mode == "gpu":
        common.require_cuda_torch()
    args = parse_args(["--runs", "1"])
    cache_dir = str(tmp_path / "cache")
    if kind == "hit":
        run_child("cold", mode, cache_dir, args)
    counter = iter(range(1000))

    def one_process():
        directory = cache_dir if kind == "hit" else str(tmp_path / f"cold{next(counter)}")
        return run_child(kind, mode, directory, args)

    result = benchmark.pedantic(one_process, rounds=3, iterations=1, warmup_rounds=1)
    assert result["cache_ok"], f"the {kind} run did not use the cache as expected: {result}"
    benchmark.extra_info.update({"ms": result["ms"], "target_ms": TARGET_MS[kind],
                                 "vs_target": result["ms"] / TARGET_MS[kind],
                                 "import_ms": result["import_ms"], "what": WHAT[(mode, kind)]})


if __name__ == "__main__":
    sys.exit(main())
