#!/bin/bash
# GPU (session 30, fourth call): fp8 blockwise with each K block's product issued one iteration
# before it is scaled in: the compiler's rotate_products pass (ROTATE True / False through
# switch_probe, alternating, two rounds), and the hand-written rotated spelling
# (scripts/probes/fp8_rotated.py) against the example's plain loop; then the GPU tests of the
# kernels the pass touches with it on.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
for round in 1 2; do
  for flag in True False; do
    echo "-- round $round ROTATE=$flag"
    BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 120 python3 switch_probe.py \
      "tilejit.passes.rotate_products.ROTATE=$flag" -- --w4 "" --fp8 4096,8192 --reps 30 \
      --fp8-configs 128x128x128x8:nk,64x128x128x4:nk,128x128x128x8x3:nk 2>&1 | grep -E "fp8"
  done
done 2>&1 | tee "$OUT/rotate.txt"
cd ..
timeout 150 python3 scripts/probes/fp8_rotated.py 4096 8192 2>&1 | tail -6 | tee "$OUT/manual.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_dot_scaled.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
