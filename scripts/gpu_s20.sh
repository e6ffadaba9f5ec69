#!/bin/bash
# GPU (prepared in session 19, not yet run): decode attention in one launch (run(fused=True): the
# last slice of each head merges) against the two-kernel form, alternating, one process each;
# the GPU tests of decode attention first; then W4A16 with its zero point folded out of the K loop
# (gpu_s19b.sh SIDES="new zfold").  Env: SEQS, CONFIGS, TESTS=0, W4=0 skips the W4A16 A/B.
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
# then W4A16 with the zero point folded out of the loop against the example (scripts/probes/w4_zero_fold.py)
if [ "${W4:-1}" != 0 ]; then
  SIDES="new zfold" ROUNDS=2 W4=1,16 TESTS=0 W4_CONFIGS=${W4_CONFIGS:-16x64x128x4x4,16x64x128x4x8,16x128x128x4x8} \
    bash scripts/gpu_s19b.sh 2>&1 | grep -E "^==|^w4a16 M" | tee -a "$OUT/w4.txt"
  git checkout -q examples/w4a16_gemm.py 2>/dev/null || true
fi
