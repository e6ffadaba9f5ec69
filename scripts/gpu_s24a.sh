#!/bin/bash
# GPU (session 24): why TMA multicast halves the fp8 blockwise GEMM (959 -> 543 TFLOP/s at 4096^3,
# session 24's first call, when the remote releases were cluster-scope releases; now they take the
# arrival's default semantics, as CUTLASS's do: timed here against CLUSTER_SCOPE_RELEASE=True).
# ncu of the kernel at 4096^3, MULTICAST off and on (duration, SOL, launch and occupancy, warp stalls), after the fp8 GEMM with pairs but no multicast copies
# (MULTICAST_COPIES=False: what the clusters and paired releases cost alone); then one round of
# attention B4 H32 S4096 D128 off / on (is the loss the pairing itself or the fp8 kernel's?).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
echo "== multicast check (default-semantics remote releases)"
TILEJIT_CACHE_DIR=/tmp/tjc_c timeout 100 python3 scripts/probes/multicast_check.py 2>&1 | grep -v "arn" | tail -6
cd benchmarks
for sw in False True "True tilejit.codegen.mma.CLUSTER_SCOPE_RELEASE=True" \
    "True tilejit.passes.multicast.MULTICAST_COPIES=False"; do echo "== MULTICAST=$sw"
  TILEJIT_CACHE_DIR=/tmp/tjc_q PROBE_SCRIPT=bench_quant.py timeout 75 python3 switch_probe.py \
    tilejit.passes.multicast.MULTICAST=$sw -- --w4 '' --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 \
    | grep -E "^fp8" | tail -2
done
for on in False True; do echo "== ncu MULTICAST=$on"
  TILEJIT_CACHE_DIR=/tmp/tjc_a$on timeout 150 ncu --clock-control none -k regex:fp8 -s 2 -c 1 --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    -o "$OUT/fp8_$on" -f python3 -c "
import runpy, sys
from tilejit.passes import multicast
multicast.MULTICAST = $on
sys.argv = ['profile_one.py', 'fp8_blockwise', '--size', '4096']
runpy.run_path('profile_one.py', run_name='__main__')" > "$OUT/fp8_$on.log" 2>&1
  tail -2 "$OUT/fp8_$on.log"
  ncu -i "$OUT/fp8_$on.ncu-rep" --page details --csv 2>/dev/null | python3 -c "
import csv, sys
want = ('Duration', 'Memory Throughput', 'Compute (SM) Throughput', 'L2 Cache Throughput', 'DRAM Throughput',
        'Cluster Size', 'Grid Size', 'Registers Per Thread', 'Achieved Occupancy', 'Waves Per SM',
        'Max Active Clusters', 'Max Cluster Size', 'Warp Cycles Per Issued Instruction', 'Avg. Active Threads Per Warp',
        'L1/TEX Hit Rate', 'L2 Hit Rate', 'Mem Busy', 'Max Bandwidth')
for row in csv.reader(sys.stdin):
    if len(row) > 14 and row[12] in want:
        print(row[12], row[13], row[14])
  "
  ncu -i "$OUT/fp8_$on.ncu-rep" --page raw --csv 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin))
head, units, vals = rows[0], rows[1], rows[2]
st = sorted(((float(v), h) for h, v in zip(head, vals) if h.startswith('smsp__average_warp') and 'pcsamp' not in h
             and v.replace('.', '', 1).isdigit()), reverse=True)[:8]
for v, h in st: print('stall', h, v)
  "
done
for on in False True; do echo "== attention MULTICAST=$on"
  TILEJIT_CACHE_DIR=/tmp/tjc_at PROBE_SCRIPT=bench_attention.py timeout 150 python3 switch_probe.py \
    tilejit.passes.multicast.MULTICAST=$on -- --configs 4x32x4096x128 --kernel-configs 128x128x8 --reps 10 2>&1 \
    | grep -vi "warn" | tail -4
done
echo "== W4A16 M1 per-SASS-line profile"
cd ..
TILEJIT_CACHE_DIR=/tmp/tjc_s22w timeout 200 ncu --clock-control none -k regex:w4a16 -s 1 -c 1 --section SourceCounters \
  --section InstructionStats --section WarpStateStats --section SpeedOfLight --metrics smsp__inst_executed.sum \
  -o "$OUT/w4m1" -f python3 benchmarks/profile_one.py w4a16 --size 8192 --m 1 --config 16x64x128x4 --split 8 \
  > "$OUT/w4_ncu.log" 2>&1
tail -3 "$OUT/w4_ncu.log"
ncu -i "$OUT/w4m1.ncu-rep" --page source --csv --print-source sass > "$OUT/w4_sass.csv" 2>&1
ncu -i "$OUT/w4m1.ncu-rep" --page details --csv 2>/dev/null | grep -E "inst_executed|Executed Instructions\"|Duration|Throughput\"|Warp Cycles Per Issued" | head -10
python3 scripts/sass_hot.py "$OUT/w4_sass.csv" | head -70
