#!/bin/bash
# GPU (session 23): TMA multicast over CTA pairs (passes/multicast.py, MULTICAST off by default).
#  m. correctness: scripts/probes/multicast_check.py on and off (fp8 blockwise with an odd row-block
#     count, full attention D64 / D128), then compute-sanitizer memcheck and racecheck with it on;
#  n. A/B, MULTICAST False / True alternating, two rounds: fp8 blockwise 4096^3 / 8192^3 at
#     128x128x128x8 (N, K) weights; attention B4 H32 S4096 D128 at 128x128x8 (full is paired,
#     causal is not: a control); attention backward B4 H32 S4096 D128 (dK/dV 32x128x8, dQ 128x64x8;
#     full paired, causal not); the bf16 GEMM 4096^3 / 8192^3 at 128x256x64x4x8 warp-specialised
#     (TILEJIT_WS=1: multicast needs the producer warpgroup; not the default for bf16 GEMMs).
# Env: STEPS (default "m n"), ROUNDS (2), SW (the switch step n flips; default multicast's, e.g.
# SW=tilejit.passes.specialise_warps.ELECT_RELEASES: one thread a warpgroup releases a slot).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
for step in ${STEPS:-m n}; do
  case $step in
  m) for flag in "" --off; do echo "== check $flag"
       TILEJIT_CACHE_DIR=/tmp/tjc_mc$flag timeout 150 python3 scripts/probes/multicast_check.py $flag 2>&1 | grep -v "arn" | tail -6
     done
     for tool in memcheck racecheck; do echo "== $tool"
       TILEJIT_CACHE_DIR=/tmp/tjc_mcs timeout 240 compute-sanitizer --tool $tool --report-api-errors no \
         python3 scripts/probes/multicast_check.py 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|error|paired" | head -8
     done ;;
  n) for round in $(seq ${ROUNDS:-2}); do for on in False True; do
       SW=${SW:-tilejit.passes.multicast.MULTICAST}
       echo "== $SW=$on ($round)"
       S="$SW=$on"
       (cd benchmarks
        TILEJIT_CACHE_DIR=/tmp/tjc_mcb PROBE_SCRIPT=bench_quant.py timeout 150 python3 switch_probe.py $S -- --w4 '' \
          --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 | grep -E "^fp8|rowwise|_scaled" | tail -6
        TILEJIT_CACHE_DIR=/tmp/tjc_mcb PROBE_SCRIPT=bench_attention.py timeout 200 python3 switch_probe.py $S -- --configs \
          4x32x4096x128 --kernel-configs 128x128x8 --reps 10 2>&1 | grep -vi "warn" | tail -5
        TILEJIT_CACHE_DIR=/tmp/tjc_mcb PROBE_SCRIPT=bench_attention_backward.py timeout 200 python3 switch_probe.py $S -- \
          --configs 4x32x4096x128 --kernel-configs 32x128x8/128x64x8 --reps 5 2>&1 | grep -vi "warn" | tail -4
        TILEJIT_WS=1 TILEJIT_CACHE_DIR=/tmp/tjc_mcb PROBE_SCRIPT=bench_matmul.py timeout 150 python3 switch_probe.py $S -- \
          --shapes 4096x4096x4096,8192x8192x8192 --dtypes bfloat16 --configs 128x256x64x4x8 --reps 20 2>&1 \
          | grep -vi "warn" | tail -4) | tee -a "$OUT/mc.txt"
     done; done ;;
  esac
done
