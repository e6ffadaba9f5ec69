"""``tilejit demo``: compile and run every example kernel on the selected backend, check each
against NumPy (float64) and print a table; the demo fails if any kernel does.

Each example module (``examples/<name>.py``) provides ``run(*inputs, **options)``,
``reference(*inputs, **options)`` and ``example_inputs(rng)``.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilejit import backends
from tilejit.errors import TilejitError
from tilejit.testing import assert_close

# (label, example module, options passed to run/reference, assert_close tolerances)
CASES = [
    ("softmax", "softmax", {}, {}),
    ("layernorm", "layernorm", {}, {"rtol": 1e-4, "atol": 1e-4}),
    ("rmsnorm", "rmsnorm", {}, {"rtol": 1e-4, "atol": 1e-4}),
    ("matmul", "matmul", {}, {"rtol": 1e-4, "atol": 1e-4}),
    ("fp8 matmul", "fp8_matmul", {}, {"rtol": 1e-2, "atol": 1e-2}),
    ("w4a16 gemm", "w4a16_gemm", {}, {"rtol": 1e-2, "atol": 1e-2}),
    ("fp8 blockwise", "fp8_blockwise_gemm", {}, {"rtol": 1e-2, "atol": 1e-2}),
    ("split-K gemm", "split_k_gemm", {}, {"rtol": 1e-3, "atol": 1e-3}),
    ("histogram", "histogram", {}, {}),
    ("embedding bag", "embedding_bag", {}, {"rtol": 1e-5, "atol": 1e-5}),
    ("top-k", "topk", {}, {}),
    ("MoE grouped gemm", "moe_gemm", {}, {"rtol": 1e-3, "atol": 1e-3}),
    ("attention", "attention", {"causal": False}, {}),
    ("attention causal", "attention", {"causal": True}, {}),
    ("attention backward", "attention_backward", {"causal": True}, {"rtol": 2e-3, "atol": 2e-3}),
    ("decode attention", "decode_attention", {"split": 256}, {}),
]


def load_example(name: str):
    """The example module ``name``: installed as ``tilejit.examples`` or next to the package."""
    try:
        return importlib.import_module(f"tilejit.examples.{name}")
    except ImportError:
        pass
    path = Path(__file__).resolve().parent.parent / "examples" / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"example '{name}' not found (looked for {path})")
    module_name = f"tilejit_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    return sys.modules[module_name]


@dataclass
class Result:
    kernel: str
    shape: str
    backend: str
    max_error: float | None
    ok: bool
    first_s: float | None     # compile + run
    warm_s: float | None      # run from the in-memory cache
    problem: str = ""


def run_case(label: str, module: str, options: dict, tolerances: dict, backend: str) -> Result:
    example = load_example(module)
    inputs = example.example_inputs(np.random.default_rng(0))
    shape = ", ".join("x".join(map(str, a.shape)) for a in inputs if isinstance(a, np.ndarray))
    try:
        start = time.perf_counter()
        out = example.run(*inputs, **options)
        first = time.perf_counter() - start
        start = time.perf_counter()
        example.run(*inputs, **options)
        warm = time.perf_counter() - start
    except TilejitError as err:
        return Result(label, shape, backend, None, False, None, None, str(err))
    except Exception as err:          # a compiler bug: report it in the table, keep going
        return Result(label, shape, backend, None, False, None, None, f"{type(err).__name__}: {err}")
    ref = example.reference(*inputs, **options)
    error = float(np.max(np.abs(out.astype(np.float64) - ref)))
    try:
        assert_close(out, ref, **tolerances)
    except AssertionError as err:
        return Result(label, shape, backend, error, False, first, warm, str(err))
    return Result(label, shape, backend, error, True, first, warm)


def _row(cells, widths) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()


def print_table(results: list[Result], file=None) -> None:
    file = file or sys.stdout
    head = ("kernel", "shape", "backend", "max error", "result", "first call", "warm call")
    rows = [(r.kernel, r.shape, r.backend, "-" if r.max_error is None else f"{r.max_error:.2e}",
             "pass" if r.ok else "FAIL", "-" if r.first_s is None else f"{r.first_s * 1e3:.0f} ms",
             "-" if r.warm_s is None else f"{r.warm_s * 1e3:.0f} ms") for r in results]
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    print(_row(head, widths), file=file)
    for row in rows:
        print(_row(row, widths), file=file)
    for r in results:
        if r.problem:
            print(f"\n{r.kernel}: {r.problem}", file=file)


def run_demo(backend: str | None = None, file=None) -> bool:
    """Run every case on ``backend`` (default: the selected one); True when all pass."""
    if backend:
        os.environ["TILEJIT_BACKEND"] = backend
    name = backends.selected()
    results = [run_case(*case, backend=name) for case in CASES]
    print_table(results, file)
    return all(r.ok for r in results)
