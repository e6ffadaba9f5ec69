"""Fused row softmax (``examples/softmax.py``) on torch CUDA tensors (zero copy), against
``torch.softmax`` and the device copy bandwidth (torch ``copy_`` of an equal-size tensor)
measured in the same run. Target: tilejit ≥ 0.90× copy bandwidth on all four cases.

    python3 benchmarks/bench_softmax.py [--shapes 32768x1024,8192x8192] [--dtypes float32,bfloat16]
                                        [--num-warps 8,16] [--reps 100] [--warmup 10]
    python3 -m pytest benchmarks/bench_softmax.py --benchmark-only

Every output is checked before it is timed (poisoned with NaN, launched, compared with
torch.softmax in float32 by ‖out − ref‖ / ‖ref‖) and checked again after the timed runs, each
check on fresh random inputs. Bytes moved: the input read once and the output written once.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass

import pytest

import common
import tilejit as tj

SHAPES = [(32768, 1024), (8192, 8192)]
DTYPES = ["float32", "float16", "bfloat16"]
TARGET_VS_COPY = 0.90
# ‖out − ref‖ / ‖ref‖ bounds (METHOD.md): float32 arithmetic lands far below 1e-4; a bf16 output
# rounds each element by ≤ 2⁻⁹ relative
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}


def default_num_warps(cols: int) -> None:
    """None: the launch gives no ``num_warps`` and the compiler picks (``passes.warps``)."""
    return None


@dataclass
class SoftmaxCase:
    rows: int
    cols: int
    dtype: str
    num_warps: int | None                 # None: the compiler's choice

    @property
    def shape(self) -> str:
        return f"{self.rows}x{self.cols}"


class SoftmaxBench:
    """The tensors and launches of one case: tilejit, torch.softmax and the copy reference."""

    def __init__(self, torch, case: SoftmaxCase, seed: int = 0):
        self.torch, self.case = torch, case
        dtype = getattr(torch, case.dtype)
        self.kernel = common.load_example("softmax").softmax_kernel
        self.block = tj.next_power_of_2(case.cols)
        self.x = common.random_tensor(torch, (case.rows, case.cols), dtype, seed, scale=2.0)
        self.y = torch.empty_like(self.x)
        self.copy_src = common.random_tensor(torch, (case.rows, case.cols), dtype, seed + 1)
        self.copy_dst = torch.empty_like(self.copy_src)
        self.nbytes = 2 * self.x.numel() * self.x.element_size()     # read x + write y
        self.seed = seed

    def launch(self) -> None:
        self.kernel[(self.case.rows,)](self.x, self.y, BLOCK=self.block, num_warps=self.case.num_warps)

    def poison(self) -> None:
        self.y.fill_(float("nan"))

    def torch_softmax(self):
        return self.torch.softmax(self.x, dim=-1)

    def copy(self):
        return self.copy_dst.copy_(self.copy_src)

    def poison_copy(self) -> None:
        self.copy_dst.fill_(float("nan"))

    def check(self, fresh_seed: int | None) -> float:
        """Relative error of the kernel's output on fresh inputs (``fresh_seed``) or, with None, of
        the output left by the last launch; AssertionError if too large or not fully written."""
        torch = self.torch
        if fresh_seed is not None:
            self.x.copy_(common.random_tensor(torch, self.x.shape, self.x.dtype, fresh_seed, scale=2.0))
            self.poison()
            self.launch()
        torch.cuda.synchronize()
        unwritten = int(torch.isnan(self.y).sum())
        assert unwritten == 0, f"{unwritten} of {self.y.numel()} outputs were not written"
        error = common.relative_error(torch, self.y.float(), torch.softmax(self.x.float(), dim=-1))
        limit = TOLERANCE[self.case.dtype]
        assert error <= limit, f"relative error {error:.3g} over {limit:g} ({self.case})"
        return error

    def measure(self, warmup: int, reps: int) -> dict:
        """Check, time all three, check again; one result row with GB/s and ratios."""
        error = self.check(fresh_seed=self.seed + 100)
        self.x.copy_(common.random_tensor(self.torch, self.x.shape, self.x.dtype, self.seed, scale=2.0))
        tilejit = common.time_cuda(self.launch, setup=self.poison, warmup=warmup, reps=reps)
        self.check(fresh_seed=None)         # the timed launches wrote every element correctly
        torch_t = common.time_cuda(self.torch_softmax, warmup=warmup, reps=reps)
        copy_t = common.time_cuda(self.copy, setup=self.poison_copy, warmup=warmup, reps=reps)
        tj_gbps, torch_gbps, copy_gbps = (t.gbps(self.nbytes) for t in (tilejit, torch_t, copy_t))
        warps = self.case.num_warps or f"auto {self.kernel.inspect(self.x, self.y, BLOCK=self.block).num_warps}"
        return {"shape": self.case.shape, "dtype": self.case.dtype, "num_warps": warps,
                "tilejit_ms": tilejit.median_ms, "tilejit_GBps": tj_gbps, "torch_GBps": torch_gbps,
                "copy_GBps": copy_gbps, "vs_copy": tj_gbps / copy_gbps, "vs_torch": tj_gbps / torch_gbps,
                "rel_error": error, "target_met": tj_gbps / copy_gbps >= TARGET_VS_COPY}


def record_result(result: dict) -> None:
    """Two JSON-lines records per case: tilejit against the copy, and against torch."""
    for ref, key in (("torch copy_ (same run)", "copy_GBps"), ("torch.softmax (same run)", "torch_GBps")):
        common.record("softmax", result["shape"], result["dtype"], result["tilejit_GBps"], "GB/s",
                      ref, result[key], result["tilejit_GBps"] / result[key],
                      num_warps=result["num_warps"], rel_error=result["rel_error"],
                      tilejit_ms=result["tilejit_ms"])


COLUMNS = [("shape", "shape", ""), ("dtype", "dtype", ""), ("num_warps", "warps", ""),
           ("tilejit_GBps", "tilejit GB/s", ".0f"), ("torch_GBps", "torch GB/s", ".0f"),
           ("copy_GBps", "copy GB/s", ".0f"), ("vs_copy", "tj/copy", ".3f"),
           ("vs_torch", "tj/torch", ".3f"), ("rel_error", "rel err", ".1e"), ("status", "≥0.90×copy", "")]


# ------------------------------------------------------------------------------------------ script
def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(f"{r}x{c}" for r, c in SHAPES),
                        help="comma-separated ROWSxCOLS")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated torch dtype names")
    parser.add_argument("--num-warps", default="",
                        help="comma-separated warp counts to try (default: by row length)")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    return parser.parse_args(argv)


def cases_from_args(args) -> list[SoftmaxCase]:
    shapes = [tuple(int(n) for n in s.lower().split("x")) for s in args.shapes.split(",") if s]
    warps = [int(w) for w in args.num_warps.split(",") if w]
    return [SoftmaxCase(rows, cols, dtype, nw)
            for rows, cols in shapes for dtype in args.dtypes.split(",") if dtype
            for nw in (warps or [default_num_warps(cols)])]


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_softmax: skipped (needs torch with a CUDA GPU)")
        return 0
    rows, failures = [], 0
    for case in cases_from_args(args):
        try:
            result = SoftmaxBench(torch, case).measure(args.warmup, args.reps)
        except Exception as err:            # report the case and go on with the others
            failures += 1
            traceback.print_exc()
            print(f"bench_softmax: {case} FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            rows.append({"shape": case.shape, "dtype": case.dtype, "num_warps": case.num_warps,
                         "status": "FAILED"})
            continue
        result["status"] = "yes" if result["target_met"] else "NO"
        record_result(result)
        rows.append(result)
    common.print_table(rows, COLUMNS, title=f"softmax on {common.gpu_name()} "
                       f"(CUDA events, median of {args.reps}, L2 flushed; GB/s = read + write)")
    return 1 if failures else 0


# ------------------------------------------------------------------------------- pytest-benchmark
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_softmax_bandwidth(benchmark, shape, dtype):
    torch = common.require_cuda_torch()
    case = SoftmaxCase(shape[0], shape[1], dtype, default_num_warps(shape[1]))
    bench = SoftmaxBench(torch, case)
    result = bench.measure(warmup=10, reps=100)
    record_result(result)
    benchmark.extra_info.update({k: v for k, v in result.items() if k != "target_met"})

    def synced_launch():
        bench.launch()
        torch.cuda.synchronize()

    def poisoned():                     # pedantic's setup must return None (or args, kwargs)
        bench.poison()
        torch.cuda.synchronize()

    benchmark.pedantic(synced_launch, setup=poisoned, rounds=30, warmup_rounds=3)
    bench.check(fresh_seed=None)


if __name__ == "__main__":
    sys.exit(main())
