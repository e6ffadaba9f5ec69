#!/bin/bash
# GPU: FlashAttention backward after passes/sink_transposes.py and split_dot_loads.py put the dK/dV loop on wgmma from
# TMA rings (it ran on mma.sync, unpipelined, spilling 1-3 KB a thread) -- at most about 8 minutes.
#   1. the GPU tests of the split, the backward, attention (D256, GQA 8), the ring barriers;
#   2. bench_attention_backward.py against SDPA flash (backward and forward + backward);
#   3. train_gpt (the torch op's tiles now wgmma throughout) against torch, 200 steps.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_split_dot_loads.py tests/test_sink_transposes.py \
  tests/test_attention_backward.py tests/test_attention.py tests/test_ring_barriers.py 2>&1 | tail -4 | tee "$OUT/tests.txt"
(cd benchmarks && timeout 240 python3 bench_attention_backward.py --reps 10 \
  --kernel-configs 32x64x4/64x64x4,32x128x8/128x64x8 2>&1 | quiet | tail -14 \
  | tee "$OUT/backward.txt")
timeout 100 python3 examples/train_gpt.py --steps 200 2>&1 | quiet | tail -6 | tee "$OUT/train_gpt.txt"
