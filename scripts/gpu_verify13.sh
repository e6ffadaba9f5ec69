#!/bin/bash
# GPU: session 13's third call, after the fixes of what the first two found:
#   1. scripts/probes/attention_causal.py under the default switches (BM 64 / BN 128 / 4 warps,
#      warp-specialised, read a stale q tile without its proxy fence);
#   2. every GPU test (`pytest -m gpu`, 400 s box, 60 s per test), failures with tracebacks;
#   3. the demo on the cuda backend.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 90 python3 scripts/probes/attention_causal.py - 2>&1 | quiet | tee "$OUT/attention_causal.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 400 python3 -m pytest -q -m gpu -rf --tb=short --timeout=60 --durations=8 -p no:cacheprovider \
  tests 2>&1 | quiet > "$OUT/gpu_tests.txt"; grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/gpu_tests.txt" | head -40
TILEJIT_BACKEND=cuda TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 60 python3 -m tilejit demo 2>&1 | quiet | tail -22 | tee "$OUT/demo.txt"
