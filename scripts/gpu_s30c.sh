#!/bin/bash
# GPU (session 30, third call): with the nibble mask in a register (105 registers at 16x128x128x4,
# four CTAs an SM), W4A16 M1 / M16 over more K slices and tiles: does a fuller grid help now?
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd benchmarks
BENCH_EACH=1 timeout 200 python3 bench_quant.py --w4 1,16 --fp8 "" --reps 30 \
  --w4-configs 16x128x128x4x2,16x128x128x4x4,16x128x128x4x6,16x128x128x4x8,16x128x64x4x4,16x128x64x4x8,16x256x128x8x4,16x256x128x8x2 \
  2>&1 | grep -E "w4a16|copy" | tee "$OUT/sweep.txt"
