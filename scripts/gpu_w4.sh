#!/bin/bash
# GPU: W4A16 after codegen/nibbles.py (a packed byte's two nibbles to bf16 as one prmt, one lop3 and one
# bf16x2 subtraction; 216 -> 140 registers at 16x128x128x4) -- about 4 minutes.
#   1. the GPU tests of unpack, W4A16 and the pairing;
#   2. bench_quant --w4 with the pairing off, then on, same machine (target: packed weights >= 0.80x copy at M <= 16).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_packed4.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_int_to_float.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
for pairs in False True; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_w4_$pairs PROBE_SCRIPT=bench_quant.py timeout 200 python3 switch_probe.py \
    tilejit.codegen.nibbles.NIBBLE_PAIRS=$pairs -- --w4 1,16,64 --fp8 '' --reps 20 2>&1 | quiet | tail -8 \
    | tee "$OUT/w4-pairs-$pairs.txt")
done
