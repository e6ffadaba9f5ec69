#!/bin/bash
# GPU: the transposed-A wgmma path (tests on the H200), then the small-M GEMM spelled as the
# transposed product against the example and cuBLAS (scripts/probes/small_m.py), without and
# with a producer warpgroup; each step's output also kept in $OUT.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu tests/test_wgmma_trans_a.py ${TESTS:-} 2>&1 \
  | tail -4 | tee "$OUT/tests.txt"
for ws in 0 1; do
  echo "== TILEJIT_WS=$ws"
  TILEJIT_WS=$ws TILEJIT_CACHE_DIR=/tmp/tjc_m$ws timeout 200 python3 scripts/probes/small_m.py ${MS:-16 32} 2>&1 \
    | grep -v "Warning\|entry = self" | tee "$OUT/small_m_ws$ws.txt"
done
