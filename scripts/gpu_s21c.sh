#!/bin/bash
# GPU (session 21, third call):
#  1. W4A16 at M 64 (wgmma with the dequantised B, 2 CTAs an SM at 189-199 registers, ncu: 6 cycles
#     an issue, long-scoreboard the top stall) under four sides, alternating, two rounds: the default;
#     prefetch_loads.PREFETCH_DEQUANTISED (scales and zero points loaded an iteration ahead: ptxas 222
#     registers, still 2 CTAs); that plus PREFETCH_ELEMENTS=8192 (the packed weights ahead too: 244);
#     the example spelled (q + 128) - (z + 128) (scripts/probes/w4_bias.py: one bf16x2 subtraction a
#     pair of weights fewer);
#  2. ncu of the fp8 blockwise GEMM at 8192^3 with per-instruction stall samples (SASS, csv).
# Env: STEPS (default "1 2").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py
P=tilejit.passes.prefetch_loads
for step in ${STEPS:-1 2}; do
  case $step in
  1) cp examples/w4a16_gemm.py /tmp/keep_ex.py
     for round in 1 2; do for side in base pfdq pfall bias; do
       cp /tmp/keep_ex.py examples/w4a16_gemm.py
       case $side in base|bias) sw="";; pfdq) sw="$P.PREFETCH_DEQUANTISED=True";;
                     pfall) sw="$P.PREFETCH_DEQUANTISED=True $P.PREFETCH_ELEMENTS=8192";; esac
       [ $side = bias ] && python3 scripts/probes/w4_bias.py
       echo "== $side ($round): $sw" | tee -a "$OUT/w4.txt"
       TILEJIT_CACHE_DIR=/tmp/tjc_w4_$side timeout 150 python3 benchmarks/switch_probe.py $sw -- --w4 64 --fp8 '' \
         --w4-configs 64x128x128x4x4,64x128x128x4x2,64x64x128x4x4 --reps 30 2>&1 | grep -v "Warning\|warn(" \
         | tee -a "$OUT/w4.txt" | grep -E "^w4a16|^  w4a16"
     done; done
     cp /tmp/keep_ex.py examples/w4a16_gemm.py ;;
  2) TILEJIT_CACHE_DIR=/tmp/tjc_ncu_src timeout 240 ncu --clock-control none -k "regex:fp8_blockwise" -s 1 -c 1 \
       --section SourceCounters --section WarpStateStats -o /tmp/fp8src -f \
       python3 benchmarks/profile_one.py fp8_blockwise --size 8192 --config 128x128x128x8 > "$OUT/ncu-src-log.txt" 2>&1
     tail -3 "$OUT/ncu-src-log.txt"
     ncu -i /tmp/fp8src.ncu-rep --page source --csv --print-source sass > "$OUT/fp8-sass.csv" 2>&1
     wc -l "$OUT/fp8-sass.csv"; head -2 "$OUT/fp8-sass.csv" | cut -c1-600 ;;
  esac
done
