#!/bin/bash
# GPU (session 21, fifth call): W4A16 at M 64 with wgmma.COMPUTED_B_BUFFERS 1 and 2 at BK 64
# (two buffers of a 64x128 B and 4 slots of A: 66.5 KB and 195 registers, two CTAs an SM with a
# group in flight) against the one-buffer bests at BK 128, alternating, two rounds.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py
for round in 1 2; do for b in 1 2; do
  echo "== COMPUTED_B_BUFFERS=$b ($round)" | tee -a "$OUT/w4.txt"
  TILEJIT_CACHE_DIR=/tmp/tjc_db timeout 150 python3 benchmarks/switch_probe.py \
    tilejit.passes.wgmma.COMPUTED_B_BUFFERS=$b -- --w4 64 --fp8 '' \
    --w4-configs 64x128x128x4x4,64x128x128x4x2,64x128x64x4x4,64x128x64x4x2,64x128x64x4x8 --reps 30 2>&1 \
    | grep -v "Warning\|warn(" | tee -a "$OUT/w4.txt" | grep -E "^w4a16|^  w4a16"
done; done
