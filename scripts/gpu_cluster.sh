#!/bin/bash
# GPU: rows split over a thread-block cluster (cluster_rows): the GPU tests, the sweep with
# clusters (the default) and without (TILEJIT_CLUSTER=0) in one call, and compute-sanitizer.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-150} python3 -m pytest -q -x -m gpu tests/test_cluster_rows.py 2>&1 \
  | tail -6 | tee "$OUT/tests.txt"
COLS=${COLS:-16384,32768,65536}
for c in ${MODES:-1 0}; do
  echo "== TILEJIT_CLUSTER=$c" | tee -a "$OUT/sweep.txt"
  TILEJIT_CLUSTER=$c TILEJIT_CACHE_DIR=/tmp/tjc_c$c timeout ${SWEEP_S:-200} python3 benchmarks/bench_sweep.py \
    --columns $COLS --dtypes ${DTYPES:-bfloat16,float32} --kernels ${KERNELS:-softmax,layernorm,rmsnorm} \
    --reps ${REPS:-10} 2>&1 | quiet | tee -a "$OUT/sweep.txt"
done
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
  echo "== $tool" | tee -a "$OUT/sanitize.txt"
  TILEJIT_CACHE_DIR=/tmp/tjc_s timeout 100 compute-sanitizer --tool $tool python3 scripts/cluster_smoke.py \
    2>&1 | grep -E "max err|SUMMARY|rror" | head -16 | tee -a "$OUT/sanitize.txt"
done
