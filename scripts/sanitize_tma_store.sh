#!/bin/bash
# GPU: compute-sanitizer (memcheck, racecheck for shared memory) on GEMMs whose epilogue is a TMA
# store (TILEJIT_TMA_STORE=1), ragged (1000^3 with 128x256 tiles), with and without a producer
# warpgroup (host API errors, cuda-python probing cuGetProcAddress, not counted).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TILEJIT_TMA_STORE=1
for ws in 0 1; do
  for tool in memcheck racecheck; do
    echo "== $tool, TILEJIT_WS=$ws: GEMM 1000^3 128x256x64x4x8, TMA store"
    TILEJIT_WS=$ws TILEJIT_CACHE_DIR=/tmp/tjc_ts$ws timeout 120 compute-sanitizer --tool $tool --report-api-errors no \
      python3 benchmarks/profile_one.py matmul --size 1000 --config 128x256x64x4x8 2>&1 \
      | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" | head -5
  done
done
