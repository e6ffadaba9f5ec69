#!/bin/bash
# GPU: one call that checks and measures a session's changes, each step's output also kept in
# $OUT (so a call cut short still returns what ran): the GPU tests of the code paths touched
# (decode attention contiguous and paged, fp8 attention, fp8 blockwise GEMM, 4-bit packing, the
# persistent GEMM), then the fp8 blockwise GEMM against torch._scaled_mm and the paged decode
# kernel against SDPA.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TILEJIT_CACHE_DIR=/tmp/tjc_session
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 200 python3 -m pytest -q -m gpu tests/test_decode_attention.py tests/test_fp8_attention.py \
  tests/test_dot_scaled.py tests/test_packed4.py tests/test_persist_tiles.py ${TESTS:-} 2>&1 | tail -5 | tee "$OUT/tests.txt"
cd benchmarks
BENCH_EACH=1 timeout 150 python3 bench_quant.py --w4 , --fp8 4096,8192 --reps 20 2>&1 | quiet | tee "$OUT/fp8.txt"
timeout 100 python3 bench_decode.py --page 64 --configs 1024x64x4,2048x64x4,1024x64x8 --reps 20 2>&1 | quiet \
  | tee "$OUT/paged.txt"
