#!/bin/bash
# GPU (session 36): TMA stores (plan_stores.TMA_STORES) on the bf16 GEMMs, off / on / off / on in
# one series (session 34 saw -5% / +6% / equal on three shapes, one run each: noise or a rule?),
# then attention D64 / D128 with the switch on (+2-5% in sessions 34 and 36).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd benchmarks
for on in False True False True; do
  echo "-- TMA_STORES=$on"
  PROBE_SCRIPT=bench_matmul.py timeout 60 python3 switch_probe.py tilejit.passes.plan_stores.TMA_STORES=$on -- \
    --shapes 4096x4096x4096,8192x8192x8192,4096x4096x14336 --dtypes bfloat16 --configs 128x256x64x4x8,128x256x64x3x8 \
    --reps 15 2>&1 | grep -v "^ *$" | tail -4
done
