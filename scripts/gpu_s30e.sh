#!/bin/bash
# GPU (session 30, last): the session's GPU tests (nibble pairs with the mask register, W4A16, the
# weights ring and rotation switches, the CLI), then W4A16 M1 / M16 / M64 and fp8 blockwise at their
# best configs with the session's defaults, the references in the same run.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nibble_pairs.py tests/test_w4a16.py \
  tests/test_rotate_products.py tests/test_nibble_operands.py tests/test_packed4.py 2>&1 | tail -2 | tee "$OUT/tests.txt"
cd benchmarks
timeout 200 python3 bench_quant.py --w4 1,16,64 --fp8 4096,8192 --reps 30 \
  --w4-configs 16x128x128x4x4,16x128x128x4x2,16x256x128x8x2,64x128x128x4x4,64x128x128x4x2 \
  --fp8-configs 128x128x128x8:nk,128x128x128x8x3:nk 2>&1 | grep -E "w4a16|fp8|copy" | tee "$OUT/quant.txt"
