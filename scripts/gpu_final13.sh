#!/bin/bash
# GPU: session 13's short last call (under 3 minutes; little device time was left after failed
# starts): the attention fix (scripts/probes/attention_causal.py), the GPU tests of attention,
# float64 (// and %, the DMMA dot) and the launch path (ctypes binding), bench_launch.py and
# the float64 GEMM against cuBLAS DGEMM.  gpu_verify13.sh holds the longer list.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 45 python3 scripts/probes/attention_causal.py - 2>&1 | quiet | tee "$OUT/attention_causal.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 60 python3 -m pytest -q -m gpu -rf --tb=short --timeout=40 -p no:cacheprovider \
  tests/test_attention.py tests/test_float64.py "tests/test_attention_backward.py::test_the_torch_op_on_the_gpu_against_sdpa" \
  2>&1 | quiet > "$OUT/gpu_tests.txt"; grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/gpu_tests.txt" | head -20
(cd benchmarks && timeout 20 python3 bench_launch.py --batches 10 2>&1 | tail -7 | tee "$OUT/launch.txt")
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 30 python3 scripts/probes/f64_gemm.py 4096 2>&1 | quiet | tee "$OUT/f64_gemm.txt"
