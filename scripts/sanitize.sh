#!/usr/bin/env bash
# compute-sanitizer over the examples on the GPU (memcheck, racecheck, synccheck), and a check
# that the cubins carry line info (nvdisasm prints the kernel's source lines).
#
#   bash scripts/sanitize.sh            # prints one summary line per tool, logs under $OUT
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$(mktemp -d /tmp/sanitize.XXXXXX)}
export TILEJIT_BACKEND=cuda TILEJIT_CACHE_DIR=${TILEJIT_CACHE_DIR:-/tmp/tj-sanitize-cache} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool "$tool" --report-api-errors no --print-limit 20 \
        python3 -m tilejit demo >"$OUT/$tool.log" 2>&1
    echo "$tool: exit $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
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
