#!/usr/bin/env bash
# Session 27, last: after the tensor maps are encoded before any shared slot is written, and
# the stream reader became optional (CPU torch): the native, TMA and launch GPU tests.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_native_launch.py tests/test_tensormap.py \
    tests/test_gpu_kernels.py tests/test_grid_dependency.py tests/test_tma_store.py tests/test_wgmma.py 2>&1 | tail -3
