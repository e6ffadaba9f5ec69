#!/bin/bash
# GPU, session 18, third call: is attention slower from the toolkit's ptxas (whole program) than
# from the driver JIT (TILEJIT_PTXAS pointing nowhere)? Alternating order, fresh caches (the
# cubin's .text is the same with and without -lineinfo); then ncu of W4A16 at M1.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 60 python3 scripts/probes/culink.py 2>&1 | tail -20 | tee "$OUT/culink.txt"
for mode in driver ptxas driver ptxas; do
  sw="tilejit.codegen.ptxas.LINE_INFO=True"
  [ $mode = nolineinfo ] && sw="tilejit.codegen.ptxas.LINE_INFO=False"
  env $([ $mode = driver ] && echo TILEJIT_PTXAS=/nonexistent/ptxas) TILEJIT_CACHE_DIR=/tmp/tjc_${mode}_$RANDOM \
    PROBE_SCRIPT=bench_attention.py bash -c "cd benchmarks && timeout 80 python3 switch_probe.py $sw -- --configs 4x32x4096x128 --reps 30" 2>&1 \
    | quiet | grep "B4 H32" | sed "s/^/[$mode] /" | tee -a "$OUT/attention-ab.txt"
done
timeout 150 bash scripts/w4_profile.sh 16x64x128x4 1 2>&1 | tail -40 | tee "$OUT/w4-ncu-m1.txt"
timeout 90 python3 benchmarks/bench_compile.py --mode gpu --kernel attention --runs 2 --stages 2>&1 | quiet \
  | grep -v "^$" | tail -16 | tee "$OUT/compile-stages.txt"
