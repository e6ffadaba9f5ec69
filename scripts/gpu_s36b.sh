#!/bin/bash
# GPU (session 36): attention with the accumulation one iteration behind (defer_products.DEFER,
# FlashAttention-3's order: QK^T of this block, then PV of the last, its wait after the softmax)
# against the defaults, each run with SDPA in the same process; then DEFER with TMA stores and
# descriptor offsets.  BENCH_EACH: every tiling's figure (D128 128x128x8 stays rotated under
# DEFER: its deferred tiles would spill, defer_products.MAX_VALUES).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
for f in "tilejit.passes.defer_products.DEFER=False" "tilejit.passes.defer_products.DEFER=True" \
         "tilejit.passes.defer_products.DEFER=True tilejit.passes.plan_stores.TMA_STORES=True tilejit.codegen.llvm.DESCRIPTOR_OFFSETS=True"; do
  echo "-- $f"
  BENCH_EACH=1 PROBE_SCRIPT=bench_attention.py timeout 120 python3 switch_probe.py $f -- --configs 4x32x4096x128,16x16x1024x64 --reps 10 \
    --kernel-configs 128x128x8,128x64x8,64x64x4 2>&1 | grep -v "^ *$" | tail -18
done
echo "-- DEFER with MAX_VALUES=1000: D128 128x128x8 deferred (176 bytes spilled)"
BENCH_EACH=1 PROBE_SCRIPT=bench_attention.py timeout 90 python3 switch_probe.py tilejit.passes.defer_products.DEFER=True \
  tilejit.passes.defer_products.MAX_VALUES=1000 -- --configs 4x32x4096x128 --reps 10 --kernel-configs 128x128x8 \
  2>&1 | grep -v "^ *$" | tail -6
