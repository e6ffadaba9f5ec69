#!/usr/bin/env bash
# Session 27: kernel[grid] returns the C front once a native launcher exists; the native and
# launch tests, the parts probe and bench_launch twice.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_native_launch.py tests/test_gpu_kernels.py \
    tests/test_grid_dependency.py tests/test_torch_op.py tests/test_none_args.py 2>&1 | tail -4
python3 scripts/probes/native_launch_parts.py
for i in 1 2 3; do timeout 120 python3 benchmarks/bench_launch.py; done
