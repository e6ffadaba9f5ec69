#!/bin/bash
# GPU (session 33, second call), each step written to $OUT as it ends: the fp8 blockwise GEMM with
# rotate_products.ROTATE True / False, with bench_quant's error line against float64 (#20); the
# three softmax spellings (example, tutorial exp2, raw exp((s - m) * scale)) against SDPA (#15);
# cold compile of attention and GEMM (#17); the GPU tests this session's changes touch.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
cd benchmarks
for on in True False; do
  echo "-- bench_quant.py ROTATE=$on"
  PROBE_SCRIPT=bench_quant.py BENCH_EACH=1 timeout 100 python3 switch_probe.py \
    tilejit.passes.rotate_products.ROTATE=$on -- --w4 "" --fp8 4096,8192 --reps 15 \
    --fp8-configs 128x128x128x8:nk 2>&1 | grep -v "^ *$"
done 2>&1 | tee "$OUT/fp8.txt"
cd ..
timeout 90 python3 scripts/probes/attention_exp2.py bench --reps 10 2>&1 | grep -v "^ *$" | tee "$OUT/exp2.txt"
for kernel in attention gemm; do
  echo "-- cold compile $kernel"
  timeout 60 python3 benchmarks/bench_compile.py --mode gpu --kernel $kernel --runs 3 --stages 2>&1 \
    | grep -v "^ *$" | tail -8
done 2>&1 | tee "$OUT/compile.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_attention_backward.py \
  tests/test_fold_scale.py tests/test_fuse_fma.py tests/test_attention.py tests/test_rotate_products.py \
  tests/test_decode_attention.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
