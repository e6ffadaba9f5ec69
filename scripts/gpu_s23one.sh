#!/bin/bash
# GPU, one call (session 23; the device was scarce), most wanted first: TMA multicast's check (on:
# fp8 blockwise, attention, attention backward against float64), a one-round MULTICAST off/on of
# the fp8 blockwise GEMM, the GPU tests of what session 22 turned on (wgmma: ZERO_PRODUCTS,
# PIN_PROMOTED, POW2_DIVMOD; dot_scaled; fp8 attention), then memcheck of the multicast check.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== multicast check"
TILEJIT_CACHE_DIR=/tmp/tjc_2 timeout 100 python3 scripts/probes/multicast_check.py 2>&1 | grep -v "arn" | tail -6
(cd benchmarks
 for on in False True; do echo "== MULTICAST=$on"
   TILEJIT_CACHE_DIR=/tmp/tjc_4 PROBE_SCRIPT=bench_quant.py timeout 75 python3 switch_probe.py \
     tilejit.passes.multicast.MULTICAST=$on -- --w4 '' --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 \
     | grep -E "fp8|scaled|GB/s" | tail -6
 done)
echo "== pytest -m gpu"
TILEJIT_CACHE_DIR=/tmp/tjc_1 timeout 180 python3 -m pytest -q -x -m gpu --tb=short -p no:cacheprovider \
  tests/test_wgmma.py tests/test_dot_scaled.py tests/test_fp8_attention.py 2>&1 | tail -4
echo "== memcheck"
TILEJIT_CACHE_DIR=/tmp/tjc_3 timeout 150 compute-sanitizer --tool memcheck --report-api-errors no \
  python3 scripts/probes/multicast_check.py 2>&1 | grep -E "ERROR SUMMARY|rror|paired" | head -8
