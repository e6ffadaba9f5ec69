#!/bin/bash
# GPU (session 35, third call): attention at head dim 64 with the CTA wishes (the default), adding
# in turn the output through TMA (plan_stores.TMA_STORES) and the consumers' ping-pong
# (specialise_warps.PINGPONG), each against SDPA cuDNN in its run; then the backward at D64 with
# the torch op's tiles (unchanged by the wishes: their shared memory fits one CTA) as a check.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
for flags in "tilejit.passes.plan_stores.TMA_STORES=True" "tilejit.passes.specialise_warps.PINGPONG=True" \
             "tilejit.passes.specialise_warps.CTAS_PER_SM=3"; do
  echo "-- attention D64 $flags"
  PROBE_SCRIPT=bench_attention.py timeout 90 python3 switch_probe.py $flags -- --configs 16x16x1024x64 --reps 10 \
    --kernel-configs 128x64x8,64x64x4,64x128x4 2>&1 | grep -v "^ *$" | tail -3
done 2>&1 | tee "$OUT/d64.txt"
cd ..
echo "-- ncu D64 128x64x8 (2 CTAs an SM) full" | tee "$OUT/ncu.txt"
bash scripts/ncu_profile.sh attention attention --shape 16x16x1024x64 --config 128x64x8 2>&1 | tail -40 | tee -a "$OUT/ncu.txt"
