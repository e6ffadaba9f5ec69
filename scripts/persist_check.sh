#!/bin/bash
# GPU: the persistent warp-specialised GEMM (specialise_warps.PERSIST_TILES) against the default,
# every config's figure (BENCH_EACH), then ncu of both at 4096^3.  Usage: bash scripts/persist_check.sh
# Env: CONFIGS (bench_matmul --configs), SHAPES, NCU_CONFIG (default 128x256x64x3x8), TESTS (pytest args).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_matmul.py
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -n "$TESTS" ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-200} python3 -m pytest -q -x --tb=short $TESTS > "$OUT/tests.txt" 2>&1
  tail -40 "$OUT/tests.txt"
fi
CONFIGS=${CONFIGS:-128x256x64x4x8,128x256x64x3x8,128x128x64x4x8}
SHAPES=${SHAPES:-4096x4096x4096,8192x8192x8192}
for mode in base pt; do
  sw=""; [ $mode = pt ] && sw="tilejit.passes.specialise_warps.PERSIST_TILES=True"
  echo "== $mode"
  TILEJIT_CACHE_DIR=/tmp/tjc_pc_$mode timeout 200 python3 benchmarks/switch_probe.py $sw -- --shapes $SHAPES \
    --dtypes bfloat16 --configs $CONFIGS --reps 20 > "$OUT/bench-$mode.txt" 2>&1
  grep -E "TFLOP/s|x4096 |x8192 " "$OUT/bench-$mode.txt" | grep -v Warning
done
if [ "${NCU:-1}" != 0 ]; then
  export PROBE_SCRIPT=profile_one.py
  for mode in base pt; do
    sw=""; [ $mode = pt ] && sw="tilejit.passes.specialise_warps.PERSIST_TILES=True"
    f="$OUT/ncu-$mode.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_nc_$mode timeout 200 ncu --clock-control none -k regex:matmul -s 1 -c 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
      --section ComputeWorkloadAnalysis --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 benchmarks/switch_probe.py $sw -- matmul --size 4096 --config "${NCU_CONFIG:-128x256x64x3x8}" > "$f" 2>&1
    echo "== ncu $mode ${NCU_CONFIG:-128x256x64x3x8}"
    grep -E "Duration|Compute \(SM\)|Registers Per|Warp Cycles Per Issued|Grid Size|Block Size|Waves|Tensor|Dynamic Shared" "$f" | head -14
    grep -E "issue_stalled" "$f" | awk '$NF+0 >= 0.3 {print "    stall", $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
  done
fi
