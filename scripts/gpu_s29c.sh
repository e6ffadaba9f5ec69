#!/bin/bash
# GPU (session 29, third call): with the zero-point row prefetched by default (and the packed
# weights never): the GPU tests of the quantized paths; W4A16 M1 / M16 / M64 over splits 4 / 6 / 8;
# fp8 blockwise at 4096 / 8192 (unchanged path, for the record); M64 on mma.sync with nibbles.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nibble_operands.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_packed4.py tests/test_dot_scaled.py tests/test_prefetch_loads.py 2>&1 | tail -3
cd benchmarks
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_w4c timeout 200 python3 bench_quant.py --w4 1,16,64 --fp8 "" --reps 30 \
  --w4-configs 16x128x128x4x4,16x128x128x4x6,16x128x128x4x8,16x256x128x8x4,16x256x128x8x8,16x64x128x4x8,64x128x128x4x4,64x128x128x4x2 2>&1 | grep -E "w4a16|copy"
TILEJIT_CACHE_DIR=/tmp/tjc_fp8 timeout 150 python3 bench_quant.py --w4 "" --fp8 4096,8192 --reps 20 2>&1 | grep -E "fp8|copy|scaled" | head -8
# M64 on mma.sync with B from the nibbles (NIBBLE_ROWS 64; 161 / 124 registers at 64x128x128 on 4 / 8
# warps now that the twin loop is gone, 255 before) against the default wgmma
echo "-- M64 mma.sync, nibbles"
BENCH_EACH=1 TILEJIT_WGMMA=0 PROBE_SCRIPT=bench_quant.py timeout 150 python3 switch_probe.py \
  "tilejit.passes.nibble_operands.NIBBLE_ROWS=64" -- --w4 64 --fp8 "" --reps 30 \
  --w4-configs 64x128x128x4x4,64x128x128x8x4,64x256x128x8x4,32x128x128x4x4 2>&1 | grep -E "w4a16|copy"
