#!/bin/bash
# GPU: W4A16 (bench_quant.py --w4) under two sets of compiler switches, alternating, fresh caches, one
# process each.  Usage: A="mod.NAME=value ..." B="mod.NAME=value ..." bash scripts/gpu_w4_ab.sh
# (switch_probe.py sets them; "" for none).  Env: W4 (M list), W4_CONFIGS, ROUNDS, REPS, TESTS
# (pytest files run under -m gpu first).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "$TESTS" ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider $TESTS > "$OUT/tests.txt" 2>&1
  tail -5 "$OUT/tests.txt"
fi
CFG=${W4_CONFIGS:-16x64x128x4x4,16x64x128x4x8,16x128x128x4x8,64x64x128x4x8,64x128x64x4x1}
for round in $(seq ${ROUNDS:-2}); do
  for side in A B; do
    sw=$A; [ $side = B ] && sw=$B
    echo "== $side ($round): $sw" | tee -a "$OUT/w4.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_w4_$side timeout ${BENCH_S:-200} python3 benchmarks/switch_probe.py $sw -- \
      --w4 ${W4:-1,16,64} --fp8 '' --w4-configs $CFG --reps ${REPS:-30} 2>&1 | grep -v "Warning\|warn(" \
      | tee -a "$OUT/w4.txt" | grep -E "^w4a16|^  w4a16" | tail -${TAIL:-12}
  done
done
