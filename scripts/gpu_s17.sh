#!/bin/bash
# GPU, session 17, first call (under 10 minutes):
#   1. cold compile and new-process cache hit of attention and GEMM after the emitter's lane sharing
#      (bench_compile gpu mode), then one cProfile'd cold and hit process of attention (where the
#      hit's ~37 ms go);
#   2. ncu of the W4A16 decode kernel at M1 (its limiter after the nibble pairs);
#   3. the GEMM at 4096^3 against cuBLAS (the one #14 shape under 1.0x last time);
#   4. W4A16 split-K sweep at M1, 5. decode-shaped DOTs wishing for more CTAs an SM (below).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for k in attention gemm; do
  timeout 120 python3 benchmarks/bench_compile.py --mode gpu --kernel $k --runs 3 --stages 2>&1 | quiet \
    | grep -v "^$" | tail -5 | tee "$OUT/compile-$k.txt"
done
# attention is warp-specialised: the driver JIT-compiles its PTX at module load and caches the
# result in ~/.nv/ComputeCache, which the warm-up process fills; without that cache:
CUDA_CACHE_DISABLE=1 timeout 120 python3 benchmarks/bench_compile.py --mode gpu --kernel attention --runs 2 \
  --stages 2>&1 | quiet | grep -v "^$" | tail -5 | tee "$OUT/compile-attention-nodrivercache.txt"
# 4. W4A16 at M1, N = K = 8192: split-K against waves (16x128x128x4 holds 3 CTAs an SM at 160
#    registers: 396 slots, split 8 launches 512 CTAs = 1.3 waves)
(cd benchmarks && timeout 120 python3 bench_quant.py --w4 1 --fp8 '' --reps 20 --w4-configs \
  16x128x128x4x4,16x128x128x4x6,16x128x128x4x8,16x128x128x4x16,16x64x128x4x6,16x64x128x4x12,16x256x128x8x8 \
  2>&1 | quiet | tail -12 | tee "$OUT/w4-splits.txt")
# 5. W4A16 at M1 with decode-shaped DOT kernels wishing for 512 threads an SM (off by default):
#    16x64x128x4 then fits 4 CTAs in 110 registers, no spill (16x128x128x4 would spill: keeps 3)
for wish in "()" "(512,)"; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_dec_$RANDOM PROBE_SCRIPT=bench_quant.py timeout 90 python3 switch_probe.py \
    "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=$wish" -- --w4 1 --fp8 '' --reps 20 \
    --w4-configs 16x64x128x4x4,16x64x128x4x8,16x128x128x4x8 2>&1 | quiet | tail -6 | tee -a "$OUT/w4-decode-wish.txt")
done
(cd benchmarks && timeout 100 python3 bench_matmul.py --shapes 4096x4096x4096 --dtypes bfloat16 --configs 128x256x64x4x8 --reps 20 2>&1 | quiet \
  | tail -8 | tee "$OUT/gemm4096.txt")
timeout 90 python3 benchmarks/bench_compile.py --mode gpu --kernel attention --runs 1 --profile > "$OUT/compile-profile.txt" 2>&1
grep -A60 "one hit run" "$OUT/compile-profile.txt" | head -75
timeout 150 bash scripts/w4_profile.sh 16x128x128x4 1 2>&1 | tail -40 | tee "$OUT/w4-ncu.txt"
