#!/bin/bash
# GPU (prepared in session 20, not yet run): W4A16 dequantised as (q + 128) - (z + 128)
# (scripts/probes/w4_bias.py: codegen.nibbles.offset_pairs drops the conversion's 2**7 subtraction,
# 96 bf16x2 ops against 128 in the 16x64x128x4 kernel's PTX) against the example, alternating, two
# rounds (bench_quant checks every output before timing it); then, on an H200, the #14 target
# table (scripts/gpu_s20b.sh, no sanitizer).  Env: W4, W4_CONFIGS, TABLE=0 skips the table.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SIDES="new bias" ROUNDS=2 W4=${W4:-1,16,64} TESTS=0 W4_CONFIGS=${W4_CONFIGS:-16x64x128x4x4,16x64x128x4x5,64x64x128x4x4,64x64x128x4x8} \
  bash scripts/gpu_s19b.sh 2>&1 | grep -E "^==|^w4a16 M" | tee -a "$OUT/w4.txt"
git checkout -q examples/w4a16_gemm.py 2>/dev/null || true
[ "${TABLE:-1}" = 0 ] && exit 0
SAN=0 bash scripts/gpu_s20b.sh 2>&1 | tail -30
