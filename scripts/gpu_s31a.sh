#!/bin/bash
# GPU (session 31, first call): each block's QK^T (attention) or K block's product (fp8
# blockwise) issued one iteration ahead of the work on it (rotate_products: the first product
# before the loop on wgmma, the kernel still warp-specialised): attention against float64, then
# bench_attention and bench_quant --fp8 with ROTATE True / False through switch_probe,
# alternating, two rounds; attention once more with the consumers' ping-pong, and with its output
# block stored by TMA (TILEJIT_TMA_STORE=1, rotated and not); then the GPU tests the change touches.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 100 python3 scripts/probes/attention_rotated.py 1000 128x128x8 64x128x4 2>&1 | tee "$OUT/check.txt"
cd benchmarks
probe() {   # probe SCRIPT "SWITCH=V ..." ARGS...
  local script=$1 flags=$2; shift 2
  set -- "$@"; local sets=()
  for f in $flags; do
    case $f in ROTATE*) sets+=("tilejit.passes.rotate_products.$f");;
               PINGPONG*) sets+=("tilejit.passes.specialise_warps.$f");; esac
  done
  echo "-- $script $flags"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout 110 python3 switch_probe.py "${sets[@]}" -- "$@" 2>&1 | grep -v "^ *$"
}
for round in 1 2; do
  for flags in "ROTATE=True" "ROTATE=False"; do
    probe bench_attention.py "$flags" --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15
    probe bench_quant.py "$flags" --w4 "" --fp8 4096,8192 --reps 15 --fp8-configs 128x128x128x8:nk
  done
done 2>&1 | tee "$OUT/bench.txt"
{
probe bench_attention.py "ROTATE=True PINGPONG=True" --configs 4x32x4096x128,16x16x1024x64 \
  --kernel-configs 128x128x8 --reps 15
export TILEJIT_TMA_STORE=1
echo "(TILEJIT_TMA_STORE=1: the output block copied out by TMA)"
probe bench_attention.py "ROTATE=True" --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15
probe bench_attention.py "ROTATE=False" --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15
unset TILEJIT_TMA_STORE
} 2>&1 | tee "$OUT/variants.txt"
cd ..
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_carried_layouts.py tests/test_tma_store.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
