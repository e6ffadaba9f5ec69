#!/bin/bash
# GPU (session 31, first call): attention with each block's QK^T issued one iteration ahead of
# its softmax (rotate_products on attention's loop: the first product before the loop on wgmma,
# the next one's group in flight under this block's softmax, the kernel still warp-specialised):
# correctness against float64, then bench_attention with ROTATE True / False through
# switch_probe, alternating, two rounds (and ROTATE with the consumers' ping-pong); then the GPU
# tests the change touches.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python3 scripts/probes/attention_rotated.py 1000 128x128x8 64x128x4 2>&1 | tee "$OUT/check.txt"
cd benchmarks
for round in 1 2; do
  for flags in "ROTATE=True" "ROTATE=False" "ROTATE=True PINGPONG=True"; do
    echo "-- round $round $flags"
    set -- ; for f in $flags; do
      case $f in ROTATE*) set -- "$@" "tilejit.passes.rotate_products.$f";;
                 PINGPONG*) set -- "$@" "tilejit.passes.specialise_warps.$f";; esac
    done
    PROBE_SCRIPT=bench_attention.py timeout 150 python3 switch_probe.py "$@" -- \
      --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8,64x128x4 --reps 20 2>&1 | grep -v "^ *$"
  done
done 2>&1 | tee "$OUT/bench.txt"
cd ..
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_attention.py tests/test_pingpong.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
