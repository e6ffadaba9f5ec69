#!/usr/bin/env bash
# Session 27: GPU tests that launch many kernels (hypothesis among them) with the native
# re-launch path on, so that every specialisation change goes back to the Python path.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
set -o pipefail
timeout 480 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_kernels.py tests/test_gpu_runtime.py \
    tests/test_fuzz_kernels.py tests/test_none_args.py tests/test_kernels.py tests/test_predicates.py \
    tests/test_masks.py tests/test_scans.py tests/test_torch_op.py tests/test_persist_programs.py \
    tests/test_device_assert.py tests/test_gathers.py tests/test_generic_reduce.py 2>&1 | tee $OUT/gpu_tests.log | tail -25
