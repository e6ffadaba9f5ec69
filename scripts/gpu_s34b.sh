#!/bin/bash
# GPU (session 34): why FlashAttention backward at B16 H16 S1024 D64 causal fell from 109 to 62
# TFLOP/s with P in base 2 (BASE2) while every other config gained 19-33%: each kernel's time
# (ncu gpu__time_duration) with BASE2 on and off, causal and full, then the benchmark again.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for args in "--causal" "--causal --exp" "" "--exp"; do
  echo "-- bwd_kernels 16x16x1024x64 32x128x8/128x64x8 $args"
  TILEJIT_CACHE_DIR=/tmp/tjc_b timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum \
    python3 scripts/probes/bwd_kernels.py 16x16x1024x64 32x128x8/128x64x8 $args 2>&1 \
    | grep -E "^  [A-Za-z_]|gpu__time_duration" | cut -c1-60 | tail -12
done 2>&1 | tee "$OUT/ncu.txt"
cd benchmarks
for base2 in True False True; do
  echo "-- backward BASE2=$base2"
  PROBE_SCRIPT=bench_attention_backward.py timeout 60 python3 switch_probe.py \
    tilejit.examples.attention_backward.BASE2=$base2 -- --reps 10 --configs 16x16x1024x64 \
    --kernel-configs 32x128x8/128x64x8 2>&1 | grep -v "^ *$" | tail -4
done 2>&1 | tee "$OUT/bwd.txt"
