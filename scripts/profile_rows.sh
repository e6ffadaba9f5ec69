#!/bin/bash
# GPU: ncu profiles of row kernels, persistent (TILEJIT_PERSIST=always) against plain (=0), into
# $OUT/ncu-KERNEL-COLUMNS-DTYPE-MODE.txt.  Usage: bash scripts/profile_rows.sh "softmax:4096:bfloat16 ..."
# SWITCH and MODES compare another switch (SWITCH=TILEJIT_CLUSTER MODES="1 0": clusters or not).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for spec in ${1:-softmax:4096:bfloat16 layernorm:4096:bfloat16}; do
  IFS=: read -r kern cols dt <<< "$spec"
  for mode in ${MODES:-always 0}; do
    f="$OUT/ncu-$kern-$cols-$dt-$mode.txt"
    env ${SWITCH:-TILEJIT_PERSIST}=$mode TILEJIT_CACHE_DIR=/tmp/tjc_prof$mode timeout 240 ncu --clock-control none \
      -k "regex:$kern" -s 1 -c 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section InstructionStats --section SourceCounters \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 benchmarks/profile_one.py "$kern" --columns "$cols" --dtype "$dt" > "$f" 2>&1
    echo "== $kern $cols $dt ${SWITCH:-TILEJIT_PERSIST}=$mode"
    grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Warp Cycles Per Issued|Executed Instructions  |Grid Size|Block Size|Issued Warp|No Eligible|Cluster Size|Waves" "$f" | head -40
    grep -E "issue_stalled" "$f" | awk '$NF+0 >= 0.3 {print "    stall", $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' 
  done
done
