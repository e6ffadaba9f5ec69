#!/bin/bash
# GPU (session 30, last): with four CTAs an SM at 16x128x128x4 (the mask register), does a deeper
# ring (4 / 5 slots against the default 3) help W4A16 M1 / M16?
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd benchmarks
for round in 1 2; do
BENCH_EACH=1 timeout 150 python3 bench_quant.py --w4 1,16 --fp8 "" --reps 30 \
  --w4-configs 16x128x128x4x4,16x128x128x4x4x4,16x128x128x4x4x5,16x128x128x4x2,16x128x128x4x2x4 \
  2>&1 | grep -E "w4a16|copy"
done | tee "$OUT/stages.txt"
