#!/bin/bash
# GPU: the first call of session 13 (about 9 minutes). Sessions 11 and 12 had no GPU, so:
#   1. every GPU test (`pytest -m gpu`, 330 s box) and the demo on the cuda backend;
#   2. bench_attention_backward.py (backward and forward+backward against SDPA flash);
#   3. bench_compile.py --kernel gemm / attention in gpu mode (cold compile to first launch);
#   4. bench_launch.py (tilejit, Triton and raw cuLaunchKernel in one run).
# Each step's output is also kept in $OUT.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TJ_BUDGET_S=400 TJ_TESTS_S=330 OUT=$OUT bash scripts/gpu_check.sh tests,demo 2>&1 | tail -40
TILEJIT_CACHE_DIR=/tmp/tjc_bwd timeout 90 python3 benchmarks/bench_attention_backward.py --reps 10 2>&1 \
  | tail -12 | tee "$OUT/attention_backward.txt"
for kernel in gemm attention; do
  timeout 40 python3 benchmarks/bench_compile.py --mode gpu --runs 2 --kernel $kernel 2>&1 | tail -5 \
    | tee "$OUT/compile_$kernel.txt"
done
timeout 30 python3 benchmarks/bench_launch.py 2>&1 | tail -8 | tee "$OUT/launch.txt"
