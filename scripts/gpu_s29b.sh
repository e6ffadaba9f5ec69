#!/bin/bash
# GPU (session 29, second call): W4A16 M1 / M16 with the zero-point row loaded an iteration ahead
# (prefetch_loads.PREFETCH_DEQUANTISED=True; B still from the nibbles, 119 registers, 3 CTAs an SM)
# against the default, alternating twice; then ncu of M1 N 8192 with it on.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
for round in 1 2; do
  for flag in False True; do
    echo "-- round $round PREFETCH_DEQUANTISED=$flag"
    BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 120 python3 switch_probe.py \
      "tilejit.passes.prefetch_loads.PREFETCH_DEQUANTISED=$flag" -- --w4 1,16 --fp8 "" --reps 30 \
      --w4-configs 16x128x128x4x4,16x128x128x4x2,16x256x128x8x4,16x128x64x4x4 2>&1 | grep -E "w4a16|copy"
  done
done
cd ..
export PROBE_SCRIPT=profile_one.py
sed -i 's#python3 benchmarks/profile_one.py#python3 benchmarks/switch_probe.py tilejit.passes.prefetch_loads.PREFETCH_DEQUANTISED=True --#' scripts/ncu_profile.sh
bash scripts/ncu_profile.sh w4a16 w4a16 --size 8192 --split 4 --config 16x128x128x4 2>&1 | head -40
