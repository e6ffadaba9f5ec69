#!/bin/bash
# GPU (session 23). Steps (env STEPS, default "a b"):
#  a. session 22's device steps 1 and 4 (compute-sanitizer on the fp8 ping-pong and W4A16 two-buffer
#     defaults; W4A16 M1 per-SASS-line ncu profile and the 64-row configs), never run before;
#  b. session 22's step 5 (`pytest -m gpu` of the files it changed, fp8 attention tiles vs SDPA) and
#     the #17 figures not measured since session 16: cold compile and cache hit to first launch
#     (attention, GEMM; new processes), `bench_launch.py`; then #15's decode at 8192 / 65536;
#  c. session 22's step 2 (DESCRIPTOR_OFFSETS off / on A/B);
#  d. session 22's step 3 (the #14 table, H200 only).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for step in ${STEPS:-a b}; do
  case $step in
  a) STEPS="1 4" bash scripts/gpu_s22.sh ;;
  b) STEPS="5" bash scripts/gpu_s22.sh
     (cd benchmarks
      for k in attention gemm; do echo "== compile $k"
        timeout 150 python3 bench_compile.py --mode gpu --kernel $k --runs 3 2>&1 | grep -vi "warn" | tail -4; done
      echo "== launch"; timeout 90 python3 bench_launch.py 2>&1 | grep -vi "warn" | tail -10
      echo "== decode"; TILEJIT_CACHE_DIR=/tmp/tjc_s23d timeout 200 python3 bench_decode.py --reps 30 2>&1 \
        | grep -vi "warn" | tail -14) ;;
  c) STEPS="2" bash scripts/gpu_s22.sh ;;
  d) STEPS="3" bash scripts/gpu_s22.sh ;;
  esac
done
