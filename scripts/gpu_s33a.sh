#!/bin/bash
# GPU (session 33, first call): what sessions 31-32 built and never timed, in the order the open
# issues need it, each step written to $OUT as it ends (a cut-off run still returns the rest):
# rotated attention against float64; the fp8 blockwise GEMM with rotate_products.ROTATE True /
# False, with bench_quant's error line against float64 (#20); attention at B4 H32 S4096 D128 and
# B16 H16 S1024 D64 with fold_scale.FOLD True / False (no multiply a score) and ROTATE on (#15);
# the tutorial-spelled softmax against the example (#15); cold compile of attention and GEMM
# (#17); the GPU tests they touch.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 45 python3 scripts/probes/attention_rotated.py 600 128x128x8 2>&1 | tee "$OUT/check.txt"
cd benchmarks
probe() {   # probe SCRIPT SECONDS "MODULE.SWITCH=V" ARGS...
  local script=$1 limit=$2 flag=$3; shift 3
  echo "-- $script $flag"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout "$limit" python3 switch_probe.py \
    "tilejit.passes.$flag" -- "$@" 2>&1 | grep -v "^ *$"
}
for flag in rotate_products.ROTATE=True rotate_products.ROTATE=False; do
  probe bench_quant.py 100 $flag --w4 "" --fp8 4096,8192 --reps 15 --fp8-configs 128x128x128x8:nk
done 2>&1 | tee "$OUT/fp8.txt"
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15"
for flag in fold_scale.FOLD=True fold_scale.FOLD=False rotate_products.ROTATE=True; do
  probe bench_attention.py 80 $flag $ATT
done 2>&1 | tee "$OUT/att.txt"
cd ..
timeout 70 python3 scripts/probes/attention_exp2.py bench --reps 15 2>&1 | grep -v "^ *$" | tee "$OUT/exp2.txt"
for kernel in attention gemm; do
  echo "-- cold compile $kernel"
  timeout 60 python3 benchmarks/bench_compile.py --mode gpu --kernel $kernel --runs 3 --stages 2>&1 \
    | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/compile.txt"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_tma_store.py tests/test_fma_warning.py tests/test_fuse_fma.py tests/test_fold_scale.py \
  tests/test_attention.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
