#!/bin/bash
# GPU: session 14: (1) the driver through ctypes on libcuda (TILEJIT_LAUNCH_BINDING=ctypes): the
# GPU tests of the runtime, TMA, persistent and cluster kernels and attention under it, then a new
# process's cache hit and cold compile under each binding (bench_compile), and bench_launch;
# (2) the histogram example counting privately per program, against torch.bincount.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_LAUNCH_BINDING=ctypes TILEJIT_CACHE_DIR=/tmp/tjc_c timeout 200 python3 -m pytest -q -m gpu -x --tb=short \
  tests/test_libcuda.py tests/test_gpu_runtime.py tests/test_gpu_kernels.py tests/test_tma.py tests/test_tma_store.py \
  tests/test_persist_programs.py tests/test_persist_tiles.py tests/test_cluster_rows.py tests/test_fast_launch.py \
  tests/test_ring_barriers.py tests/test_runtime.py 2>&1 | quiet | tail -15 | tee "$OUT/tests_ctypes.txt"
for b in ctypes cuda-python; do
  echo "== TILEJIT_LAUNCH_BINDING=$b"
  (cd benchmarks && TILEJIT_LAUNCH_BINDING=$b timeout 100 python3 bench_compile.py --mode gpu --kernel attention --runs 3 \
    2>&1 | quiet | tail -3 | tee "$OUT/compile_$b.txt")
done
(cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 100 python3 bench_language.py --reps 20 --only histogram,histogram_scatter \
  2>&1 | quiet | tail -4 | tee "$OUT/language.txt")
(cd benchmarks && TILEJIT_LAUNCH_BINDING=ctypes timeout 60 python3 bench_launch.py 2>&1 | tail -9 | tee "$OUT/launch.txt")
TILEJIT_CACHE_DIR=/tmp/tjc_g timeout 90 python3 examples/train_gpt.py --steps 200 2>&1 | quiet | tail -2 | tee "$OUT/train_gpt.txt"
