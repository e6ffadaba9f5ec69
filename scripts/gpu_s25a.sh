#!/bin/bash
# GPU (session 25): where the fp8 blockwise GEMM's time goes at 4096³ (weights (N, K), 128x128x128,
# 8 warps: 0.76-0.81x torch._scaled_mm): ncu's speed of light, warp states, the tensor pipe's
# activity and the per-SASS-line stalls; the same tensor-pipe metric for _scaled_mm in the same
# call; then the 128x256 tile (per-column B scales) timed next to the default; decode attention's
# kernels under ncu; W4A16 with the weights in contiguous tiles (TILED) against row-major.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
ncu --query-metrics 2>/dev/null | grep -i -E "gmma|tensor_op" | head -20 > "$OUT/metrics.txt"
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__cycles_active.avg
cd benchmarks
TILEJIT_CACHE_DIR=/tmp/tjc_a timeout 200 ncu --clock-control none -k regex:fp8_blockwise -s 1 -c 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy --section LaunchStats \
  --metrics $M -o "$OUT/fp8" -f python3 profile_one.py fp8_blockwise --size 4096 > "$OUT/fp8.log" 2>&1
tail -2 "$OUT/fp8.log"
ncu -i "$OUT/fp8.ncu-rep" --page details --csv > "$OUT/fp8_details.csv" 2>&1
grep -E "Duration|Throughput|gmma|Registers|Stall|Warp Cycles|Issued|Achieved Occupancy|Block Limit|cycles_active" "$OUT/fp8_details.csv" | cut -d, -f12- | head -60
ncu -i "$OUT/fp8.ncu-rep" --page source --csv --print-source sass > "$OUT/fp8_sass.csv" 2>&1
python3 ../scripts/sass_hot.py "$OUT/fp8_sass.csv" 30
timeout 120 ncu --clock-control none -k regex:"gemm|sm90|cutlass|xmma" -s 2 -c 1 --section SpeedOfLight --metrics $M \
  python3 -c "
import torch
a = torch.randn(4096, 4096, device='cuda').to(torch.float8_e4m3fn); b = torch.randn(4096, 4096, device='cuda').to(torch.float8_e4m3fn)
sa = torch.rand(4096, 1, device='cuda') + 0.5; sb = torch.rand(1, 4096, device='cuda') + 0.5
for _ in range(4): torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
torch.cuda.synchronize()" 2>&1 | grep -E "Kernel|gemm|Duration|gmma|Throughput|cycles_active" | head -20
TILEJIT_CACHE_DIR=/tmp/tjc_b timeout 200 python3 bench_quant.py --w4 '' --fp8 4096,8192 --reps 30 \
  --fp8-configs 128x128x128x8:nk,128x256x128x8:nk 2>&1 | grep -E "fp8|copy" | tail -8
echo "== decode B8 H32 Hkv8 D128 KV 8192: configs with 32-key blocks (48 KB rings: 4 CTAs an SM), then ncu"
BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 120 python3 bench_decode.py --seqs 8192 --reps 30 \
  --configs 2048x64x4,1024x64x4,512x64x4,2048x32x4,1024x32x4,512x32x4,256x32x4 2>&1 | grep -E "decode S|^\|" | tail -12
TILEJIT_CACHE_DIR=/tmp/tjc_d timeout 150 ncu --clock-control none -k regex:decode -c 4 --section SpeedOfLight \
  --section Occupancy --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
  python3 bench_decode.py --seqs 8192 --configs 2048x64x4,1024x32x4 --reps 1 2>&1 \
  | grep -E "decode_|dram__|gpu__time|Duration|Achieved Occupancy|Memory Throughput" | head -40
echo "== W4A16 M1 / M16: weights row-major (W4_TILED=0) against reordered into contiguous tiles (1), alternating"
for t in 0 1 0 1; do echo "-- W4_TILED=$t"
  W4_TILED=$t BENCH_EACH=1 TILEJIT_CACHE_DIR=/tmp/tjc_t$t timeout 100 python3 bench_quant.py --w4 1 --fp8 "" --reps 30 \
    --w4-configs 16x64x128x4x5,16x64x128x4x8,16x128x128x4x8,16x64x128x4x4 2>&1 | grep -E "w4a16" | grep -v "^  " | tail -4
done
