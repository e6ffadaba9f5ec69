#!/bin/bash
# GPU: ping-pong of attention's two consumer warpgroups (passes/specialise_warps.py PINGPONG, off by default)
# against the default, same machine -- about 5 minutes.  A protocol error would hang: every step is timed out.
#   1. the emulator/structure tests of the ping-pong, and a CUDA run of the kernel with the switch on
#      (bench_attention checks every output against SDPA's math backend before timing it);
#   2. bench_attention at 128x128x8 (the warp-specialised config) with PINGPONG False, then True, and the
#      causal / D64 shapes of #15's targets (cuDNN and FlashAttention-2 in the same run).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_pingpong.py 2>&1 | tail -2 | tee "$OUT/tests.txt"
for pp in False True; do
  (cd benchmarks && TILEJIT_CACHE_DIR=/tmp/tjc_pp_$pp PROBE_SCRIPT=bench_attention.py timeout 200 python3 switch_probe.py \
    tilejit.passes.specialise_warps.PINGPONG=$pp -- --configs 4x32x4096x128,16x16x1024x64,2x16x16384x128 \
    --kernel-configs 128x128x8,128x64x8 --reps 10 2>&1 | quiet | tail -14 | tee "$OUT/attention-pingpong-$pp.txt")
done
