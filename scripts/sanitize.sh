#!/usr/bin/env bash
# compute-sanitizer on the GPU: memcheck, racecheck and synccheck over the demo (every example),
# memcheck and racecheck over every GPU test kernel (`pytest -m gpu`), and a check that the
# cubins carry line info (nvdisasm prints the kernel's source lines).
#
#   bash scripts/sanitize.sh [demo|tests|all]     # one summary line per tool; logs under $OUT
#
# TJ_SANITIZE_TESTS_S caps each tool's pytest run (default 240 s; racecheck is the slower one:
# on the H200 memcheck got through 106 GPU tests in 270 s, racecheck 44), and TJ_SANITIZE_K adds
# a pytest -k expression to split the tests over several calls (e.g. "chunk or norm").
#
# The GPU tests run under the sanitizer with the cache emptied first, so every kernel is compiled
# and launched under it. Tests that need more than 2 GiB of device memory (the past-2**31 ones)
# or that time launches are left out: memcheck's shadow memory and its slow-down make them
# meaningless there (they run unsanitized in scripts/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:-all}
case "$part" in all|demo|tests) ;; *) echo "sanitize: unknown part '$part' (demo, tests or all)"; exit 2 ;; esac
OUT=${OUT:-$(mktemp -d /tmp/sanitize.XXXXXX)}
export TILEJIT_CACHE_DIR=${TILEJIT_CACHE_DIR:-/tmp/tj-sanitize-cache} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
summary() { grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$1" | tail -1; }

if [ "$part" != tests ]; then
    for tool in memcheck racecheck synccheck; do
        TILEJIT_BACKEND=cuda timeout 300 compute-sanitizer --tool "$tool" --report-api-errors no \
            --print-limit 20 python3 -m tilejit demo >"$OUT/demo-$tool.log" 2>&1
        echo "demo $tool: exit $? | $(summary "$OUT/demo-$tool.log")"
    done
fi

if [ "$part" != demo ]; then
    deselect="past_2_31 or 2_31 or bench or launch_overhead or timing"
    for tool in memcheck racecheck; do
        rm -rf "$TILEJIT_CACHE_DIR"
        timeout "${TJ_SANITIZE_TESTS_S:-240}" compute-sanitizer --tool "$tool" --report-api-errors no \
            --print-limit 20 python3 -m pytest -m gpu -v -p no:cacheprovider -k "not ($deselect)${TJ_SANITIZE_K:+ and ($TJ_SANITIZE_K)}" \
            tests >"$OUT/tests-$tool.log" 2>&1
        rc=$?
        # one line per test (-v), so a run cut by the timeout still says how far it got
        echo "gpu tests $tool: exit $rc | $(grep -cE ' PASSED' "$OUT/tests-$tool.log") passed, $(grep -cE ' (FAILED|ERROR)' "$OUT/tests-$tool.log") failed$([ $rc -eq 124 ] && echo ' before the timeout') | $(summary "$OUT/tests-$tool.log")"
        grep -E '^(FAILED|ERROR) |Invalid|Race reported' "$OUT/tests-$tool.log" | sort | uniq -c | head -10
    done
fi

[ "$part" = tests ] && exit 0
python3 - "$OUT" <<'PY'
import subprocess, sys
import numpy as np
from examples.softmax import softmax_kernel
x = np.zeros((64, 1000), np.float32)
cubin = softmax_kernel.inspect(x, x, BLOCK=1024).cubin
path = f"{sys.argv[1]}/softmax.cubin"
open(path, "wb").write(cubin)
text = subprocess.run(["nvdisasm", "--print-line-info", path], capture_output=True, text=True).stdout
lines = sorted({l.split("line")[1].split(",")[0].strip() for l in text.splitlines() if "softmax.py" in l and "line" in l})
print("nvdisasm line info: examples/softmax.py lines", lines)
PY
