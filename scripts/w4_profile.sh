#!/bin/bash
# GPU: ncu of the W4A16 example (benchmarks/profile_one.py w4a16) at M1 N = K = 8192, split 8.
# Usage: bash scripts/w4_profile.sh [CONFIG] [M]
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
f="$OUT/ncu-w4a16.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_w4 timeout 300 ncu --clock-control none -k regex:w4a16 -s 1 -c 1 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats --section InstructionStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active" \
  python3 benchmarks/profile_one.py w4a16 --size 8192 --m "${2:-1}" --config "${1:-16x128x128x4}" > "$f" 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|Warp Cycles Per Issued|Issued Warp|No Eligible|Grid Size|Block Size|Waves|Executed Ipc|inst_executed|pipe|Block Limit|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" "$f" | head -40
grep -E "issue_stalled" "$f" | awk '$NF+0 >= 0.3 {print "    stall", $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
