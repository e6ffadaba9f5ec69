#!/bin/bash
# GPU: compute-sanitizer (memcheck, racecheck for shared memory) on this session's new kernels at
# small sizes: the persistent warp-specialised GEMM (specialise_warps.PERSIST_TILES) and the
# split-KV decode attention (host API errors, cuda-python probing cuGetProcAddress, not counted);
# then the fp16 GEMM targets (FP16=0 skips them).  Usage: bash scripts/sanitize_new.sh
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cat > /tmp/decode_small.py <<'PY'
import numpy as np, torch, tilejit as tj
from tilejit.examples import decode_attention as ex
q, k, v = (torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)
           for x in ex.example_inputs(np.random.default_rng(0), 2, 8, 2, 4, 700, 128))
out = ex.run(q, k, v, split=256)
torch.cuda.synchronize()
ref = ex.reference(*(x.float().cpu().numpy() for x in (q, k, v)))
print("decode max error", float(np.abs(out.float().cpu().numpy() - ref).max()))
PY
for tool in memcheck racecheck; do
  echo "== $tool: persistent GEMM 3072^3 128x256x64x3x8 (288 programs on 132 CTAs)"
  TILEJIT_CACHE_DIR=/tmp/tjc_s1 PROBE_SCRIPT=profile_one.py timeout 150 compute-sanitizer --tool $tool --report-api-errors no \
    python3 benchmarks/switch_probe.py tilejit.passes.specialise_warps.PERSIST_TILES=True -- matmul --size 3072 \
    --config 128x256x64x3x8 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error" | head -5
  echo "== $tool: decode attention"
  TILEJIT_CACHE_DIR=/tmp/tjc_s2 timeout 150 compute-sanitizer --tool $tool --report-api-errors no python3 /tmp/decode_small.py 2>&1 \
    | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|max error" | head -5
done
[ "${FP16:-1}" = 0 ] && exit 0
echo "== fp16 GEMM"
TILEJIT_CACHE_DIR=/tmp/tjc_f16 timeout 200 python3 benchmarks/bench_matmul.py --shapes 4096x4096x4096,8192x8192x8192,4096x4096x14336 \
  --dtypes float16 --configs 128x256x64x4x8,128x256x64x3x8 --reps 20 2>&1 | grep -E "TFLOP|x4096 |x8192 |x14336 " | grep -v Warning
