#!/bin/bash
# GPU (session 32, the budget's last minutes): the shortest measure of session 31-32's attention
# changes, each step written to $OUT as it ends: rotated attention against float64, then
# bench_attention at B4 H32 S4096 D128 with rotate_products.ROTATE True / False, then the
# tutorial-spelled softmax (one FFMA a score, fuse_fma) against the example.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 40 python3 scripts/probes/attention_rotated.py 600 128x128x8 2>&1 | tee "$OUT/check.txt"
for on in True False; do
  echo "-- ROTATE=$on"
  (cd benchmarks && PROBE_SCRIPT=bench_attention.py timeout 60 python3 switch_probe.py \
    tilejit.passes.rotate_products.ROTATE=$on -- --configs 4x32x4096x128 --kernel-configs 128x128x8 --reps 10 2>&1 \
    | grep -v "^ *$" | tail -4)
done 2>&1 | tee "$OUT/att.txt"
timeout 60 python3 scripts/probes/attention_exp2.py bench --reps 10 2>&1 | grep -v "^ *$" | tee "$OUT/exp2.txt"
