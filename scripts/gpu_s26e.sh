#!/bin/bash
# GPU (session 26): attention backward with its three kernels launched dependently (delta
# releases dK/dV, which waits after loading its keys and values; dQ, which needs nothing from
# dK/dV, starts while it runs) or plainly: BWD_PDL 1 / 0 alternating, two rounds; GPU tests first.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention_backward.py 2>&1 | tail -2
cd benchmarks
for r in 1 2; do for p in 1 0; do echo "-- BWD_PDL=$p round $r"
  BWD_PDL=$p TILEJIT_CACHE_DIR=/tmp/tjc_b$p timeout 200 python3 bench_attention_backward.py \
    --configs 16x16x1024x64,4x32x4096x128 --reps 10 --kernel-configs 64x128x8/128x64x8,32x128x8/128x64x8 2>&1 \
    | grep -E "^B[0-9]"
done; done
