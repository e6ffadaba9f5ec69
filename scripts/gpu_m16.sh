#!/bin/bash
# GPU: one call for the session's GEMM work, each step's output also kept in $OUT.
#  1. the GPU tests of the session's paths (TMA stores, dot_scaled, carried layouts, prefetch);
#  2. TMA stores A/B: bench_matmul.py with TILEJIT_TMA_STORE=0 and =1 (fresh caches);
#  3. where the small-M GEMM (M16 N8192 K8192, bf16) loses to cuBLAS: ncu (clocks unlocked) of
#     tilejit's best M16 config and of cuBLAS's kernel on the same shape, then bench_matmul.py
#     over the small-M configs (BENCH_EACH).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 200 python3 -m pytest -q -m gpu tests/test_tma_store.py tests/test_dot_scaled.py \
  tests/test_carried_layouts.py tests/test_prefetch_loads.py ${TESTS:-} 2>&1 | tail -4 | tee "$OUT/tests.txt"
for s in 0 1; do
  echo "== TILEJIT_TMA_STORE=$s"
  # what the switch compiles (the A/B means nothing unless "tma store" shows only with =1)
  TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s python3 -c "
import torch, tilejit as tj
from tilejit.examples import matmul
a = torch.ones((4096, 4096), device='cuda', dtype=torch.bfloat16)
print('copy engines:', matmul.matmul_kernel.kernel.inspect(a, a, a, BM=128, BN=256, BK=64, STAGES=4, num_warps=8).copy_engines)"
  (cd benchmarks && TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s BENCH_EACH=1 timeout 150 python3 bench_matmul.py \
    --shapes ${STORE_SHAPES:-4096x4096x4096,8192x8192x8192,4096x4096x14336} --dtypes bfloat16 --reps 20 \
    --configs ${STORE_CONFIGS:-128x256x64x4x8,128x256x64x3x8} 2>&1 | quiet | tee "$OUT/store$s.txt")
done
[ -n "$SKIP_M16" ] && exit 0
export TILEJIT_CACHE_DIR=/tmp/tjc_m16
CONFIG=${CONFIG:-64x128x128x4x4}
OUT=$OUT bash scripts/ncu_profile.sh matmul matmul --m 16 --size 8192 --config $CONFIG | tee "$OUT/ncu-tilejit.txt"
timeout 120 ncu --clock-control none -k "regex:gemm|nvjet|cutlass|sm90" -s 1 -c 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section WarpStateStats \
  python3 benchmarks/profile_one.py matmul --m 16 --size 8192 --cublas > "$OUT/ncu-cublas-full.txt" 2>&1
grep -E "gemm|nvjet|Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Grid Size|Block Size|Waves|L2 Hit|Mem Busy|Max Bandwidth|Dynamic Shared|Cluster|Warp Cycles Per Issued" \
  "$OUT/ncu-cublas-full.txt" | head -30 | tee "$OUT/ncu-cublas.txt"
cd benchmarks
BENCH_EACH=1 timeout 150 python3 bench_matmul.py --shapes 16x8192x8192 --dtypes bfloat16 --reps 20 \
  --configs ${CONFIGS:-64x128x128x4x4,64x128x64x7x4,64x128x64x8x4,64x256x64x4x4,64x256x64x5x4,64x64x128x6x4,64x64x64x8x4} \
  2>&1 | quiet | tee "$OUT/m16.txt"
