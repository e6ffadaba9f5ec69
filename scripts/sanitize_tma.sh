#!/bin/bash
# GPU: the TMA paths under compute-sanitizer (memcheck, racecheck, synccheck), plain and
# warp-specialised, and the GPU tests of the files that cover them.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 240 python3 -m pytest -q -m gpu tests/test_attention.py tests/test_wgmma.py \
  tests/test_tma.py tests/test_gpu_kernels.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
for ws in 0 1; do
  for tool in memcheck racecheck synccheck; do
    echo "== WS=$ws $tool" | tee -a "$OUT/sanitize.txt"
    TILEJIT_WS=$ws TILEJIT_CACHE_DIR=/tmp/tjc_s$ws timeout 100 compute-sanitizer --tool $tool python3 scripts/tma_smoke.py \
      2>&1 | grep -E "max err|SUMMARY|rror" | head -12 | tee -a "$OUT/sanitize.txt"
  done
done
