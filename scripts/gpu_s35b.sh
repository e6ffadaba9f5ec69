#!/bin/bash
# GPU (session 35): attention at head dim 64 with two or three warp-specialised CTAs an SM
# (specialise_warps.CTAS_PER_SM: each CTA compiled for its share of the register file) against
# one (the default), each against SDPA cuDNN in its run; the tilings that fit: 128x64 (8 warps,
# 96 registers a consumer), 64x128 (4 warps, 216), 64x64 (4 warps, three CTAs: 120); then the
# rotated loop at D64 unrolled by two (wgmma.UNROLL_AHEAD: no copy of S at the back edge).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
ATT="--configs 16x16x1024x64 --reps 10"
ROT="tilejit.passes.rotate_products.ROTATE_MIN_N=64 tilejit.passes.wgmma.UNROLL_AHEAD=True"
for run in "1 128x128x8,128x64x8,64x128x4,64x64x4" "2 128x64x8,64x128x4" "3 64x64x4" \
           "1 128x128x8,64x128x4 $ROT" "2 64x128x4 $ROT"; do
  set -- $run
  echo "-- CTAS_PER_SM=$1 $2 ${*:3}"
  PROBE_SCRIPT=bench_attention.py BENCH_EACH=1 timeout 80 python3 switch_probe.py \
    tilejit.passes.specialise_warps.CTAS_PER_SM=$1 "${@:3}" -- $ATT --kernel-configs $2 2>&1 | grep -v "^ *$" | tail -12
done 2>&1 | tee "$OUT/ctas.txt"
