#!/bin/bash
# GPU (session 19): masked vector groups tested by their last / first mask and skipped when wholly
# outside (codegen.memory.GROUP_TESTS) -- the GPU tests of masked kernels, then W4A16 at decode M
# with the switch on and off, alternating, one process each.  Env: W4, W4_CONFIGS, TESTS=0.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PROBE_SCRIPT=bench_quant.py
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" != 0 ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-240} python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
    tests/test_masks.py tests/test_w4a16.py tests/test_gpu_kernels.py tests/test_kernels.py tests/test_stream_k.py \
    > "$OUT/tests.txt" 2>&1
  tail -12 "$OUT/tests.txt"
fi
CFG=${W4_CONFIGS:-16x64x128x4x4,16x64x128x4x8,16x128x128x4x8}
for round in 1 2; do
  for on in True False; do
    echo "== GROUP_TESTS=$on ($round)" | tee -a "$OUT/w4.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_g$on timeout 200 python3 benchmarks/switch_probe.py tilejit.codegen.memory.GROUP_TESTS=$on \
      -- --w4 ${W4:-1,16} --fp8 '' --w4-configs $CFG --reps 30 2>&1 | grep -E "^w4a16" | tee -a "$OUT/w4.txt"
  done
done
