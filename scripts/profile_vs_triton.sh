#!/bin/bash
# GPU: ncu of one row kernel, tilejit (at the compiler's warps and at WARPS) against Triton's tutorial
# kernel: registers, occupancy, instructions, DRAM.  Usage: bash scripts/profile_vs_triton.sh KERNEL COLUMNS DTYPE WARPS
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 TILEJIT_CACHE_DIR=/tmp/tjc_pt
K=${1:-softmax}; C=${2:-8192}; DT=${3:-bfloat16}; W=${4:-16}
for variant in "tilejit" "tilejit --num-warps $W" "triton --triton"; do
  name=${variant%% *}; flags=${variant#$name}
  echo "== $K $C $DT $variant"
  timeout 200 ncu --clock-control none -k "regex:$K" -s 1 -c 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section SchedulerStats --section InstructionStats \
    python3 benchmarks/profile_one.py "$K" --columns "$C" --dtype "$DT" $flags 2>&1 | \
    grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Executed Instructions  |Block Size|Issued Warp|No Eligible|Error|error"
done
