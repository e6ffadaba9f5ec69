#!/bin/bash
# GPU (session 19): stream-K (passes/stream_k.py) on the GPU -- its tests and the persistent ones,
# then bench_matmul.py with the defaults, with PERSIST_TILES, and with PERSIST_TILES + STREAM_K
# (every config's figure: BENCH_EACH), one process each, cuBLAS and Triton in the same runs.
# Env: SHAPES, CONFIGS, MODES (base pt sk), TESTS=0 skips the tests, NCU=1 profiles sk at 4096^3.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_matmul.py
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" != 0 ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-240} python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
    tests/test_stream_k.py tests/test_persist_tiles.py > "$OUT/tests.txt" 2>&1
  tail -25 "$OUT/tests.txt"
fi
SHAPES=${SHAPES:-4096x4096x4096,8192x8192x8192,4096x4096x14336,128x8192x8192}
CONFIGS=${CONFIGS:-128x256x64x3x8,64x128x64x7x4,64x128x128x4x4}
PT=tilejit.passes.specialise_warps.PERSIST_TILES=True
SK=tilejit.passes.stream_k.STREAM_K=True
for mode in ${MODES:-base pt sk}; do
  [ "$mode" = none ] && continue
  sw=""; [ $mode = pt ] && sw="$PT"; [ $mode = sk ] && sw="$PT $SK"
  echo "== $mode"
  TILEJIT_CACHE_DIR=/tmp/tjc_b_$mode timeout ${BENCH_S:-240} python3 benchmarks/switch_probe.py $sw -- \
    --shapes $SHAPES --dtypes bfloat16 --configs $CONFIGS --reps ${REPS:-20} > "$OUT/bench-$mode.txt" 2>&1
  grep -v "Warning\|warn(" "$OUT/bench-$mode.txt" | tail -40
done
if [ "${NCU:-0}" != 0 ]; then
  export PROBE_SCRIPT=profile_one.py
  for mode in pt sk; do
    sw="$PT"; [ $mode = sk ] && sw="$PT $SK"
    f="$OUT/ncu-$mode.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_nc_$mode timeout 200 ncu --clock-control none -k regex:matmul -s 1 -c 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 benchmarks/switch_probe.py $sw -- matmul ${NCU_ARGS:---size 4096} --config "${NCU_CONFIG:-128x256x64x3x8}" > "$f" 2>&1
    echo "== ncu $mode"
    grep -E "Duration|Compute \(SM\)|Memory Throughput|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Registers Per|Warp Cycles Per Issued|Grid Size|Waves" "$f" | head -14
  done
fi
