#!/bin/bash
# GPU probe of persist_programs: the persistent row kernels on cuda (TILEJIT_PERSIST=always and the
# default), then the row-kernel sweep with the loop everywhere (at each THREADS_PER_SM hint given)
# and nowhere, each in a fresh cache.  Usage: bash scripts/persist_probe.sh COLUMNS DTYPES [HINTS]
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
COLS=${1:-1024,4096,8192}
DT=${2:-bfloat16,float32}
HINTS=${3:-None}
for p in always 1; do
  TILEJIT_PERSIST=$p TILEJIT_CACHE_DIR=/tmp/tjc_t$p timeout 200 python3 -m pytest -q -m gpu tests/test_persist_programs.py 2>&1 | tail -1
done
sweep() { timeout 200 python3 benchmarks/switch_probe.py "$@" -- --columns $COLS --dtypes $DT --kernels softmax,layernorm,rmsnorm --reps 15 2>&1 | grep -v "Warning\|entry = self" | awk '{print $1, $2, $3, $4, $5, $8}'; }
for h in ${HINTS//,/ }; do
  echo "== persistent everywhere, THREADS_PER_SM=$h"
  TILEJIT_CACHE_DIR=/tmp/tjc_on$h sweep tilejit.passes.persist_programs.PERSIST='"always"' tilejit.passes.persist_programs.THREADS_PER_SM=$h
done
echo "== plain"
TILEJIT_CACHE_DIR=/tmp/tjc_off sweep tilejit.passes.persist_programs.PERSIST=False
