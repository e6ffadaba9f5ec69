#!/bin/bash
# GPU, session 16, first call (under 10 minutes): what this session built on the CPU.
#   1. W4A16 after codegen/nibbles.py (on by default): the GPU tests of unpack / W4A16 / the pairing, then
#      bench_quant --w4 with the pairing off and on (same machine);
#   2. ping-pong (specialise_warps.PINGPONG, off by default): its tests, then bench_attention with it off and on.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_packed4.py tests/test_w4a16.py \
  tests/test_int_to_float.py 2>&1 | tail -2 | tee "$OUT/w4-tests.txt"
for pairs in False True; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_w4_$pairs PROBE_SCRIPT=bench_quant.py timeout 90 python3 switch_probe.py \
    tilejit.codegen.nibbles.NIBBLE_PAIRS=$pairs -- --w4 1,64 --fp8 '' --reps 20 \
    --w4-configs 16x128x128x4x8,16x64x128x4x8,64x64x128x4x1,64x64x128x4x8 2>&1 | quiet \
    | tail -8 | tee "$OUT/w4-pairs-$pairs.txt")
done
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_pingpong.py 2>&1 | tail -1 | tee "$OUT/pp-tests.txt"
for pp in False True; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_pp_$pp PROBE_SCRIPT=bench_attention.py timeout 90 python3 switch_probe.py \
    tilejit.passes.specialise_warps.PINGPONG=$pp -- --configs 4x32x4096x128 \
    --kernel-configs 128x128x8 --reps 10 2>&1 | quiet | tail -10 | tee "$OUT/attention-pingpong-$pp.txt")
done
