#!/bin/bash
# GPU (session 29, first call): W4A16 decode with the pipelined loop's synchronous twin gone
# (3 CTAs an SM at 16x128x128x4: 118 registers, was 243 -> 2); softmax / layernorm at 65536 columns
# (their row rings lost the twin too); ncu of W4A16 M1; then the GPU tests session 28 left unrun.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_w4 timeout 150 python3 bench_quant.py --w4 1,16,64 --fp8 "" --reps 30 \
  --w4-configs 16x128x128x4x4,16x128x128x4x2,16x128x128x4x4x4,16x64x128x4x4,16x256x128x8x4,64x128x128x4x4 2>&1 | grep -E "w4a16|copy"
for hint in "(512,)" "(384,)"; do      # 4 CTAs (48 bytes spilled) and 3 CTAs (118 registers) forced
  echo "-- DECODE_DOT_THREADS_PER_SM=$hint"
  BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py \
    "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=$hint" -- --w4 1,16 --fp8 "" --reps 30 \
    --w4-configs 16x128x128x4x4,16x128x128x4x2 2>&1 | grep -E "w4a16|copy"
done
TILEJIT_CACHE_DIR=/tmp/tjc_norm timeout 120 python3 bench_norms.py --shapes 4096x65536,16384x8192 --dtypes bfloat16 2>&1 | tail -12
TILEJIT_CACHE_DIR=/tmp/tjc_sm timeout 120 python3 bench_softmax.py --shapes 4096x65536,16384x8192 --dtypes bfloat16 2>&1 | tail -12
cd ..
bash scripts/ncu_profile.sh w4a16 w4a16 --size 8192 --split 4 --config 16x128x128x4 2>&1 | head -40
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_nibble_operands.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_packed4.py tests/test_gpu_kernels.py tests/test_kernels.py tests/test_masks.py \
  tests/test_decode_attention.py tests/test_dot.py tests/test_dot_scaled.py tests/test_lower_memory.py \
  tests/test_attention.py tests/test_fuzz_kernels.py tests/test_pipelining.py tests/test_row_rings.py 2>&1 | tail -6
