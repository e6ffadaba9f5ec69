#!/bin/bash
# GPU (session 28, last): the GPU tests of the areas the session's changes touch on every kernel
# (loads in sorted register order, the RESHAPE merge renaming, the nibble path, the prefetch rule).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/test_nibble_operands.py tests/test_w4a16.py \
  tests/test_nibble_pairs.py tests/test_packed4.py tests/test_gpu_kernels.py tests/test_kernels.py tests/test_masks.py \
  tests/test_decode_attention.py tests/test_dot.py tests/test_dot_scaled.py tests/test_lower_memory.py \
  tests/test_attention.py tests/test_fuzz_kernels.py 2>&1 | tail -4
