#!/bin/bash
# GPU (session 26, last): the dependent-launch GPU tests (a captured CUDA graph among them), the
# torch op's and decode's; compute-sanitizer memcheck of the dependent pair; bench_decode over its
# default configs (11 now) at KV 8192 / 65536; bench_launch.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_grid_dependency.py tests/test_torch_op.py \
  tests/test_decode_attention.py 2>&1 | tail -3
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/test_grid_dependency.py -k "long_kernel and ctypes" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" | tail -3
cd benchmarks
TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 240 python3 bench_decode.py --seqs 8192,65536 --reps 30 2>&1 | grep -vE "^\s*$" | tail -5
timeout 100 python3 bench_launch.py 2>&1 | tail -8
