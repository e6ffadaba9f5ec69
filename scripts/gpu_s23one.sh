#!/bin/bash
# GPU, one call (session 23; the device was scarce): the GPU tests of what sessions 22-23 turned on
# or added (wgmma: ZERO_PRODUCTS, PIN_PROMOTED, POW2_DIVMOD; fp8 attention; dot_scaled), then TMA
# multicast's check (on, memcheck) and a one-round MULTICAST off/on of the fp8 blockwise GEMM.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== pytest -m gpu"
TILEJIT_CACHE_DIR=/tmp/tjc_1 timeout 210 python3 -m pytest -q -x -m gpu --tb=short -p no:cacheprovider \
  tests/test_wgmma.py tests/test_dot_scaled.py tests/test_fp8_attention.py 2>&1 | tail -4
echo "== multicast check"
TILEJIT_CACHE_DIR=/tmp/tjc_2 timeout 90 python3 scripts/probes/multicast_check.py 2>&1 | grep -v "arn" | tail -5
echo "== memcheck"
TILEJIT_CACHE_DIR=/tmp/tjc_3 timeout 120 compute-sanitizer --tool memcheck --report-api-errors no \
  python3 scripts/probes/multicast_check.py 2>&1 | grep -E "ERROR SUMMARY|rror|paired" | head -6
cd benchmarks
for on in False True; do echo "== MULTICAST=$on"
  TILEJIT_CACHE_DIR=/tmp/tjc_4 PROBE_SCRIPT=bench_quant.py timeout 75 python3 switch_probe.py \
    tilejit.passes.multicast.MULTICAST=$on -- --w4 '' --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 \
    | grep -E "fp8|scaled" | tail -6
done
