#!/bin/bash
# GPU (session 21, fourth call):
#  1. the GPU tests of wgmma with a computed B (one and two buffers); W4A16 at M 64 with
#     wgmma.COMPUTED_B_BUFFERS 1 and 2 (two: the group stays in flight while the next B is
#     dequantised into the other buffer), alternating, two rounds; configs with the compiler's
#     4 slots and with 3 (64x64x128 at 3 slots fits 3 CTAs an SM; 64x128x128 with two buffers
#     and 4 slots takes 132 KB, one CTA);
#  2. the fp8 blockwise GEMM with prefetch_loads.PREFETCH_AHEAD 1 and 2 under the consumers'
#     ping-pong (ncu source counters: the carried scale's register copy waits on its load in
#     the same iteration), alternating, two rounds.
# Env: STEPS (default "1 2").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py
for step in ${STEPS:-1 2}; do
  case $step in
  1) TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
       tests/test_wgmma_computed_b.py 2>&1 | tail -2
     A="tilejit.passes.wgmma.COMPUTED_B_BUFFERS=1" B="tilejit.passes.wgmma.COMPUTED_B_BUFFERS=2" W4=64 ROUNDS=2 \
       W4_CONFIGS=64x128x128x4x4,64x128x128x4x2,64x64x128x4x4,64x64x128x4x4x3,64x128x128x4x2x3 TAIL=20 \
       bash scripts/gpu_w4_ab.sh 2>&1 | grep -E "^==|w4a16" ;;
  2) for round in 1 2; do for ahead in 1 2; do
       echo "== fp8 PREFETCH_AHEAD=$ahead ($round)"
       TILEJIT_CACHE_DIR=/tmp/tjc_pa timeout 150 python3 benchmarks/switch_probe.py \
         tilejit.passes.prefetch_loads.PREFETCH_AHEAD=$ahead -- --w4 '' --fp8 4096,8192 \
         --fp8-configs 128x128x128x8:nk --reps 20 2>&1 | grep -E "^fp8|Error" | tee -a "$OUT/fp8.txt"
     done; done ;;
  esac
done
