#!/bin/bash
# GPU: what session 12 built on the CPU only, in one call (about 6 minutes):
#   1. the GPU tests of the float64 math (//, %, sin/cos, atan family, erfc, **), tilejit.torch
#      (CUDA graphs replay), the attention backward (float16 against SDPA) and the packaging;
#   2. bench_attention_backward.py (backward and forward+backward against SDPA flash);
#   3. bench_compile.py --kernel gemm / attention in gpu mode (cold compile to first launch);
#   4. bench_launch.py (the fast path's cheaper Python).
# Each step's output is also kept in $OUT.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_s12 timeout 240 python3 -m pytest -q -m gpu tests/test_float64.py tests/test_float64_math.py \
  tests/test_torch_op.py tests/test_attention_backward.py 2>&1 | tail -6 | tee "$OUT/tests.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_bwd timeout 200 python3 benchmarks/bench_attention_backward.py --reps 10 2>&1 \
  | tail -12 | tee "$OUT/attention_backward.txt"
for kernel in gemm attention; do
  timeout 120 python3 benchmarks/bench_compile.py --mode gpu --runs 2 --kernel $kernel 2>&1 | tail -5 \
    | tee "$OUT/compile_$kernel.txt"
done
timeout 60 python3 benchmarks/bench_launch.py 2>&1 | tail -8 | tee "$OUT/launch.txt"
