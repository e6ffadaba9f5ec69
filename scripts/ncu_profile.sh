#!/bin/bash
# GPU: ncu (clocks unlocked) of one kernel that benchmarks/profile_one.py launches: speed of light,
# occupancy, pipes, instruction counts and the stall reasons above 0.3 cycles per issue.
# Usage: bash scripts/ncu_profile.sh KERNEL_REGEX PROFILE_ONE_ARGS...
#   e.g. bash scripts/ncu_profile.sh fp8_blockwise fp8_blockwise --size 4096 --config 128x128x128x8
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
regex=$1; shift
f="$OUT/ncu-$regex.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_ncu_$regex timeout 300 ncu --clock-control none -k "regex:$regex" -s 1 -c 1 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section InstructionStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" \
  python3 benchmarks/profile_one.py "$@" > "$f" 2>&1
grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|Warp Cycles Per Issued|Issued Warp|No Eligible|Grid Size|Block Size|Waves|Executed Ipc|inst_executed|pipe|Block Limit|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Shared Memory Config" "$f" | head -45
grep -E "issue_stalled" "$f" | awk '$NF+0 >= 0.3 {print "    stall", $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
