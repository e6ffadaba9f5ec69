#!/bin/bash
# GPU (session 28, second call): the GPU tests of the nibble path; W4A16 M1 / M16 with B from the
# nibbles at 3 (default), 4 and 5 ring slots and split 2 / 4; ncu of M1 N = K = 8192 16x128x128x4
# split 4; then M64: wgmma (default) against mma.sync with B from the nibbles (TILEJIT_WGMMA=0).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nibble_operands.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_packed4.py 2>&1 | tail -3
bash scripts/ncu_profile.sh w4a16 w4a16 --size 8192 --split 4 --config 16x128x128x4 2>&1 | head -60
cd benchmarks
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_st timeout 120 python3 bench_quant.py --w4 1,16 --fp8 "" --reps 30 \
  --w4-configs 16x128x128x4x4,16x128x128x4x4x4,16x128x128x4x4x5,16x128x128x4x2,16x128x128x4x2x4,16x128x64x4x4x4 2>&1 | grep -E "w4a16|copy"
for wg in 1 0; do
  echo "-- M64 TILEJIT_WGMMA=$wg"
  BENCH_EACH=1 TILEJIT_WGMMA=$wg TILEJIT_CACHE_DIR=/tmp/tjc_m64_$wg timeout 100 python3 bench_quant.py \
    --w4 64 --fp8 "" --reps 30 --w4-configs 64x128x128x4x4,64x128x128x4x2,64x256x128x8x2 2>&1 | grep -E "w4a16|copy"
done
