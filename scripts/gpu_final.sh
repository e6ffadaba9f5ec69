#!/bin/bash
# GPU: the whole GPU test suite, then the TMA paths (fp8 included) under compute-sanitizer memcheck.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_all timeout ${TEST_S:-280} python3 -m pytest -q -m gpu tests --ignore=tests/test_gpu_autotune.py \
  2>&1 | tail -6 | tee "$OUT/tests.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_san timeout 120 compute-sanitizer --tool memcheck python3 scripts/tma_smoke.py 2>&1 \
  | grep -E "err|SUMMARY" | tee "$OUT/memcheck.txt"
