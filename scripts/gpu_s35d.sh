#!/bin/bash
# GPU (session 35, second call): warp-specialised kernels now wish for 2-3 CTAs an SM where their
# shared memory fits (specialise_warps.CTAS_PER_SM, the backend keeps the first wish ptxas
# neither refuses nor spills).  (1) pytest -m gpu of the attention, TMA, backward and session 34's
# files (kernels at 2-3 CTAs among them); (2) attention at the four configurations over the
# benchmark's default tilings, wishes on, against SDPA in the same run.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention.py \
  tests/test_attention_backward.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
cd benchmarks
echo "-- attention, wishes on (default)" | tee "$OUT/att.txt"
timeout 70 python3 bench_attention.py --configs 16x16x1024x64 --reps 10 \
  2>&1 | grep -v "^ *$" | tail -6 | tee -a "$OUT/att.txt"
echo "-- attention backward D64 (the torch op's tiles; its forward 128x64x8 now wishes for 2 CTAs)" | tee "$OUT/bwd.txt"
timeout 50 python3 bench_attention_backward.py --configs 16x16x1024x64 --reps 8 2>&1 | grep -v "^ *$" | tail -5 | tee -a "$OUT/bwd.txt"
