#!/bin/bash
# GPU, session 18, first call (under 10 minutes): W4A16's split-K sweep and decode wish, plus the
# warp-specialised kernels' whole-program cubin from the toolkit's ptxas (d2d6ac5) against the
# driver JIT (TILEJIT_PTXAS pointing nowhere): cold / hit compile and attention's speed.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "from tilejit.codegen import ptxas; print('ptxas command:', ptxas.ptxas_command())" | tee -a "$OUT/gpu.txt"
(ptxas --version || /usr/local/cuda/bin/ptxas --version) 2>&1 | tail -1 | tee -a "$OUT/gpu.txt"
NOPTXAS=/nonexistent/ptxas
for mode in ptxas driver; do
  [ $mode = driver ] && export TILEJIT_PTXAS=$NOPTXAS
  timeout 100 python3 benchmarks/bench_compile.py --mode gpu --kernel attention --runs 3 --stages 2>&1 | quiet \
    | grep -v "^$" | tail -4 | sed "s/^/[$mode] /" | tee -a "$OUT/compile-attention.txt"
  CUDA_CACHE_DISABLE=1 timeout 60 python3 benchmarks/bench_compile.py --mode gpu --kernel attention --runs 2 \
    2>&1 | quiet | grep -v "^$" | tail -3 | sed "s/^/[$mode, no driver cache] /" | tee -a "$OUT/compile-attention.txt"
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_$mode timeout 100 python3 bench_attention.py --configs 4x32x4096x128 --reps 20 2>&1 \
    | quiet | tail -6 | sed "s/^/[$mode] /" | tee -a "$OUT/attention.txt")
  unset TILEJIT_PTXAS
done
timeout 80 python3 benchmarks/bench_compile.py --mode gpu --kernel gemm --runs 3 --stages 2>&1 | quiet \
  | grep -v "^$" | tail -4 | tee "$OUT/compile-gemm.txt"
(cd benchmarks && timeout 100 python3 bench_quant.py --w4 1 --fp8 '' --reps 20 --w4-configs \
  16x128x128x4x4,16x128x128x4x8,16x128x128x4x16,16x64x128x4x6,16x64x128x4x12,16x256x128x8x8 \
  2>&1 | quiet | tail -10 | tee "$OUT/w4-splits.txt")
for wish in "()" "(512,)"; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_dec_$RANDOM PROBE_SCRIPT=bench_quant.py timeout 80 python3 switch_probe.py \
    "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=$wish" -- --w4 1 --fp8 '' --reps 20 \
    --w4-configs 16x64x128x4x4,16x64x128x4x8,16x128x128x4x8 2>&1 | quiet | tail -6 | tee -a "$OUT/w4-decode-wish.txt")
done
