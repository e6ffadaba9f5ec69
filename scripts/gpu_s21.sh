#!/bin/bash
# GPU (prepared in session 20, not yet run), W4A16 first:
#  1. the GPU tests of wgmma with a computed B (tests/test_wgmma_computed_b.py, the switch on inside);
#  2. wgmma.COMPUTED_B off / on at 64 rows a block (the dequantised B stored into wgmma's atoms each
#     iteration: ptxas 132 registers against 168, no spill, no serialisation), alternating;
#  3. the example dequantised as (q + 128) - (z + 128) (scripts/probes/w4_bias.py:
#     codegen.nibbles.offset_pairs drops the conversion's 2**7 subtraction) against the example,
#     alternating (bench_quant checks every output before timing it);
#  4. on an H200, the #14 target table (scripts/gpu_s20b.sh, no sanitizer);
#  5. the fp8 blockwise GEMM with specialise_warps.PINGPONG_PROMOTION off / on (session 21: the two
#     consumer warpgroups take turns, one scaling its product while the other's runs), alternating,
#     after dot_scaled's GPU tests (bench_quant checks each output against float64 before timing it).
# Env: STEPS (default "5 1 2 3 4").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for step in ${STEPS:-5 1 2 3 4}; do
  case $step in
  1) TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
       tests/test_wgmma_computed_b.py tests/test_nibble_pairs.py 2>&1 | tail -4 ;;
  2) A="" B="tilejit.passes.wgmma.COMPUTED_B=True" W4=64 ROUNDS=2 TAIL=20 \
       W4_CONFIGS=64x64x128x4x4,64x64x128x4x8,64x128x64x4x1,64x128x128x4x4 bash scripts/gpu_w4_ab.sh 2>&1 \
       | grep -E "^==|w4a16" ;;
  3) SIDES="new bias" ROUNDS=2 W4=1,16,64 TESTS=0 \
       W4_CONFIGS=16x64x128x4x4,16x64x128x4x5,64x64x128x4x4,64x64x128x4x8 bash scripts/gpu_s19b.sh 2>&1 \
       | grep -E "^==|^w4a16 M" | tee -a "$OUT/w4.txt"
     git checkout -q examples/w4a16_gemm.py 2>/dev/null || true ;;
  4) if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then SAN=0 bash scripts/gpu_s20b.sh 2>&1 | tail -30
     else echo "step 4: not an H200, the #14 table skipped"; fi ;;
  5) TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
       tests/test_dot_scaled.py 2>&1 | tail -2
     for round in 1 2; do for on in False True; do
       echo "== fp8 PINGPONG_PROMOTION=$on ($round)"
       (cd benchmarks && BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_pp PROBE_SCRIPT=bench_quant.py timeout 200 \
         python3 switch_probe.py tilejit.passes.specialise_warps.PINGPONG_PROMOTION=$on -- --w4 '' --fp8 4096,8192 \
         --fp8-configs 128x128x128x8:nk,128x128x128x8x3:nk,128x128x64x8:nk --reps 20 2>&1 | grep -E "fp8" | tee -a "$OUT/fp8.txt")
     done; done ;;
  esac
done
