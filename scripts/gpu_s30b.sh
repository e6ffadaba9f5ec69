#!/bin/bash
# GPU (session 30, second call): the first call's output tail lost its start; again with each part
# written to $OUT: session 29's unrun persist_programs / pipelining GPU tests, the nibble pair tests,
# then W4A16 M1 / M16 with the nibble mask in a register (codegen.nibbles.REGISTER_MASK) or not,
# alternating twice.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persist_programs.py tests/test_pipelining.py \
  tests/test_nibble_pairs.py tests/test_w4a16.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
cd benchmarks
for round in 1 2; do
  for flag in True False; do
    echo "-- round $round REGISTER_MASK=$flag"
    BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py \
      "tilejit.codegen.nibbles.REGISTER_MASK=$flag" -- --w4 1,16 --fp8 "" --reps 30 \
      --w4-configs 16x128x128x4x4,16x128x128x4x2,16x64x128x4x4 2>&1 | grep -E "w4a16|copy"
  done
done 2>&1 | tee "$OUT/mask.txt"
