#!/bin/bash
# GPU, session 18, second call: where W4A16's time goes (ncu at M1 split 8 and at M64), the GEMM
# at 4096^3 against cuBLAS, and a cProfile'd cache hit of the GEMM (43 ms against attention's 27 on the H100) to first launch.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 150 bash scripts/w4_profile.sh 16x128x128x4 1 2>&1 | tail -40 | tee "$OUT/w4-ncu-m1.txt"
timeout 150 bash scripts/w4_profile.sh 64x128x64x4 64 2>&1 | tail -40 | tee "$OUT/w4-ncu-m64.txt"
(cd benchmarks && timeout 100 python3 bench_matmul.py --shapes 4096x4096x4096 --dtypes bfloat16 --configs 128x256x64x4x8 --reps 20 2>&1 | quiet \
  | tail -8 | tee "$OUT/gemm4096.txt")
timeout 90 python3 benchmarks/bench_compile.py --mode gpu --kernel gemm --runs 1 --profile > "$OUT/compile-profile.txt" 2>&1
grep -A45 "one hit run" "$OUT/compile-profile.txt" | head -50
