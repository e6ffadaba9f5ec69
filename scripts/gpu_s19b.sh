#!/bin/bash
# GPU (session 19): W4A16's one-launch split-K (layers + last-arriver sum) against the atomics +
# zeroing + cast path it replaces, alternating new / old / new / old in one call (the old example
# and bench_quant.py from scripts/probes/w4_old swapped in place: the install is editable; that
# directory held the atomics version for session 19's runs and is gone: recreate it with git show), then
# the GPU tests of w4a16 and atomics.  Env: W4 (M list), W4_CONFIGS, SIDES (new old, or a
# scripts/probes/w4_<name> variant: a directory holding the example, or a script that rewrites it; session 20 ran "new zfold", the zero point folded out of the loop,
# 8-10% slower: that probe is gone), ROUNDS, TESTS=0.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
cp examples/w4a16_gemm.py /tmp/new_ex.py; cp benchmarks/bench_quant.py /tmp/new_bq.py
CFG=${W4_CONFIGS:-16x64x128x4x4,16x64x128x4x8,16x128x128x4x8,64x64x128x4x8,64x128x64x4x1}
for round in $(seq ${ROUNDS:-2}); do
  for side in ${SIDES:-new old}; do
    if [ $side = old ]; then cp scripts/probes/w4_old/w4a16_gemm.py examples/; cp scripts/probes/w4_old/bench_quant.py benchmarks/
    elif [ $side = new ]; then cp /tmp/new_ex.py examples/w4a16_gemm.py; cp /tmp/new_bq.py benchmarks/bench_quant.py
    elif [ -f scripts/probes/w4_$side.py ]; then cp /tmp/new_ex.py examples/w4a16_gemm.py; cp /tmp/new_bq.py benchmarks/bench_quant.py
      python3 scripts/probes/w4_$side.py           # a probe that rewrites the example in place
    else cp scripts/probes/w4_$side/w4a16_gemm.py examples/; cp /tmp/new_bq.py benchmarks/bench_quant.py; fi
    echo "== $side ($round)" | tee -a "$OUT/w4.txt"
    TILEJIT_CACHE_DIR=/tmp/tjc_w4_$side timeout ${BENCH_S:-200} python3 benchmarks/bench_quant.py --w4 ${W4:-1,16,64} \
      --fp8 '' --w4-configs $CFG --reps ${REPS:-30} 2>&1 | grep -v "Warning\|warn(" | tee -a "$OUT/w4.txt" | grep -E "^w4a16|us$" | tail -24
  done
done
cp /tmp/new_ex.py examples/w4a16_gemm.py; cp /tmp/new_bq.py benchmarks/bench_quant.py
[ "${TESTS:-1}" = 0 ] && exit 0
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-200} python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
  tests/test_w4a16.py tests/test_atomics.py > "$OUT/tests.txt" 2>&1
tail -15 "$OUT/tests.txt"
