#!/bin/bash
# GPU (session 34, third call): TMA stores (plan_stores.TMA_STORES) off / on for the GEMMs they
# would change once on by default: bf16 matmul 4096^3 / 8192^3 / M4096 N4096 K14336 at 128x256x64
# and 128x128x64, the fp8 blockwise GEMM and W4A16 at M64, each against its reference in its
# run (attention gained 2-3% with them: gpu_s34c.sh).  Then D64 attention tiles, stderr kept.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
for on in False True; do
  echo "-- matmul TMA_STORES=$on"
  PROBE_SCRIPT=bench_matmul.py BENCH_EACH=1 timeout 80 python3 switch_probe.py tilejit.passes.plan_stores.TMA_STORES=$on -- \
    --shapes 4096x4096x4096,8192x8192x8192,4096x4096x14336 --dtypes bfloat16 --reps 15 \
    --configs 128x256x64x3x8,128x128x64x3x8 2>&1 | grep -v "^ *$" | tail -12
  echo "-- quant TMA_STORES=$on"
  PROBE_SCRIPT=bench_quant.py timeout 70 python3 switch_probe.py tilejit.passes.plan_stores.TMA_STORES=$on -- \
    --w4 64 --fp8 4096,8192 --reps 12 2>&1 | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/tma_store.txt"
echo "-- attention D64 tiles" | tee "$OUT/d64.txt"
BENCH_EACH=1 timeout 70 python3 bench_attention.py --configs 16x16x1024x64 --reps 10 \
  --kernel-configs 128x128x8,256x64x16 2>&1 | grep -v "^ *$" | tail -9 | tee -a "$OUT/d64.txt"
