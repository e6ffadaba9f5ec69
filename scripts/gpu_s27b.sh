#!/usr/bin/env bash
# Session 27: the native re-launch path after the staleness check moved into C, the launches-
# skipped flag became a counter and kernel[grid] stopped building a generator; its tests again.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_native_launch.py tests/test_grid_dependency.py \
    tests/test_fast_launch.py tests/test_runtime.py 2>&1 | tail -5
python3 scripts/probes/native_launch_parts.py
for i in 1 2; do timeout 120 python3 benchmarks/bench_launch.py; done
