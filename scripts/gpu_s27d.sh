#!/usr/bin/env bash
# Session 27: after the native module's build moved off the launch path (a thread), the GPU
# tests of gpu_s27c.sh again, the native tests, then bench_launch and the parts probe.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
rm -rf ~/.cache/tilejit/native          # the first re-launch finds no module built
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_kernels.py tests/test_gpu_runtime.py \
    tests/test_native_launch.py tests/test_grid_dependency.py tests/test_fuzz_kernels.py tests/test_none_args.py \
    tests/test_kernels.py tests/test_torch_op.py tests/test_persist_programs.py tests/test_device_assert.py 2>&1 | tail -6
python3 scripts/probes/native_launch_parts.py
for i in 1 2; do timeout 120 python3 benchmarks/bench_launch.py; done
