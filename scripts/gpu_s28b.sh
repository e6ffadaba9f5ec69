#!/bin/bash
# GPU (session 28): W4A16 at M64: the default (wgmma, the dequantised B stored into its shared
# atoms) against mma.sync with B from the nibbles (TILEJIT_WGMMA=0), alternating, two rounds;
# then ncu of the M1 nibble kernel (one launch) for its instruction count and stalls.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
M64=${M64:-64x128x128x4x4,64x128x128x4x2,64x256x128x8x2,64x128x64x4x4}
for round in 1 2; do
  for wg in 1 0; do
    echo "-- round $round TILEJIT_WGMMA=$wg"
    BENCH_EACH=1 TILEJIT_WGMMA=$wg TILEJIT_CACHE_DIR=/tmp/tjc_m64_$wg timeout 120 python3 bench_quant.py \
      --w4 64 --fp8 "" --reps 30 --w4-configs $M64 2>&1 | grep -E "w4a16|copy"
  done
done
