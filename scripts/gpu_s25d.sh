#!/bin/bash
# GPU (session 25, not yet run): decode attention at KV 8192 / 65536 with the second kernel reading
# every slice at once (DECODE_GATHER_COMBINE=1, decode_combine_gather_kernel) against the loop,
# alternating, two rounds; ncu of both second kernels; pytest -m gpu of decode attention first.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_decode_attention.py 2>&1 | tail -2
cd benchmarks
for g in 0 1 0 1; do echo "-- DECODE_GATHER_COMBINE=$g"
  DECODE_GATHER_COMBINE=$g TILEJIT_CACHE_DIR=/tmp/tjc_g timeout 100 python3 bench_decode.py --seqs 8192,65536 --reps 30 \
    --configs 2048x64x4,4096x128x4 2>&1 | grep -E "^\| *[0-9]" | tail -2
done
for g in 0 1; do
  DECODE_GATHER_COMBINE=$g TILEJIT_CACHE_DIR=/tmp/tjc_g timeout 100 ncu --clock-control none -k regex:combine -c 1 \
    --metrics gpu__time_duration.sum python3 bench_decode.py --seqs 8192 --configs 2048x64x4 --reps 1 2>&1 \
    | grep -E "combine|gpu__time" | head -2
done
