#!/bin/bash
# GPU, session 18, fourth call: the driver-linker probe, the GEMM's cache hit profiled, the GEMM
# at 4096^3 against cuBLAS.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
python3 -c "import sys; print('dont_write_bytecode', sys.dont_write_bytecode, sys.pycache_prefix)"; env | grep "^PYTHON"
timeout 60 python3 scripts/probes/culink.py 2>&1 | tail -20 | tee "$OUT/culink.txt"
timeout 90 python3 benchmarks/bench_compile.py --mode gpu --kernel gemm --runs 1 --profile > "$OUT/compile-profile.txt" 2>&1
grep -A40 "one hit run" "$OUT/compile-profile.txt" | head -45
(cd benchmarks && timeout 100 python3 bench_matmul.py --shapes 4096x4096x4096 --dtypes bfloat16 --configs 128x256x64x4x8 --reps 20 2>&1 | quiet \
  | tail -6 | tee "$OUT/gemm4096.txt")
# with Python's bytecode cached (if this host sets PYTHONDONTWRITEBYTECODE, every process compiles
# tilejit's sources: the figures above then include that)
(unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pyc; timeout 100 python3 benchmarks/bench_compile.py --mode gpu \
  --kernel attention --runs 2 --stages 2>&1 | quiet | grep -v "^$" | tail -6 | tee "$OUT/compile-bytecode.txt")
