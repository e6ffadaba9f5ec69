#!/bin/bash
# GPU (session 24): is the W4A16 M1 loop's weight prefetch sunk by ptxas under the decode occupancy
# wish (.minnctapersm 5, 96 registers)?  ncu SourceCounters of 16x64x128x4 split 8 at N = K = 8192
# with pipeline.DECODE_DOT_THREADS_PER_SM=() (no wish), the stalls on the loop's first use of the
# weights printed; then bench_quant M1 / M16: the default, the example's zero points folded into
# the product (W4_FOLD_ZEROS=1: no bfloat16 subtraction a weight), and without the wish.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TILEJIT_CACHE_DIR=/tmp/tjc_nw timeout 150 ncu --clock-control none -k regex:w4a16 -s 1 -c 1 --section SourceCounters \
  --metrics smsp__inst_executed.sum -o "$OUT/w4nowish" -f python3 -c "
import runpy, sys
from tilejit.passes import pipeline
pipeline.DECODE_DOT_THREADS_PER_SM = ()
sys.argv = ['profile_one.py', 'w4a16', '--size', '8192', '--m', '1', '--config', '16x64x128x4', '--split', '8']
runpy.run_path('benchmarks/profile_one.py', run_name='__main__')" > "$OUT/w4nowish.log" 2>&1
tail -2 "$OUT/w4nowish.log"
ncu -i "$OUT/w4nowish.ncu-rep" --page source --csv --print-source sass > "$OUT/w4nowish_sass.csv" 2>&1
python3 scripts/sass_hot.py "$OUT/w4nowish_sass.csv" | head -4
python3 - "$OUT/w4nowish_sass.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
i = next(k for k, r in enumerate(rows) if r and r[0] == "Address")
hdr, data = rows[i], rows[i + 1:]
ie, isrc, ist = hdr.index("Instructions Executed"), hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
loop = [r for r in data if len(r) > ie and r[ie].replace(",", "").isdigit() and int(r[ie].replace(",", "")) == 32768]
total = sum(int(r[ist] or 0) for r in loop)
print("loop lines", len(loop), "stall samples", total)
for r in sorted(loop, key=lambda r: -int(r[ist] or 0))[:8]:
    print(" ", r[ist], r[isrc].strip())
PY
cd benchmarks
for fold in 0 1; do echo "== W4_FOLD_ZEROS=$fold (the decode wish on)"
  W4_FOLD_ZEROS=$fold TILEJIT_CACHE_DIR=/tmp/tjc_f$fold timeout 120 python3 bench_quant.py --w4 1,16 --fp8 '' --reps 30 \
    2>&1 | grep -E "w4a16|copy" | tail -6
done
echo "== DECODE_DOT_THREADS_PER_SM=() (no wish), W4_FOLD_ZEROS=0"
TILEJIT_CACHE_DIR=/tmp/tjc_w PROBE_SCRIPT=bench_quant.py timeout 120 python3 switch_probe.py \
  "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=()" -- --w4 1,16 --fp8 '' --reps 30 2>&1 | grep -E "w4a16|copy" | tail -6
