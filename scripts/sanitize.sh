#!/usr/bin/env bash
# compute-sanitizer on the GPU: memcheck, racecheck and synccheck over the demo (every example),
# memcheck and racecheck over every GPU test kernel (`pytest -m gpu`), and a check that the
# cubins carry line info (nvdisasm prints the kernel's source lines).
#
#   bash scripts/sanitize.sh [demo|tests|all]     # one summary line per tool; logs under $OUT
#
# The GPU tests are split into one shard per GPU (TJ_SANITIZE_SHARDS overrides), and every shard
# runs under memcheck and racecheck at the same time, so a 4-GPU machine covers them four times
# as fast. TJ_SANITIZE_TESTS_S caps each shard's run (default 240 s; racecheck is the slower one:
# on one H200 memcheck got through 106 GPU tests in 270 s, racecheck 44), and TJ_SANITIZE_K adds
# a pytest -k expression to split the tests over several calls (e.g. "chunk or norm"), or
# TJ_SANITIZE_IDS names a file of test ids to run instead (e.g. those a cut run did not reach).
# TJ_SANITIZE_DEMO_S caps each demo run (default 300 s). Racecheck runs the demo with
# TILEJIT_AUTOTUNE=0 (the examples' first configs), unless TJ_SANITIZE_DEMO_TUNE=1, and the GPU
# tests likewise, unless TJ_SANITIZE_TESTS_TUNE=1 (memcheck tunes both).
#
# The GPU tests run under the sanitizer with the cache emptied first, so every kernel is compiled
# and launched under it. Tests that need more than 2 GiB of device memory (the past-2**31 ones)
# or that time launches or configs are left out: memcheck's shadow memory and its slow-down make them
# meaningless there (they run unsanitized in scripts/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:-all}
case "$part" in all|demo|tests) ;; *) echo "sanitize: unknown part '$part' (demo, tests or all)"; exit 2 ;; esac
OUT=${OUT:-$(mktemp -d /tmp/sanitize.XXXXXX)}
export TILEJIT_CACHE_DIR=${TILEJIT_CACHE_DIR:-/tmp/tj-sanitize-cache} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
summary() { grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$1" | tail -1; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "$ngpu" -ge 1 ] || ngpu=1
if [ "$part" != tests ]; then       # the three demo runs go on in the background, beside the tests
    g=0
    for tool in memcheck racecheck synccheck; do
        # racecheck times every config of the autotuned examples too slowly (540 s were not enough
        # on the H200): it checks the configs the untuned examples launch (TJ_SANITIZE_DEMO_TUNE=1: all)
        tune=1; [ "$tool" = racecheck ] && tune=${TJ_SANITIZE_DEMO_TUNE:-0}
        TILEJIT_AUTOTUNE=$tune CUDA_VISIBLE_DEVICES=$((g++ % ngpu)) TILEJIT_BACKEND=cuda \
            TILEJIT_CACHE_DIR="$TILEJIT_CACHE_DIR-demo-$tool" \
            timeout "${TJ_SANITIZE_DEMO_S:-300}" compute-sanitizer --tool "$tool" --report-api-errors no --print-limit 20 \
            python3 -m tilejit demo >"$OUT/demo-$tool.log" 2>&1 &
    done
fi

if [ "$part" != demo ]; then
    deselect="past_2_31 or 2_31 or bench or launch_overhead or timing or within_5_percent"
    kexpr="not ($deselect)${TJ_SANITIZE_K:+ and ($TJ_SANITIZE_K)}"
    # one shard per GPU (TJ_SANITIZE_SHARDS overrides), every shard under both tools at once
    shards=${TJ_SANITIZE_SHARDS:-$ngpu}
    if [ -n "${TJ_SANITIZE_IDS:-}" ]; then      # a file of test ids: those a cut run left
        grep '::' "$TJ_SANITIZE_IDS" >"$OUT/test-ids.txt"
    else
        python3 -m pytest -m gpu --collect-only -q -p no:cacheprovider -k "$kexpr" tests 2>/dev/null \
            | grep '::' >"$OUT/test-ids.txt"
    fi
    echo "gpu tests: $(wc -l <"$OUT/test-ids.txt") selected, $shards shard(s) on $ngpu GPU(s)"
    work=$(mktemp -d /tmp/sanitize-work.XXXXXX)
    for tool in memcheck racecheck; do
        for ((i = 0; i < shards; i++)); do
            awk -v n="$shards" -v i="$i" '(NR - 1) % n == i' "$OUT/test-ids.txt" >"$work/ids-$i"
            [ -s "$work/ids-$i" ] || continue
            rm -rf "$TILEJIT_CACHE_DIR-$tool-$i"
            mapfile -t ids <"$work/ids-$i"      # ids hold brackets: never let the shell glob them
            # racecheck and the autotuner: as for the demo (test_softmax[cuda] timed every config
            # of each drawn shape and did not finish in 300 s)
            tune=1; [ "$tool" = racecheck ] && tune=${TJ_SANITIZE_TESTS_TUNE:-0}
            TILEJIT_AUTOTUNE=$tune CUDA_VISIBLE_DEVICES=$((i % ngpu)) TILEJIT_CACHE_DIR="$TILEJIT_CACHE_DIR-$tool-$i" \
                timeout "${TJ_SANITIZE_TESTS_S:-240}" compute-sanitizer --tool "$tool" \
                --report-api-errors no --print-limit 20 python3 -m pytest -v -p no:cacheprovider \
                "${ids[@]}" >"$work/$tool-$i.log" 2>&1 &
        done
    done
    wait
    for tool in memcheck racecheck; do
        log="$OUT/tests-$tool.log"
        : >"$log"
        for ((i = 0; i < shards; i++)); do
            [ -f "$work/$tool-$i.log" ] || continue
            { echo "=== shard $i"; cat "$work/$tool-$i.log"; } >>"$log"
            # one line per test (-v), so a shard cut by the timeout still says how far it got
            echo "gpu tests $tool shard $i/$shards: $(wc -l <"$work/ids-$i") selected," \
                "$(grep -cE ' PASSED' "$work/$tool-$i.log") passed," \
                "$(grep -cE '^tests/.* (FAILED|ERROR)' "$work/$tool-$i.log") failed | $(summary "$work/$tool-$i.log")"
        done
        grep -E '^(FAILED|ERROR) |Invalid|Race reported' "$log" | sort | uniq -c | head -10
    done
    rm -rf "$work"
fi

wait
if [ "$part" != tests ]; then
    for tool in memcheck racecheck synccheck; do
        echo "demo $tool: $(grep -cE ' pass ' "$OUT/demo-$tool.log") examples passed," \
            "$(grep -ciE ' fail' "$OUT/demo-$tool.log") failed | $(summary "$OUT/demo-$tool.log")"
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
