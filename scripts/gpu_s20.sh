#!/bin/bash
# GPU (session 20, run on an H100; benchmarks/README.md): decode attention in one launch (run(fused=True): the
# last slice of each head merges) against the two-kernel form, alternating, one process each;
# the GPU tests of decode attention, w4a16 and atomics first.  (Its W4A16 A/B of the zero point
# folded out of the K loop ran once and was dropped with its probe.)  Env: SEQS, CONFIGS, TESTS=0.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" != 0 ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-200} python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
    tests/test_decode_attention.py tests/test_w4a16.py tests/test_atomics.py > "$OUT/tests.txt" 2>&1
  tail -12 "$OUT/tests.txt"
fi
for round in 1 2; do
  for mode in fused two; do
    flag=""; [ $mode = fused ] && flag="--fused"
    echo "== $mode ($round)" | tee -a "$OUT/decode.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_d_$mode timeout 200 python3 benchmarks/bench_decode.py --seqs ${SEQS:-8192,65536} \
      ${CONFIGS:+--configs $CONFIGS} --reps 30 $flag 2>&1 | grep -v "Warning\|warn(" | tail -8 | tee -a "$OUT/decode.txt"
  done
done
