#!/bin/bash
# GPU probe of persist_programs: correctness of the row kernels on cuda, then the row-kernel sweep
# with persistence on (the default) and off, each in a fresh cache.  Usage: bash scripts/persist_probe.sh COLUMNS DTYPES
set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
COLS=${1:-1024,4096,8192,16384}
DT=${2:-bfloat16,float32}
TILEJIT_CACHE_DIR=/tmp/tjc_p timeout 200 python3 -m pytest -q -m gpu tests/test_persist_programs.py tests/test_gpu_kernels.py 2>&1 | tail -8
TILEJIT_CACHE_DIR=/tmp/tjc_on timeout 200 python3 benchmarks/switch_probe.py tilejit.passes.persist_programs.PERSIST=True -- --columns $COLS --dtypes $DT --kernels softmax,layernorm,rmsnorm --reps 15 2>&1 | grep -v "Warning\|entry = self"
TILEJIT_CACHE_DIR=/tmp/tjc_off timeout 200 python3 benchmarks/switch_probe.py tilejit.passes.persist_programs.PERSIST=False -- --columns $COLS --dtypes $DT --kernels softmax,layernorm,rmsnorm --reps 15 2>&1 | grep -v "Warning\|entry = self"
