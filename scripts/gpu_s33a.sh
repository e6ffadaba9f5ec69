#!/bin/bash
# GPU (session 33, first call), each step written to $OUT as it ends (a cut-off run still returns
# the rest): rotated attention against float64; FlashAttention backward with P recomputed in base 2
# (exp2: one FFMA and one ex2 a score) against exp(s - lse) (the accurate exp, BASE2=False), new /
# old / new, each against SDPA flash's backward in its run (#17); attention at B4 H32 S4096 D128
# and B16 H16 S1024 D64 with fold_scale.FOLD True / False (no multiply a score), then ROTATE on
# (#15).  scripts/gpu_s33b.sh has the rest (fp8 rotation, softmax spellings, compile, tests).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 45 python3 scripts/probes/attention_rotated.py 600 128x128x8 2>&1 | tail -3 | tee "$OUT/check.txt"
cd benchmarks
for base2 in True False True; do
  echo "-- backward BASE2=$base2"
  PROBE_SCRIPT=bench_attention_backward.py timeout 100 python3 switch_probe.py \
    tilejit.examples.attention_backward.BASE2=$base2 -- --reps 10 \
    --kernel-configs 32x128x8/128x64x8,64x128x8/128x64x8 2>&1 | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/bwd.txt"
probe() {   # probe SCRIPT SECONDS "MODULE.SWITCH=V" ARGS...
  local script=$1 limit=$2 flag=$3; shift 3
  echo "-- $script $flag"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout "$limit" python3 switch_probe.py \
    "tilejit.passes.$flag" -- "$@" 2>&1 | grep -v "^ *$"
}
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15"
for flag in fold_scale.FOLD=True fold_scale.FOLD=False rotate_products.ROTATE=True; do
  probe bench_attention.py 80 $flag $ATT
done 2>&1 | tee "$OUT/att.txt"
