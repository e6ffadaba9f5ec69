#!/bin/bash
# GPU (written in session 25 for the next; not yet run): session 25's changes on the card the
# targets name (the H200; session 25 got only H100s).  pytest -m gpu of the changed areas, then
# W4A16 (tiled weights, the new default of bench_quant, against row-major), fp8 blockwise and
# decode attention (the gathered second kernel, the default up to 32 slices) against their references;
# then tiled W4A16 with DOT_LOOP_ROW_RINGS off / on.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_dot_scaled.py tests/test_w4a16.py \
  tests/test_decode_attention.py tests/test_branch_free_loads.py 2>&1 | tail -2
cd benchmarks
for t in 1 0; do echo "-- W4_TILED=$t"
  W4_TILED=$t TILEJIT_CACHE_DIR=/tmp/tjc_t$t timeout 140 python3 bench_quant.py --w4 1,16,64 --fp8 "" --reps 30 \
    --w4-configs 16x64x128x4x5,16x64x128x4x4,16x128x128x4x8,64x128x128x4x4,64x128x128x4x2 2>&1 | grep -E "^w4a16|copy"
done
TILEJIT_CACHE_DIR=/tmp/tjc_f timeout 120 python3 bench_quant.py --w4 "" --fp8 4096,8192 --reps 30 \
  --fp8-configs 128x128x128x8:nk,128x128x128x8x4:nk 2>&1 | grep -E "^fp8"
TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 120 python3 bench_decode.py --seqs 8192,65536 --reps 30 \
  --configs 2048x64x4,4096x128x4,1024x64x4 2>&1 | tail -5
echo "== W4A16 M1 tiled: the weights' contiguous tiles through thread-private cp.async rings (row_rings.DOT_LOOP_ROW_RINGS, slower on row-major weights in session 20) off / on"
for sw in "" "tilejit.passes.row_rings.DOT_LOOP_ROW_RINGS=True" "" "tilejit.passes.row_rings.DOT_LOOP_ROW_RINGS=True"; do
  echo "-- ${sw:-defaults}"
  TILEJIT_CACHE_DIR=/tmp/tjc_rr PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py $sw -- --w4 1 --fp8 "" \
    --reps 30 --w4-configs 16x64x128x4x5,16x64x128x4x4,16x128x128x4x8 2>&1 | grep -E "^w4a16"
done
