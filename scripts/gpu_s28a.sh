#!/bin/bash
# GPU (session 28): W4A16 with B's fragments taken from the packed bytes (passes/nibble_operands.py:
# a shared cp.async ring read by ldmatrix.trans, row pairs dequantised by shift + lop3) against the
# kernel that stages the unpacked bfloat16 B in shared memory (NIBBLE_B=False), and with 4 CTAs an SM
# (128 registers; the default hint of 5 caps ptxas at 96, which rematerialises the 0x000f000f mask
# before each logic op), alternating, two rounds.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nibble_operands.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_packed4.py 2>&1 | tail -3
cd benchmarks
CONFIGS=${CONFIGS:-16x128x128x4x8,16x128x128x4x4,16x256x128x8x4,16x64x128x4x8}
for round in 1 2; do
  for sw in "tilejit.passes.nibble_operands.NIBBLE_B=False" "tilejit.passes.nibble_operands.NIBBLE_B=True" \
            "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=(512,)"; do
    echo "-- round $round $sw"
    BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_nb PROBE_SCRIPT=bench_quant.py timeout 120 python3 switch_probe.py $sw -- \
      --w4 1,16 --fp8 "" --reps 30 --w4-configs $CONFIGS 2>&1 | grep -E "w4a16|copy"
  done
done
