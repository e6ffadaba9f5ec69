#!/bin/bash
# GPU: session 13's third call, after the fixes of what the first two found:
#   1. scripts/probes/attention_causal.py under the default switches (BM 64 / BN 128 / 4 warps,
#      warp-specialised, read a stale q tile without its proxy fence);
#   2. the GPU tests of what changed: attention (the fence), the torch op's gradients, float64
#      (// and %, the DMMA dot), the launch path (ctypes binding), carried layouts;
#   3. examples/train_gpt.py, 60 steps in bfloat16 against the same model on torch's operators;
#   4. float64 GEMM on DMMA against cuBLAS DGEMM (scripts/probes/f64_gemm.py);
#   5. bench_language.py: histogram, EmbeddingBag, top-k and MoE against torch's operators;
#   6. bench_launch.py: the ctypes binding to libcuda against cuda-python's, raw and Triton.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 60 python3 scripts/probes/attention_causal.py - 2>&1 | quiet | tee "$OUT/attention_causal.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 100 python3 -m pytest -q -m gpu -rf --tb=short --timeout=60 -p no:cacheprovider \
  tests/test_attention.py tests/test_attention_backward.py tests/test_float64.py tests/test_gpu_kernels.py \
  tests/test_gpu_runtime.py tests/test_carried_layouts.py 2>&1 | quiet > "$OUT/gpu_tests.txt"; grep -E "^(FAILED|ERROR)|passed|failed|^E " "$OUT/gpu_tests.txt" | head -30
TILEJIT_CACHE_DIR=/tmp/tjc_g timeout 60 python3 examples/train_gpt.py --steps 60 2>&1 | quiet | tail -3 | tee "$OUT/train_gpt.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 45 python3 scripts/probes/f64_gemm.py 4096 2>&1 | grep -v "Warning\|entry = self" | tee "$OUT/f64_gemm.txt"
(cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 50 python3 bench_language.py --reps 20 2>&1 | grep -v "Warning\|entry = self" | tail -9 | tee "$OUT/language.txt")
(cd benchmarks && timeout 30 python3 bench_launch.py 2>&1 | tail -8 | tee "$OUT/launch.txt")
