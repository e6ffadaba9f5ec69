#!/bin/bash
# GPU (session 34, first call; sessions 31-33 got no device, so nothing since session 30 is timed):
# the unmeasured changes in order of what each decides, each step written to $OUT as it ends (a
# cut-off run still returns the rest):
#   1. rotated attention against float64 (a correctness check of session 31's ROTATE);
#   2. #17: the backward with P in base 2 (BASE2=True, one FFMA and one ex2 a score) against
#      exp(s - lse) (BASE2=False), each against SDPA flash's backward in its run;
#   3. #15: attention B4 H32 S4096 D128 and B16 H16 S1024 D64 with fold_scale.FOLD True / False,
#      then rotate_products.ROTATE on, each against SDPA cuDNN in its run;
#   4. #20: the fp8 blockwise GEMM with ROTATE True / False and bench_quant's error line.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 40 python3 scripts/probes/attention_rotated.py 600 128x128x8 2>&1 | tail -3 | tee "$OUT/check.txt"
cd benchmarks
for base2 in True False; do
  echo "-- backward BASE2=$base2"
  PROBE_SCRIPT=bench_attention_backward.py timeout 85 python3 switch_probe.py \
    tilejit.examples.attention_backward.BASE2=$base2 -- --reps 8 \
    --kernel-configs 32x128x8/128x64x8 2>&1 | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/bwd.txt"
probe() {   # probe SCRIPT SECONDS "MODULE.SWITCH=V" ARGS...
  local script=$1 limit=$2 flag=$3; shift 3
  echo "-- $script $flag"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout "$limit" python3 switch_probe.py \
    "tilejit.passes.$flag" -- "$@" 2>&1 | grep -v "^ *$"
}
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 12"
for flag in fold_scale.FOLD=True fold_scale.FOLD=False rotate_products.ROTATE=True; do
  probe bench_attention.py 65 $flag $ATT
done 2>&1 | tee "$OUT/att.txt"
for on in True False; do
  probe bench_quant.py 65 rotate_products.ROTATE=$on --w4 "" --fp8 4096,8192 --reps 12 \
    --fp8-configs 128x128x128x8:nk
done 2>&1 | tee "$OUT/fp8.txt"
