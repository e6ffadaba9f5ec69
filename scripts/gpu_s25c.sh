#!/bin/bash
# GPU (session 25, third call): decode attention at KV 8192, two kernels against one launch
# (fused=True), each under ncu (duration, DRAM) and timed; then W4A16 M1 / M16 / M64 with the
# weights row-major and tiled (W4_TILED), alternating, two rounds.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd benchmarks
for f in "" --fused; do echo "== decode 8192 ${f:-two kernels}"
  BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 100 python3 bench_decode.py --seqs 8192 --reps 30 $f \
    --configs 2048x64x4,2048x32x4 2>&1 | grep -E "decode S" | tail -3
  TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 100 ncu --clock-control none -k regex:decode -c 2 \
    --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
    python3 bench_decode.py --seqs 8192 --configs 2048x64x4 --reps 1 $f 2>&1 | grep -E "decode_|gpu__time|dram__th" | head -8
done
echo "== W4A16: W4_TILED 0 / 1, alternating, two rounds"
for t in 0 1 0 1; do echo "-- W4_TILED=$t"
  W4_TILED=$t TILEJIT_CACHE_DIR=/tmp/tjc_t$t timeout 140 python3 bench_quant.py --w4 1,16,64 --fp8 "" --reps 30 \
    --w4-configs 16x64x128x4x5,16x64x128x4x4,16x128x128x4x8,64x64x128x4x8,64x64x128x4x4,64x128x128x4x4 2>&1 | grep -E "^w4a16"
done
