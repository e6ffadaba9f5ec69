#!/bin/bash
# GPU (session 32): cold compile to first launch of the attention and GEMM kernels (#17's 1.0 s
# target) with the LLVM level at 3 (default) and at 1 (codegen.llvm.IR_OPT), each with its stages.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for kernel in attention gemm; do
  for level in 3 1; do
    echo "-- $kernel IR_OPT=$level"
    timeout 150 python3 benchmarks/bench_compile.py --mode gpu --kernel $kernel --runs 3 --stages \
      --set tilejit.codegen.llvm.IR_OPT=$level 2>&1 | grep -v "^ *$" | tail -8
  done
done 2>&1 | tee "$OUT/compile.txt"
