#!/bin/bash
# GPU (session 25): where the fp8 blockwise GEMM's time goes at 4096³ (weights (N, K), 128x128x128,
# 8 warps: 0.76-0.81x torch._scaled_mm): ncu's speed of light, warp states, the tensor pipe's
# activity and the per-SASS-line stalls; the same tensor-pipe metric for _scaled_mm in the same
# call; then the 128x256 tile (per-column B scales) timed next to the default, and the two fp8
# switches never timed (descriptor offsets, elected releases).  gpu_s25b.sh is the second call.
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
echo "== fp8 switches never timed: codegen.llvm.DESCRIPTOR_OFFSETS, specialise_warps.ELECT_RELEASES (alternating)"
for sw in "" "tilejit.codegen.llvm.DESCRIPTOR_OFFSETS=True" "tilejit.passes.specialise_warps.ELECT_RELEASES=True" ""; do
  echo "-- ${sw:-defaults}"
  TILEJIT_CACHE_DIR=/tmp/tjc_sw PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py $sw -- --w4 '' \
    --fp8 4096,8192 --reps 30 --fp8-configs 128x128x128x8:nk 2>&1 | grep -E "^fp8" | tail -2
done
