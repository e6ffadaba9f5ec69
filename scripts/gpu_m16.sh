#!/bin/bash
# GPU: where the small-M GEMM (M16 N8192 K8192, bf16) loses to cuBLAS. The GPU tests of the
# session's paths first, then ncu (clocks unlocked) of tilejit's best M16 config and of cuBLAS's
# kernel on the same shape, then bench_matmul.py over the small-M configs (BENCH_EACH), each
# step's output also kept in $OUT.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TILEJIT_CACHE_DIR=/tmp/tjc_m16
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 200 python3 -m pytest -q -m gpu tests/test_dot_scaled.py tests/test_carried_layouts.py \
  tests/test_prefetch_loads.py ${TESTS:-} 2>&1 | tail -4 | tee "$OUT/tests.txt"
CONFIG=${CONFIG:-64x128x128x4x4}
OUT=$OUT bash scripts/ncu_profile.sh matmul matmul --m 16 --size 8192 --config $CONFIG | tee "$OUT/ncu-tilejit.txt"
timeout 200 ncu --clock-control none -k "regex:gemm|nvjet|cutlass|sm90" -s 1 -c 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section WarpStateStats \
  python3 benchmarks/profile_one.py matmul --m 16 --size 8192 --cublas > "$OUT/ncu-cublas-full.txt" 2>&1
grep -E "gemm|nvjet|Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Grid Size|Block Size|Waves|L2 Hit|Mem Busy|Max Bandwidth|Dynamic Shared|Cluster|Warp Cycles Per Issued" \
  "$OUT/ncu-cublas-full.txt" | head -30 | tee "$OUT/ncu-cublas.txt"
cd benchmarks
BENCH_EACH=1 timeout 200 python3 bench_matmul.py --shapes 16x8192x8192 --dtypes bfloat16 --reps 20 \
  --configs ${CONFIGS:-64x128x128x4x4,64x128x64x7x4,64x128x64x8x4,64x256x64x4x4,64x256x64x5x4,64x64x128x6x4,64x64x64x8x4} \
  2>&1 | quiet | tee "$OUT/m16.txt"
