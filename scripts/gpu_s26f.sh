#!/bin/bash
# GPU (session 26): attention backward with dQ added atomically by the dK/dV kernel (red.global
# of float32; all five DOTs on wgmma at BN = D = 16 * warps) against the separate dQ pass; GPU tests first.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention_backward.py tests/test_atomics.py 2>&1 | tail -2
cd benchmarks
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 300 python3 bench_attention_backward.py --configs 16x16x1024x64,4x32x4096x128 \
  --reps 10 --kernel-configs 64x128x8/128x64x8,32x128x8/128x64x8,64x64x4/atomic,32x64x4/atomic,128x64x4/atomic,64x128x8/atomic,32x128x8/atomic 2>&1 \
  | grep -E "^B[0-9]|  backward"
