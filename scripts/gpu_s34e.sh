#!/bin/bash
# GPU (session 34, last call): the GPU tests of this session's changes (the rotated attention with
# its last-trip skip, now on by default at D128; the torch op's backward tiles; fold_scale,
# fuse_fma), then attention with the new defaults against SDPA in the same run.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_attention_backward.py tests/test_fold_scale.py tests/test_fuse_fma.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
cd benchmarks
timeout 60 python3 bench_attention.py --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 10 \
  2>&1 | grep -v "^ *$" | tail -6 | tee "$OUT/att.txt"
