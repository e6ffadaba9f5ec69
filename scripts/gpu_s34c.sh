#!/bin/bash
# GPU (session 34, second call): (1) attention with rotate_products.ROTATE off / on, the next
# block's QK^T now skipped on the last trip (passes.wgmma.ahead_guard: a branch around its
# wgmmas; before, one product a row was extra work: -7% at D64 S1024), each against SDPA cuDNN
# in its run, then with specialise_warps.PINGPONG too, then the output through TMA
# (plan_stores.TMA_STORES) without rotation; (2) D64 tiles; (3) why the backward at B16 H16
# S1024 D64 causal fell from 109 to 62 TFLOP/s with P in base 2: each kernel's time under ncu
# with BASE2 on / off; (4) backward D64 tiles (dK/dV 64 query rows an iteration).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 10"
for flags in "rotate_products.ROTATE=False" "rotate_products.ROTATE=True" \
             "rotate_products.ROTATE=True tilejit.passes.specialise_warps.PINGPONG=True" \
             "plan_stores.TMA_STORES=True"; do
  echo "-- attention $flags"
  PROBE_SCRIPT=bench_attention.py timeout 60 python3 switch_probe.py tilejit.passes.$flags -- \
    $ATT 2>&1 | grep -v "^ *$" | tail -6
done 2>&1 | tee "$OUT/att.txt"
echo "-- attention D64 tiles (256x64x16: four consumer warpgroups, 96 registers, no spills)"
BENCH_EACH=1 timeout 60 python3 bench_attention.py --configs 16x16x1024x64 --reps 12 \
  --kernel-configs 128x128x8,256x64x16,128x64x8 2>&1 | grep -v "^ *$" | tail -9 | tee "$OUT/d64.txt"
cd ..
for args in "--causal" "--causal --exp"; do
  echo "-- ncu bwd_kernels 16x16x1024x64 32x128x8/128x64x8 $args"
  TILEJIT_CACHE_DIR=/tmp/tjc_b timeout 75 ncu --clock-control none --metrics gpu__time_duration.sum \
    python3 scripts/probes/bwd_kernels.py 16x16x1024x64 32x128x8/128x64x8 $args 2>&1 \
    | grep -E "^  [A-Za-z_]|gpu__time_duration" | cut -c1-70 | tail -12
done 2>&1 | tee "$OUT/ncu.txt"
echo "-- backward D64 tiles" | tee "$OUT/bwd64.txt"
cd benchmarks
BENCH_EACH=1 timeout 75 python3 bench_attention_backward.py --configs 16x16x1024x64 --reps 8 \
  --kernel-configs 32x128x8/128x64x8,64x128x8/128x64x8,64x128x8/128x128x8,64x64x4/128x64x8 2>&1 \
  | grep -v "^ *$" | tail -14 | tee -a "$OUT/bwd64.txt"
