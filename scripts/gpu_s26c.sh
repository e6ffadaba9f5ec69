#!/bin/bash
# GPU (session 26): the fp8 blockwise GEMM with persistent tiles (specialise_warps.PERSIST_TILES:
# 132 CTAs looping over the tiles, the producer filling the next tile's slots during the
# epilogue; never timed on fp8) off / on alternating, two rounds; then decode at KV 65536 over
# larger slices and 8 warps (the L2 flushed by reading, the new default).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
for sw in "" "tilejit.passes.specialise_warps.PERSIST_TILES=True" "" "tilejit.passes.specialise_warps.PERSIST_TILES=True"; do
  echo "-- ${sw:-defaults}"
  TILEJIT_CACHE_DIR=/tmp/tjc_pt PROBE_SCRIPT=bench_quant.py timeout 120 python3 switch_probe.py $sw -- --w4 "" \
    --fp8 4096,8192 --reps 30 --fp8-configs 128x128x128x8:nk 2>&1 | grep -E "^fp8"
done
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 200 python3 bench_decode.py --seqs 65536,8192 --reps 30 \
  --configs 8192x128x4,4096x128x4,16384x128x4,8192x128x8,8192x64x4,4096x64x4 2>&1 | grep -vE "^\s*$" | tail -16
