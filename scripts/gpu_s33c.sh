#!/bin/bash
# GPU (session 33, the budget's last minutes): the shortest measure of this session's changes,
# each step written to $OUT as it ends: FlashAttention backward with BASE2 True / False (P in base 2
# against exp(s - lse)) against SDPA flash's backward; attention at B4 H32 S4096 D128 with
# fold_scale.FOLD True / False against SDPA cuDNN.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
for base2 in True False; do
  echo "-- backward BASE2=$base2"
  PROBE_SCRIPT=bench_attention_backward.py timeout 80 python3 switch_probe.py \
    tilejit.examples.attention_backward.BASE2=$base2 -- --reps 5 \
    --kernel-configs 32x128x8/128x64x8 2>&1 | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/bwd.txt"
for on in True False; do
  echo "-- attention FOLD=$on"
  PROBE_SCRIPT=bench_attention.py timeout 60 python3 switch_probe.py tilejit.passes.fold_scale.FOLD=$on -- \
    --configs 4x32x4096x128 --kernel-configs 128x128x8 --reps 10 2>&1 | grep -v "^ *$" | tail -6
done 2>&1 | tee "$OUT/att.txt"
