#!/bin/bash
# GPU: session 13's third call, after the fixes of what the first two found:
#   1. scripts/probes/attention_causal.py under the default switches (BM 64 / BN 128 / 4 warps,
#      warp-specialised, read a stale q tile without its proxy fence);
#   2. the GPU tests that failed (or were not reached) in the first two calls, and the attention,
#      wgmma and carried-layout files the fence touches (60 s per test), failures with tracebacks;
#   3. the demo on the cuda backend;
#   4. TMA stores A/B: bench_matmul.py with TILEJIT_TMA_STORE=0 and =1 (fresh caches), after
#      printing what each compiles (inspect().copy_engines);
#   5. float64 GEMM on DMMA against cuBLAS DGEMM (scripts/probes/f64_gemm.py);
#   6. bench_launch.py: the ctypes binding to libcuda against cuda-python's, raw and Triton.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 80 python3 scripts/probes/attention_causal.py - 2>&1 | quiet | tee "$OUT/attention_causal.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 170 python3 -m pytest -q -m gpu -rf --tb=short --timeout=60 -p no:cacheprovider \
  tests/test_attention.py tests/test_attention_backward.py tests/test_float64.py tests/test_gpu_kernels.py \
  tests/test_wgmma.py tests/test_carried_layouts.py tests/test_predicates.py tests/test_prefetch_loads.py \
  tests/test_kernels.py 2>&1 | quiet > "$OUT/gpu_tests.txt"; grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/gpu_tests.txt" | head -30
TILEJIT_BACKEND=cuda TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 50 python3 -m tilejit demo 2>&1 | quiet | tail -8 | tee "$OUT/demo.txt"
for s in 0 1; do
  echo "== TILEJIT_TMA_STORE=$s"
  TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s timeout 30 python3 -c "
import torch, tilejit as tj
from tilejit.examples import matmul
a = torch.ones((4096, 4096), device='cuda', dtype=torch.bfloat16)
print('copy engines:', matmul.matmul_kernel.kernel.inspect(a, a, a, BM=128, BN=256, BK=64, STAGES=4, num_warps=8).copy_engines)" 2>&1 | quiet
  (cd benchmarks && TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s BENCH_EACH=1 timeout 70 python3 bench_matmul.py \
    --shapes 4096x4096x4096,8192x8192x8192 --dtypes bfloat16 --reps 20 --configs 128x256x64x4x8 2>&1 | quiet | tail -6 | tee "$OUT/store$s.txt")
done
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 60 python3 scripts/probes/f64_gemm.py 4096 2>&1 | grep -v "Warning\|entry = self" | tee "$OUT/f64_gemm.txt"
(cd benchmarks && timeout 40 python3 bench_launch.py 2>&1 | tail -8 | tee "$OUT/launch.txt")
