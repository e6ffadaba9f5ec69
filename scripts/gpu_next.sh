#!/bin/bash
# GPU: what session 14 left for the H200 (about 8 minutes).
#   1. bench_compile in GPU mode after the hit path's last cuts (libcuda opened by soname, no
#      importlib.metadata): attention cache hit to first launch (38.6 ms before; target 30) and cold;
#   2. the sweep plot for the README: row kernels, GEMM by size, attention by sequence length;
#   3. ncu of the bf16 8192³ GEMM, tilejit's 128x256x64x4x8 against cuBLAS's kernel (#14's last 1-7%).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
(cd benchmarks && timeout 90 python3 bench_compile.py --mode gpu --kernel attention --runs 3 2>&1 | quiet | tail -3 \
  | tee "$OUT/compile.txt")
(cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_s timeout 300 python3 bench_sweep.py --columns 128,1024,4096,16384,65536 \
  --dtypes bfloat16 --reps 10 --gemm 1024,2048,4096,8192 --attention 1024,2048,4096,8192 \
  --png "$OUT/sweep-$(date +%F).png" 2>&1 | quiet | tail -30 | tee "$OUT/sweep.txt")
OUT=$OUT bash scripts/ncu_profile.sh matmul matmul --size 8192 --config 128x256x64x4x8 | tee "$OUT/ncu-tilejit.txt"
timeout 120 ncu --clock-control none -k "regex:gemm|nvjet|cutlass|sm90" -s 1 -c 1 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  python3 benchmarks/profile_one.py matmul --size 8192 --cublas > "$OUT/ncu-cublas-full.txt" 2>&1
grep -E "gemm|nvjet|Duration|Compute \(SM\)|Registers Per|Grid Size|Block Size|Waves|Warp Cycles Per Issued|Dynamic Shared|Cluster" \
  "$OUT/ncu-cublas-full.txt" | head -20 | tee "$OUT/ncu-cublas.txt"
