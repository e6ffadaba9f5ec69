#!/bin/bash
# GPU (session 32, first call): session 31's rotation (rotate_products.ROTATE: each block's QK^T,
# or each K block's fp8 product, issued one iteration ahead) timed at last, in order of need, each
# step written to $OUT as it ends: attention against float64; bench_attention ROTATE True / False;
# attention spelled with exp2(s * qk_scale - m) (one FFMA a score after fuse_fma) against the example;
# the fp8 blockwise GEMM the same; ncu of attention (full, S4096 D128 128x128x8) with the switch
# off and on (speed of light, warp stalls: the profile #15's note needs); a second attention
# round; rotated with the TMA-stored output and with ping-pong; then the GPU tests it touches.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 scripts/probes/attention_rotated.py 1000 128x128x8 2>&1 | tee "$OUT/check.txt"
cd benchmarks
probe() {   # probe SCRIPT "SWITCH=V ..." ARGS...
  local script=$1 flags=$2; shift 2
  local sets=()
  for f in $flags; do
    case $f in ROTATE*) sets+=("tilejit.passes.rotate_products.$f");;
               PINGPONG*) sets+=("tilejit.passes.specialise_warps.$f");; esac
  done
  echo "-- $script $flags ${TILEJIT_TMA_STORE:+TILEJIT_TMA_STORE=$TILEJIT_TMA_STORE}"
  PROBE_SCRIPT=$script BENCH_EACH=1 timeout 90 python3 switch_probe.py "${sets[@]}" -- "$@" 2>&1 | grep -v "^ *$"
}
ATT="--configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 15"
for flags in "ROTATE=True" "ROTATE=False"; do probe bench_attention.py "$flags" $ATT; done 2>&1 | tee "$OUT/att1.txt"
cd ..; timeout 100 python3 scripts/probes/attention_exp2.py bench --reps 15 2>&1 | grep -v "^ *$" | tee "$OUT/exp2.txt"; cd benchmarks
for flags in "ROTATE=True" "ROTATE=False"; do
  probe bench_quant.py "$flags" --w4 "" --fp8 4096,8192 --reps 15 --fp8-configs 128x128x128x8:nk
done 2>&1 | tee "$OUT/fp8.txt"
for on in False True; do echo "== ncu attention ROTATE=$on"
  TILEJIT_CACHE_DIR=/tmp/tjc_n$on timeout 120 ncu --clock-control none -k regex:attention -s 1 -c 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats -o "$OUT/att_$on" -f python3 -c "
import runpy, sys
from tilejit.passes import rotate_products
rotate_products.ROTATE = $on
sys.argv = ['profile_one.py', 'attention', '--config', '128x128x8']
runpy.run_path('profile_one.py', run_name='__main__')" > "$OUT/ncu_$on.log" 2>&1
  tail -1 "$OUT/ncu_$on.log"
  ncu -i "$OUT/att_$on.ncu-rep" --page details --csv 2>/dev/null | python3 -c "
import csv, sys
want = ('Duration', 'Compute (SM) Throughput', 'Memory Throughput', 'Registers Per Thread',
        'Achieved Occupancy', 'Warp Cycles Per Issued Instruction', 'Issue Slots Busy', 'Executed Ipc Active')
for row in csv.reader(sys.stdin):
    if len(row) > 14 and row[12] in want: print(row[12], row[13], row[14])"
  ncu -i "$OUT/att_$on.ncu-rep" --page raw --csv 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin)); head, vals = rows[0], rows[2]
st = sorted(((float(v), h) for h, v in zip(head, vals) if h.startswith('smsp__average_warp') and 'pcsamp' not in h
             and v.replace('.', '', 1).isdigit()), reverse=True)[:8]
for v, h in st: print('stall', h, v)"
done 2>&1 | tee "$OUT/ncu.txt"
for flags in "ROTATE=False" "ROTATE=True"; do probe bench_attention.py "$flags" $ATT; done 2>&1 | tee "$OUT/att2.txt"
TILEJIT_TMA_STORE=1 probe bench_attention.py "ROTATE=True" $ATT 2>&1 | tee "$OUT/att_tma_store.txt"
probe bench_attention.py "ROTATE=True PINGPONG=True" $ATT 2>&1 | tee "$OUT/att_pingpong.txt"
cd ..
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_tma_store.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
