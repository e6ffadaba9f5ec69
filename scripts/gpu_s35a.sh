#!/bin/bash
# GPU (session 35, first call): the GPU tests session 34 could not run (the rotated attention with
# its last-trip skip, on by default at D128; the torch op's D64 backward tiles; fold_scale,
# fuse_fma), attention with the defaults against SDPA in the same run, then the D64 tiles
# 256x64x16 (four consumer warpgroups) alone now that their setmaxnreg no longer asks for more
# registers than the producer frees (5d213c7), under a time limit and compute-sanitizer.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_rotate_products.py \
  tests/test_attention_backward.py tests/test_fold_scale.py tests/test_fuse_fma.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
cd benchmarks
echo "-- attention, defaults" | tee "$OUT/att.txt"
timeout 60 python3 bench_attention.py --configs 4x32x4096x128,16x16x1024x64 --kernel-configs 128x128x8 --reps 10 \
  2>&1 | grep -v "^ *$" | tail -6 | tee -a "$OUT/att.txt"
echo "-- D64 256x64x16 alone" | tee "$OUT/d64.txt"
timeout 60 python3 bench_attention.py --configs 16x16x1024x64 --kernel-configs 256x64x16,128x128x8 --reps 10 \
  2>&1 | grep -v "^ *$" | tail -6 | tee -a "$OUT/d64.txt"
cd ..
echo "-- sanitizer 256x64x16" | tee "$OUT/san.txt"
timeout 90 compute-sanitizer --tool memcheck --report-api-errors no python3 - <<'PY' 2>&1 | tail -5 | tee -a "$OUT/san.txt"
import torch
import tilejit as tj
from tilejit.examples import attention as ex
q, k, v = (torch.randn(1, 2, 300, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for causal in (False, True):
    o = torch.empty_like(q)
    ex.attention_kernel[(2, 2)](q, k, v, o, 0.125, BM=256, BN=64, BD=64, CAUSAL=causal, num_warps=16)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    print("causal", causal, "max error", (o.float() - ref).abs().max().item())
PY
