#!/bin/bash
# GPU (session 21, sixth call): W4A16 at M 64, wgmma.COMPUTED_B_BUFFERS 1 and 2 at 64x128x128 with
# 3 slots (two buffers: 113 KB, exactly two CTAs in the SM's 228 KB with the 1 KB each the driver
# keeps), split 4 and 2, against the one-buffer default (4 slots), alternating, two rounds.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py
for round in 1 2; do for b in 1 2; do
  echo "== COMPUTED_B_BUFFERS=$b ($round)" | tee -a "$OUT/w4.txt"
  TILEJIT_CACHE_DIR=/tmp/tjc_db timeout 120 python3 benchmarks/switch_probe.py \
    tilejit.passes.wgmma.COMPUTED_B_BUFFERS=$b -- --w4 64 --fp8 '' \
    --w4-configs 64x128x128x4x4,64x128x128x4x4x3,64x128x128x4x2x3 --reps 30 2>&1 \
    | grep -v "Warning\|warn(" | tee -a "$OUT/w4.txt" | grep -E "^w4a16|^  w4a16"
done; done
