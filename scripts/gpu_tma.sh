#!/bin/bash
# GPU: the TMA-filled wgmma rings (#14): their GPU tests, then GEMM and attention with each
# way of filling the rings against cuBLAS / SDPA in the same process each.  MODES lists them:
# "tma" (the default), "ws" (TILEJIT_WS=1: a producer warpgroup), "cp" (TILEJIT_TMA=0).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_tests timeout ${TEST_S:-200} python3 -m pytest -q -x -m gpu tests/test_tma.py tests/test_tensormap.py \
  tests/test_wgmma.py tests/test_attention.py tests/test_fp8_dot.py 2>&1 | tail -15 | tee "$OUT/tests.txt"
cd benchmarks
TILEJIT_CACHE_DIR=/tmp/tjc_fp8 timeout 100 python3 bench_fp8.py --reps 20 2>&1 | grep -v "Warning\|entry = self" | tee "$OUT/fp8.txt"
CFG=${CFG:-128x256x64x4x8,128x128x64x4x8,64x256x64x4x4,64x128x64x4x4}
SHAPES=${SHAPES:-1024x1024x1024,4096x4096x4096,8192x8192x8192}
env_for() { case $1 in tma) echo "TILEJIT_TMA=1 TILEJIT_WS=0";; ws) echo "TILEJIT_TMA=1 TILEJIT_WS=1";; cp) echo "TILEJIT_TMA=0 TILEJIT_WS=0";; esac; }
for mode in ${MODES:-tma ws}; do
  echo "== $mode" | tee -a "$OUT/gemm.txt"
  env $(env_for $mode) TILEJIT_CACHE_DIR=/tmp/tjc_$mode timeout 150 python3 bench_matmul.py --dtypes bfloat16 \
    --shapes $SHAPES --configs $CFG --reps 20 2>&1 | quiet | tee -a "$OUT/gemm.txt"
done
for mode in ${MODES:-tma ws}; do
  echo "== $mode" | tee -a "$OUT/attention.txt"
  env $(env_for $mode) TILEJIT_CACHE_DIR=/tmp/tjc_$mode timeout 100 python3 bench_attention.py --configs 4x32x4096x128 \
    --reps 10 2>&1 | quiet | tee -a "$OUT/attention.txt"
done
