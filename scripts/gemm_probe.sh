#!/bin/bash
# GPU: GEMM A/B probes of compiler switches (``gpu_probe.sh`` with ``bench_matmul.py``), then an
# ncu profile of one config.  Usage: bash scripts/gemm_probe.sh PROBE_FILE
# Env: NCU_CONFIG (BMxBNxBKxSTAGESxwarps, default 128x256x64x4x8), NCU_SIZE (default 4096),
# NCU=0 skips the profile.
export PROBE_SCRIPT=bench_matmul.py
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NCU= LINES_SHOWN=${LINES_SHOWN:-12} bash "$(dirname "$0")/gpu_probe.sh" "$1"
if [ "${NCU:-1}" != 0 ]; then
  f="$OUT/ncu-matmul.txt"
  TILEJIT_CACHE_DIR=/tmp/tjc_ncu timeout 240 ncu --clock-control none -k regex:matmul -s 1 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 benchmarks/profile_one.py matmul --size "${NCU_SIZE:-4096}" --config "${NCU_CONFIG:-128x256x64x4x8}" > "$f" 2>&1
  echo "== ncu matmul ${NCU_SIZE:-4096} ${NCU_CONFIG:-128x256x64x4x8}"
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|L2 Hit|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issued Warp|No Eligible|Grid Size|Block Size|Waves|Executed Ipc|Tensor" "$f" | head -30
  grep -E "issue_stalled" "$f" | awk '$NF+0 >= 0.2 {print "    stall", $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
fi
