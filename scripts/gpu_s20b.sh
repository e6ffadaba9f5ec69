#!/bin/bash
# GPU (session 20): the whole #14 target table in one run -- bench_matmul.py on every target shape in
# bfloat16 and float16 (cuBLAS and Triton in the same process) and bench_fp8.py (torch._scaled_mm)
# -- then compute-sanitizer memcheck/racecheck on the kernels added since the last sanitizer run:
# the stream-K GEMM (switch on), the one-launch decode attention (fused) and the W4A16 one-launch
# split-K.  Env: TABLE=0 / SAN=0 skip a part; CONFIGS, REPS.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1 BENCH_EACH=${BENCH_EACH:-0}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TABLE:-1}" != 0 ]; then
  for dt in bfloat16 float16; do
    echo "== $dt"
    TILEJIT_CACHE_DIR=/tmp/tjc_tab timeout 240 python3 benchmarks/bench_matmul.py \
      --shapes 4096x4096x4096,8192x8192x8192,4096x4096x14336,16x8192x8192,128x8192x8192 --dtypes $dt \
      ${CONFIGS:+--configs $CONFIGS} --reps ${REPS:-20} 2>&1 | grep -v "Warning\|warn(" | tail -12 | tee -a "$OUT/table.txt"
  done
  echo "== fp8"
  TILEJIT_CACHE_DIR=/tmp/tjc_fp8 timeout 200 python3 benchmarks/bench_fp8.py --reps ${REPS:-20} 2>&1 \
    | grep -v "Warning\|warn(" | tail -6 | tee -a "$OUT/table.txt"
fi
[ "${SAN:-1}" = 0 ] && exit 0
cat > /tmp/san_small.py <<'PY'
import sys, numpy as np, torch, tilejit as tj
what = sys.argv[1]
rng = np.random.default_rng(0)
if what == "decode":
    from tilejit.examples import decode_attention as ex
    q, k, v = (torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)
               for x in ex.example_inputs(rng, 2, 8, 2, 4, 700, 128))
    out = ex.run(q, k, v, split=256, fused=True)
    torch.cuda.synchronize()
    ref = ex.reference(*(x.float().cpu().numpy() for x in (q, k, v)))
    print("decode fused max error", float(np.abs(out.float().cpu().numpy() - ref).max()))
elif what == "w4":
    from tilejit.examples import w4a16_gemm as ex
    a = rng.standard_normal((3, 1024)).astype(tj.bfloat16.np)
    packed, s, z = ex.quantize(rng.standard_normal((1024, 512)).astype(np.float32), 128)
    out = ex.run(a, packed, s, z, group=128, BM=16, BN=64, BK=128, split=4)
    ref = ex.reference(a, packed, s, z, group=128, rounded=False)
    print("w4a16 split max error", float(np.abs(out.astype(np.float64) - ref).max()), "of", float(np.abs(ref).max()))
PY
for tool in memcheck racecheck; do
  echo "== $tool: stream-K GEMM 3072^3 128x256x64x3x8"
  TILEJIT_CACHE_DIR=/tmp/tjc_s1 PROBE_SCRIPT=profile_one.py timeout 150 compute-sanitizer --tool $tool --report-api-errors no \
    python3 benchmarks/switch_probe.py tilejit.passes.specialise_warps.PERSIST_TILES=True tilejit.passes.stream_k.STREAM_K=True \
    -- matmul --size 3072 --config 128x256x64x3x8 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" | head -5
  for w in decode w4; do
    echo "== $tool: $w"
    TILEJIT_CACHE_DIR=/tmp/tjc_s2 timeout 150 compute-sanitizer --tool $tool --report-api-errors no python3 /tmp/san_small.py $w 2>&1 \
      | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|max error" | head -5
  done
done
