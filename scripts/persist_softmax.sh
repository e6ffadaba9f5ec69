#!/bin/bash
# GPU probe: softmax with the persistent loop (re-reading x after the max, or keeping it), against plain.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
sweep() { timeout 200 python3 benchmarks/switch_probe.py "$@" -- --columns 1024,4096,8192,16384 --dtypes bfloat16,float32 --kernels softmax --reps 15 2>&1 | grep -v "Warning\|entry = self" | awk '{print $1, $2, $3, $4, $5, $8}'; }
echo "== keep"; TILEJIT_CACHE_DIR=/tmp/s1 sweep tilejit.passes.persist_programs.PERSIST='"always"' tilejit.passes.persist_programs.REREAD_OTHER=False
echo "== keep, 768"; TILEJIT_CACHE_DIR=/tmp/s2 sweep tilejit.passes.persist_programs.PERSIST='"always"' tilejit.passes.persist_programs.REREAD_OTHER=False tilejit.passes.persist_programs.THREADS_PER_SM=768
echo "== plain"; TILEJIT_CACHE_DIR=/tmp/s3 sweep tilejit.passes.persist_programs.PERSIST=False
