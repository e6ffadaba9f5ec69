#!/bin/bash
# GPU (session 30, sixth call): W4A16 at M64 on 128-row tiles, 8 warps (two warpgroups share each
# B tile's dequantisation; half the wgmma rows are past M) against the 64-row, 4-warp default.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd benchmarks
BENCH_EACH=1 timeout 200 python3 bench_quant.py --w4 64 --fp8 "" --reps 30 \
  --w4-configs 64x128x128x4x4,128x128x64x8x4,128x128x128x8x4,128x64x128x8x4,128x128x64x8x2,64x128x128x4x2 \
  2>&1 | grep -E "w4a16|copy" | tee "$OUT/m64.txt"
