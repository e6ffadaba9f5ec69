#!/usr/bin/env bash
# Session 27: bool and NumPy scalar arguments on the fast path (bool natively too): the native
# and fast-launch tests and the GPU kernel tests.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/test_native_launch.py tests/test_fast_launch.py \
    tests/test_gpu_kernels.py tests/test_none_args.py tests/test_torch_op.py 2>&1 | tail -4
