#!/bin/bash
# GPU: session 14's fourth call: the histogram example counting privately per program (and the
# barrier after a cp.async ring whose bytes a later buffer reuses), against torch.bincount.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 120 python3 -m pytest -q -m gpu tests/test_ring_barriers.py tests/test_gathers.py \
  tests/test_scans.py 2>&1 | tail -2 | tee "$OUT/tests.txt"
(cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 120 python3 bench_language.py --reps 20 2>&1 \
  | grep -v "Warning\|entry = self" | tail -9 | tee "$OUT/language.txt")
