#!/bin/bash
# GPU (session 36, first call): session 35's defaults on a GPU for the first time (warp-specialised
# kernels wishing for 2-3 CTAs an SM; the rotated attention's last-trip skip): pytest -m gpu of the
# attention, backward, TMA and session 34's files; attention over the four configurations with the
# benchmark's default tilings against SDPA in the same run; D64 with TMA stores and ping-pong on top
# of the wishes; ncu of the rotated D128 kernel and of the 2-CTA D64 kernel.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/test_attention.py \
  tests/test_attention_backward.py tests/test_rotate_products.py tests/test_fold_scale.py \
  tests/test_fuse_fma.py tests/test_tma.py 2>&1 | tail -6 | tee "$OUT/tests.txt"
cd benchmarks
echo "-- attention, defaults" | tee "$OUT/att.txt"
timeout 100 python3 bench_attention.py --configs 4x32x4096x128,16x16x1024x64 --reps 10 \
  2>&1 | grep -v "^ *$" | tail -8 | tee -a "$OUT/att.txt"
echo "-- attention, codegen.llvm.DESCRIPTOR_OFFSETS (a k step's descriptor = the tile's + a constant)" | tee "$OUT/desc.txt"
PROBE_SCRIPT=bench_attention.py timeout 100 python3 switch_probe.py tilejit.codegen.llvm.DESCRIPTOR_OFFSETS=True -- \
  --configs 4x32x4096x128,16x16x1024x64 --reps 10 --kernel-configs 128x128x8,128x64x8,64x64x4 2>&1 | grep -v "^ *$" | tail -8 | tee -a "$OUT/desc.txt"
cd ..
echo "-- ncu D128 128x128x8 full (rotated)" | tee "$OUT/ncu128.txt"
timeout 120 bash scripts/ncu_profile.sh attention attention --shape 4x32x4096x128 --config 128x128x8 2>&1 | tail -40 | tee -a "$OUT/ncu128.txt"
cd benchmarks
for flags in "tilejit.passes.specialise_warps.PINGPONG=True" "tilejit.passes.plan_stores.TMA_STORES=True"; do
  echo "-- attention D64 $flags"
  PROBE_SCRIPT=bench_attention.py timeout 70 python3 switch_probe.py $flags -- --configs 16x16x1024x64 --reps 10 \
    --kernel-configs 128x64x8,64x64x4 2>&1 | grep -v "^ *$" | tail -3
done 2>&1 | tee "$OUT/d64.txt"
cd ..
echo "-- ncu D64 128x64x8 (2 CTAs an SM) full" | tee "$OUT/ncu.txt"
timeout 150 bash scripts/ncu_profile.sh attention attention --shape 16x16x1024x64 --config 128x64x8 2>&1 | tail -40 | tee -a "$OUT/ncu.txt"
