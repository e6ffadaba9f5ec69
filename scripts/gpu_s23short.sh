#!/bin/bash
# GPU, under 5 minutes (session 23: little device time left): TMA multicast's check (fp8 blockwise,
# attention, attention backward against float64, on) and a one-round MULTICAST off/on of the fp8
# blockwise GEMM (128x128x128x8, (N, K) weights, 4096^3 and 8192^3) against torch._scaled_mm.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== multicast check"
TILEJIT_CACHE_DIR=/tmp/tjc_2 timeout 90 python3 scripts/probes/multicast_check.py 2>&1 | grep -v "arn" | tail -6
cd benchmarks
for on in False True; do echo "== MULTICAST=$on"
  TILEJIT_CACHE_DIR=/tmp/tjc_4 PROBE_SCRIPT=bench_quant.py timeout 70 python3 switch_probe.py \
    tilejit.passes.multicast.MULTICAST=$on -- --w4 '' --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 \
    | grep -E "fp8|scaled|GB/s" | tail -6
done
