#!/bin/bash
# GPU (session 25, second call): decode attention at KV 8192 with 32-key blocks (48 KB rings, four
# CTAs an SM) next to the 64-key ones, each kernel under ncu; W4A16 M1 with the weights reordered
# into contiguous tiles (TILED) against row-major, and with codegen.memory.BRANCH_FREE_LOADS (its GPU
# tests first), alternating.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
echo "== decode B8 H32 Hkv8 D128 KV 8192: configs with 32-key blocks (48 KB rings: 4 CTAs an SM), then ncu"
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 120 python3 bench_decode.py --seqs 8192 --reps 30 \
  --configs 2048x64x4,1024x64x4,512x64x4,2048x32x4,1024x32x4,512x32x4,256x32x4 2>&1 | grep -E "decode S|^\|" | tail -12
TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 150 ncu --clock-control none -k regex:decode -c 4 --section SpeedOfLight \
  --section Occupancy --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
  python3 bench_decode.py --seqs 8192 --configs 2048x64x4,1024x32x4 --reps 1 2>&1 \
  | grep -E "decode_|dram__|gpu__time|Duration|Achieved Occupancy|Memory Throughput" | head -40
echo "== pytest -m gpu with codegen.memory.BRANCH_FREE_LOADS on: its own tests, W4A16's, the masks'"
cd ..
timeout 200 python3 -c "
import sys, pytest
from tilejit.passes import switches
switches.apply([('tilejit.codegen.memory.BRANCH_FREE_LOADS', True)])
sys.exit(pytest.main(['-q', '-m', 'gpu', '-p', 'no:cacheprovider', 'tests/test_branch_free_loads.py', 'tests/test_w4a16.py',
                      'tests/test_masks.py']))" 2>&1 | tail -3
cd benchmarks
echo "== W4A16 M1: row-major / tiled weights (W4_TILED), BRANCH_FREE_LOADS off / on, alternating"
for run in "0 off" "1 off" "0 on" "1 on" "0 off" "1 on"; do set -- $run
  sw=""; [ "$2" = on ] && sw="tilejit.codegen.memory.BRANCH_FREE_LOADS=True"
  echo "-- W4_TILED=$1 branch-free $2"
  W4_TILED=$1 TILEJIT_CACHE_DIR=/tmp/tjc_w$1 PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py $sw -- \
    --w4 1 --fp8 "" --reps 30 --w4-configs 16x64x128x4x5,16x64x128x4x8,16x128x128x4x8,16x64x128x4x4 2>&1 | grep -E "^w4a16" | tail -2
done
