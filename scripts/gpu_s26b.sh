#!/bin/bash
# GPU (session 26): programmatic dependent launch (tj.wait_prior_kernels / tj.launch_dependents,
# cuLaunchKernelEx with programmatic stream serialization).  The GPU tests of the mechanism and of
# decode, then decode at KV 8192 / 65536 with the second kernel launched dependently or plainly
# (DECODE_PDL 1 / 0, alternating, two rounds), then both with the L2 flushed by reading
# (BENCH_L2_FLUSH=read: clean lines, no write-back inside the timed run) instead of writing.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_grid_dependency.py \
  tests/test_decode_attention.py 2>&1 | tail -3
cd benchmarks
for round in 1 2; do for pdl in 1 0; do
  echo "-- DECODE_PDL=$pdl round $round"
  DECODE_PDL=$pdl TILEJIT_CACHE_DIR=/tmp/tjc_p$pdl timeout 100 python3 bench_decode.py --seqs 8192,65536 \
    --reps 30 --configs 2048x64x4 2>&1 | grep -vE "^\s*$" | tail -5
done; done
for pdl in 1 0; do
  echo "-- BENCH_L2_FLUSH=read DECODE_PDL=$pdl"
  BENCH_L2_FLUSH=read DECODE_PDL=$pdl TILEJIT_CACHE_DIR=/tmp/tjc_p$pdl timeout 100 python3 bench_decode.py \
    --seqs 8192,65536 --reps 30 --configs 2048x64x4 2>&1 | grep -vE "^\s*$" | tail -5
done
