#!/bin/bash
# GPU (session 35, the budget's last call): pytest -m gpu of tests/test_attention.py (its wgmma
# configs run at 2-3 CTAs an SM now: 64x64x4 D64 at 3, 128x64x8 D64 and 64x64x4 D128 at 2), then
# D64 attention over the benchmark's default tilings against SDPA in the same run.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
cd benchmarks
timeout 60 python3 bench_attention.py --configs 16x16x1024x64 --reps 10 2>&1 | grep -v "^ *$" | tail -4 | tee "$OUT/att.txt"
