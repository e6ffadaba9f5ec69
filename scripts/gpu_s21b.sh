#!/bin/bash
# GPU (session 21, second call): profiles of the two #20 kernels at their new defaults, then the
# W4A16 (q + 128) - (z + 128) probe at decode M.
#  1. ncu of W4A16 at M 64, N = K = 8192, 64x128x128x4 split 4 (wgmma with the dequantised B);
#  2. ncu of the fp8 blockwise GEMM at 8192^3, 128x128x128x8 (the consumer warpgroups' ping-pong);
#  3. gpu_s21.sh step 3 at M 1 and 16.
# Env: STEPS (default "1 2 3").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for step in ${STEPS:-1 2 3}; do
  case $step in
  1) echo "== ncu w4a16 M64"; bash scripts/ncu_profile.sh w4a16 w4a16 --size 8192 --m 64 --split 4 --config 64x128x128x4 ;;
  2) echo "== ncu fp8 blockwise 8192"; bash scripts/ncu_profile.sh fp8_blockwise fp8_blockwise --size 8192 --config 128x128x128x8 ;;
  3) SIDES="new bias" ROUNDS=2 W4=1,16 TESTS=0 W4_CONFIGS=16x64x128x4x4,16x64x128x4x5 bash scripts/gpu_s19b.sh 2>&1 \
       | grep -E "^==|^w4a16 M" | tee -a "$OUT/w4.txt"
     git checkout -q examples/w4a16_gemm.py 2>/dev/null || true ;;
  esac
done
