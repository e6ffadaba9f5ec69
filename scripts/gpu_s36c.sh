#!/bin/bash
# GPU (session 36, the short form of gpu_s36b.sh): attention with defer_products.DEFER off / on (the
# bf16 carry with the held wait since 304b4b8; the float32 carry measured before it),
# every tiling's figure (BENCH_EACH), SDPA in each run.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
cd benchmarks
for on in False True; do
  echo "-- DEFER=$on"
  BENCH_EACH=1 PROBE_SCRIPT=bench_attention.py timeout 100 python3 switch_probe.py tilejit.passes.defer_products.DEFER=$on -- \
    --configs 4x32x4096x128,16x16x1024x64 --reps 8 --kernel-configs 128x128x8,128x64x8,64x64x4 2>&1 | grep -v "^ *$" | tail -18
done
