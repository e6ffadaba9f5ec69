#!/bin/bash
# GPU: the transposed-A wgmma path and the small-M swap (tests on the H200), then the small-M
# GEMM spelled as the transposed product against the example and cuBLAS
# (scripts/probes/small_m.py), without and with a producer warpgroup, then bench_matmul.py at
# small M with swap_small_dots off and on (scripts/probes/small_m.txt, BENCH_EACH); each step's
# output also kept in $OUT.  If the swap wins: wgmma.TRANSPOSED_A = True, and small-M configs
# in examples/matmul.py.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu tests/test_wgmma_trans_a.py tests/test_swap_small_dots.py \
  tests/test_tma_store.py ${TESTS:-} 2>&1 \
  | tail -4 | tee "$OUT/tests.txt"
for ws in 0 1; do
  echo "== TILEJIT_WS=$ws"
  TILEJIT_WS=$ws TILEJIT_CACHE_DIR=/tmp/tjc_m$ws timeout 200 python3 scripts/probes/small_m.py ${MS:-16 32} 2>&1 \
    | grep -v "Warning\|entry = self" | tee "$OUT/small_m_ws$ws.txt"
done
BENCH_EACH=1 PROBE_SCRIPT=bench_matmul.py PROBE_S=200 LINES_SHOWN=24 bash scripts/gpu_probe.sh scripts/probes/small_m.txt
