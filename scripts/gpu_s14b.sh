#!/bin/bash
# GPU: session 14's third call: the ctypes binding without argtypes against cuda-python
# (bench_launch, launchers taking turns; the cProfile probe), then the TMA-store epilogue A/B on
# the big bf16 GEMMs (TILEJIT_TMA_STORE=0 / =1; what each compiles printed first).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "Warning\|entry = self"; }
(cd benchmarks && timeout 80 python3 bench_launch.py 2>&1 | tail -10 | tee "$OUT/launch.txt")
TILEJIT_CACHE_DIR=/tmp/tjc_l timeout 60 python3 scripts/probes/launch_profile.py > "$OUT/launch_profile.txt" 2>&1
grep -E "µs" "$OUT/launch_profile.txt"
TILEJIT_CACHE_DIR=/tmp/tjc_t timeout 90 python3 -m pytest -q -m gpu tests/test_tma_store.py tests/test_runtime.py \
  tests/test_fast_launch.py 2>&1 | tail -2 | tee "$OUT/tests.txt"
for s in 0 1; do
  echo "== TILEJIT_TMA_STORE=$s"
  TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s python3 -c "
import torch, tilejit as tj
from tilejit.examples import matmul
a = torch.ones((4096, 4096), device='cuda', dtype=torch.bfloat16)
print('copy engines:', matmul.matmul_kernel.kernel.inspect(a, a, a, BM=128, BN=256, BK=64, STAGES=4, num_warps=8).copy_engines)" 2>&1 | quiet
  (cd benchmarks && TILEJIT_TMA_STORE=$s TILEJIT_CACHE_DIR=/tmp/tjc_s$s timeout 100 python3 bench_matmul.py \
    --shapes 4096x4096x4096,8192x8192x8192,4096x4096x14336 --dtypes bfloat16 --reps 20 \
    --configs 128x256x64x4x8 2>&1 | quiet | tail -5 | tee "$OUT/store$s.txt")
done
# where the attention's cold compile and cache hit go on the GPU host (new processes, cProfile)
(cd benchmarks && timeout 120 python3 bench_compile.py --mode gpu --kernel attention --runs 1 --profile 2>&1 \
  | quiet | grep -v "^$" | cut -c1-160 | tail -60 | tee "$OUT/compile_profile.txt")
