#!/bin/bash
# GPU: session 14's second call: the launch bindings (round-robin bench_launch with a raw ctypes
# row; cProfile of each binding), float64 GEMM on DMMA against DGEMM, and the histogram example.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
(cd benchmarks && timeout 60 python3 bench_launch.py 2>&1 | tail -9 | tee "$OUT/launch.txt")
TILEJIT_CACHE_DIR=/tmp/tjc_l timeout 60 python3 scripts/probes/launch_profile.py > "$OUT/launch_profile.txt" 2>&1
grep -E "µs" "$OUT/launch_profile.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 60 python3 scripts/probes/f64_gemm.py 4096 2>&1 | grep -v "Warning\|entry = self" | tee "$OUT/f64_gemm.txt"
