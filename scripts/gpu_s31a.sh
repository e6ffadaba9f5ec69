#!/bin/bash
# GPU (session 31, first call): each block's QK^T (attention) or K block's product (fp8
# blockwise) issued one iteration ahead of the work on it (rotate_products: the first product
# before the loop on wgmma, the kernel still warp-specialised).  In order of need, each step
# written to $OUT as it ends: attention against float64; bench_attention with ROTATE True / False
# through switch_probe (round 1), bench_quant --fp8 the same, bench_attention round 2; attention
# rotated with its output block stored by TMA (TILEJIT_TMA_STORE=1) and with the consumers'
# ping-pong; then the GPU tests the change touches.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 scripts/probes/attention_rotated.py 1000 128x128x8 2>&1 | tee "$OUT/check.txt"
cd benchmarks
probe() {   # probe SCRIPT "SWITCH=V ..." ARGS...
  local script=$1 flags=$2; shift 2
  local sets=()
  for f in $flags; do
    case $f in ROTATE*) sets+=("tilejit.passes.rotate_products.$f");;
               PINGPONG*) sets+=("tilejit.passes.specialise_warps.$f");; esac
  done
  echo "-- $script $flags ${TILEJIT_TMA_STORE:+TILEJIT_TMA_STORE=$TILEJIT_TMA_STORE}"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout 90 python3 switch_probe.py "${sets[@]}" -- "$@" 2>&1 | grep -v "^ *$"
}
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15"
for flags in "ROTATE=True" "ROTATE=False"; do probe bench_attention.py "$flags" $ATT; done 2>&1 | tee "$OUT/att1.txt"
for flags in "ROTATE=True" "ROTATE=False"; do
  probe bench_quant.py "$flags" --w4 "" --fp8 4096,8192 --reps 15 --fp8-configs 128x128x128x8:nk
done 2>&1 | tee "$OUT/fp8.txt"
for flags in "ROTATE=False" "ROTATE=True"; do probe bench_attention.py "$flags" $ATT; done 2>&1 | tee "$OUT/att2.txt"
TILEJIT_TMA_STORE=1 probe bench_attention.py "ROTATE=True" $ATT 2>&1 | tee "$OUT/att_tma_store.txt"
probe bench_attention.py "ROTATE=True PINGPONG=True" $ATT 2>&1 | tee "$OUT/att_pingpong.txt"
cd ..
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_tma_store.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
