#!/bin/bash
# GPU (prepared in session 21, not yet run):
#  1. compute-sanitizer memcheck and racecheck on session 21's new defaults at small sizes: the fp8
#     blockwise GEMM with its consumer warpgroups in ping-pong (PINGPONG_PROMOTION) and W4A16 at 64
#     rows with two computed-B buffers and its loads ahead (COMPUTED_B_BUFFERS, WGMMA_DEQUANTISED);
#  2. codegen.llvm.DESCRIPTOR_OFFSETS off / on (a tile's k-step wgmma descriptors one descriptor and
#     adds: 24 fewer SASS instructions a K block in the fp8 loop, 24 in the bf16 GEMM's), alternating,
#     two rounds: fp8 blockwise 4096^3 / 8192^3, bf16 GEMM 4096^3 / 8192^3 at 128x256x64, attention
#     B4 H32 S4096 D128 (each benchmark checks its outputs before timing);
#  3. on an H200, the #14 target table (scripts/gpu_s20b.sh, no sanitizer);
#  4. W4A16 at M1 (16x64x128x4, split 8, N = K = 8192): ncu's executed instructions per SASS line
#     (SourceCounters; $OUT/w4_sass.csv, and the K loop's top lines printed), and bench_quant's
#     64-row configs with 64x64x64 (three CTAs an SM) against 64x128x128 (session 21's best);
#  5. (session 22) fp8 attention at its tile configs (the 16-rows-a-warp ones build for sm_90a
#     since 68bbc7e) against SDPA bf16, full and causal; `pytest -m gpu` of the files session 22
#     changed (wgmma: ZERO_PRODUCTS, PIN_PROMOTED; POW2_DIVMOD; fp8 attention).
# Env: STEPS (default "1 2 3 4 5").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
cat > /tmp/s22_small.py <<'PY'
import numpy as np, tilejit as tj
from tilejit.examples import fp8_blockwise_gemm as f8, w4a16_gemm as w4
rng = np.random.default_rng(0)
a, sa = f8.quantize_rows(rng.standard_normal((256, 512)).astype(np.float32))
b, sb = f8.quantize_blocks(rng.standard_normal((512, 256)).astype(np.float32))
out = f8.run_nk(a, sa, np.ascontiguousarray(b.T), np.ascontiguousarray(sb.T))
print("fp8 max error", float(np.abs(out.astype(np.float64) - f8.reference(a, sa, b, sb)).max()))
x = rng.standard_normal((64, 1024)).astype(tj.bfloat16.np)
packed, s, z = w4.quantize(rng.standard_normal((1024, 256)).astype(np.float32), 128)
out = w4.run(x, packed, s, z, group=128, BM=64, BN=128, BK=128, split=2)
print("w4a16 max error", float(np.abs(out.astype(np.float64) - w4.reference(x, packed, s, z, group=128, rounded=True)).max()))
PY
for step in ${STEPS:-1 2 3 4 5}; do
  case $step in
  1) for tool in memcheck racecheck; do
       echo "== $tool"
       TILEJIT_CACHE_DIR=/tmp/tjc_s22 timeout 200 compute-sanitizer --tool $tool --report-api-errors no python3 /tmp/s22_small.py 2>&1 \
         | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|max error" | head -6
     done ;;
  2) for round in 1 2; do for on in False True; do
       echo "== DESCRIPTOR_OFFSETS=$on ($round)"
       S="tilejit.codegen.llvm.DESCRIPTOR_OFFSETS=$on"
       (cd benchmarks
        TILEJIT_CACHE_DIR=/tmp/tjc_do PROBE_SCRIPT=bench_quant.py timeout 150 python3 switch_probe.py $S -- --w4 '' \
          --fp8 4096,8192 --fp8-configs 128x128x128x8:nk --reps 20 2>&1 | grep -E "^fp8"
        TILEJIT_CACHE_DIR=/tmp/tjc_do PROBE_SCRIPT=bench_matmul.py timeout 150 python3 switch_probe.py $S -- --shapes \
          4096x4096x4096,8192x8192x8192 --dtypes bfloat16 --configs 128x256x64x4x8 --reps 20 2>&1 | grep -vi "warn" | tail -4
        TILEJIT_CACHE_DIR=/tmp/tjc_do PROBE_SCRIPT=bench_attention.py timeout 150 python3 switch_probe.py $S -- --configs \
          4x32x4096x128 --kernel-configs 128x128x8 --reps 10 2>&1 | grep -vi "warn" | tail -4) | tee -a "$OUT/desc.txt"
     done; done ;;
  3) if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then SAN=0 bash scripts/gpu_s20b.sh 2>&1 | tail -30
     else echo "step 3: not an H200, the #14 table skipped"; fi ;;
  4) TILEJIT_CACHE_DIR=/tmp/tjc_s22w timeout 240 ncu --clock-control none -k regex:w4a16 -s 1 -c 1 --section SourceCounters \
       --section InstructionStats --metrics smsp__inst_executed.sum -o "$OUT/w4m1" -f \
       python3 benchmarks/profile_one.py w4a16 --size 8192 --m 1 --config 16x64x128x4 --split 8 > "$OUT/w4_ncu.log" 2>&1
     tail -3 "$OUT/w4_ncu.log"
     ncu -i "$OUT/w4m1.ncu-rep" --page source --csv --print-source sass > "$OUT/w4_sass.csv" 2>&1
     ncu -i "$OUT/w4m1.ncu-rep" --page details --csv 2>/dev/null | grep -E "inst_executed|Executed Instructions\"" | head -4
     python3 scripts/sass_hot.py "$OUT/w4_sass.csv" | head -60
     (cd benchmarks; TILEJIT_CACHE_DIR=/tmp/tjc_s22q BENCH_EACH=1 timeout 200 python3 bench_quant.py --w4 64 --fp8 '' \
       --w4-configs 64x64x64x4x1,64x128x128x4x1,64x64x128x4x1 --reps 30 2>&1 | grep -E "w4a16|cuBLAS" | tail -12) ;;
  5) TILEJIT_CACHE_DIR=/tmp/tjc_s22t timeout 300 python3 -m pytest -q -m gpu --tb=short -p no:cacheprovider \
       tests/test_wgmma.py tests/test_fp8_attention.py tests/test_dot_scaled.py tests/test_attention.py 2>&1 | tail -4
     for c in "" --causal; do TILEJIT_CACHE_DIR=/tmp/tjc_s22a timeout 200 python3 scripts/probes/fp8_attention_configs.py $c \
       2>&1 | grep -v "Warning\|warn(" | tail -6; done ;;
  esac
done
