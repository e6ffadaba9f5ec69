#!/bin/bash
# GPU: one call that checks and measures a session's changes, each step's output also kept in
# $OUT (so a call cut short still returns what ran): the GPU tests of the code paths touched,
# the row-kernel sweep, split-K GEMM at small sizes and the attention spellings.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TILEJIT_CACHE_DIR=/tmp/tjc_session
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_kernels.py tests/test_wgmma.py tests/test_attention.py \
  tests/test_pack_programs.py tests/test_remat_indices.py tests/test_float64_math.py tests/test_atomics.py \
  tests/test_codegen.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
cd benchmarks
timeout 130 python3 bench_sweep.py --columns 128,1024,8192,16384,65536 --reps 15 2>&1 | quiet | tee "$OUT/sweep.txt"
timeout 120 python3 bench_split_k.py --sizes 512,1024 --reps 30 2>&1 | quiet | tee "$OUT/split_k.txt"
timeout 80 python3 bench_spelling.py --attention 4x32x4096x128 --gemm "" --reps 20 2>&1 | quiet | tee "$OUT/spelling.txt"
