#!/usr/bin/env bash
# Session 27: the native re-launch path (runtime/native.py) on the GPU: its tests, the tests
# around launching, and bench_launch (native row, the Python path's rows, raw, Triton).
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "from tilejit.runtime import native; print('native:', native.status())"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_native_launch.py tests/test_grid_dependency.py \
    tests/test_fast_launch.py tests/test_runtime.py tests/test_torch_op.py 2>&1 | tail -15
for i in 1 2; do timeout 120 python3 benchmarks/bench_launch.py; done
