#!/bin/bash
# GPU (session 30, first call): session 29's unrun persist_programs change (masked copies' aligned
# addresses), then W4A16 M64 (wgmma, B dequantised and stored into B atoms each iteration) with
# its packed weights three ways, alternating twice: the default (TMA ring for A, the weights one
# iteration ahead in registers), TILEJIT_TMA=0 alone, and the weights in a thread-private
# cp.async ring counted in the loop's shared-memory fit (plan_loops.COMPUTED_B_RINGS; the operand
# ring then takes cp.async too); then ncu of the default and of the ring at N 8192.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persist_programs.py tests/test_pipelining.py 2>&1 | tail -2
cd benchmarks
for round in 1 2; do                 # the nibble mask as a register (codegen.nibbles.REGISTER_MASK) at M1 / M16
  for flag in True False; do
    echo "-- round $round REGISTER_MASK=$flag"
    BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 100 python3 switch_probe.py \
      "tilejit.codegen.nibbles.REGISTER_MASK=$flag" -- --w4 1,16 --fp8 "" --reps 30 \
      --w4-configs 16x128x128x4x4,16x128x128x4x2,16x64x128x4x4 2>&1 | grep -E "w4a16|copy"
  done
done
cd ..
CONFIGS=64x128x128x4x4,64x128x128x4x4x2,64x64x128x4x4,64x128x64x4x4,64x128x64x4x4x3,64x64x64x4x4,64x64x64x4x8
cd benchmarks
for round in 1 2; do
  for side in default $([ $round = 1 ] && echo tma0) ring; do
    case $side in
      default) env=""; sets="tilejit.passes.prefetch_loads.WGMMA_DEQUANTISED=True";;
      tma0) env="TILEJIT_TMA=0"; sets="tilejit.passes.prefetch_loads.WGMMA_DEQUANTISED=True";;
      ring) env=""; sets="tilejit.passes.plan_loops.COMPUTED_B_RINGS=True";;
    esac
    echo "-- round $round $side"
    env $env BENCH_EACH=1 PROBE_SCRIPT=bench_quant.py timeout 150 python3 switch_probe.py $sets -- \
      --w4 64 --fp8 "" --reps 30 --w4-configs $CONFIGS 2>&1 | grep -E "w4a16|copy"
  done
done
cd ..
cp scripts/ncu_profile.sh /tmp/ncu_ring.sh
bash scripts/ncu_profile.sh w4a16 w4a16 --size 8192 --m 64 --split 4 --config 64x128x128x4 2>&1 | head -60
sed -i 's#python3 benchmarks/profile_one.py#python3 benchmarks/switch_probe.py tilejit.passes.plan_loops.COMPUTED_B_RINGS=True --#' /tmp/ncu_ring.sh
PROBE_SCRIPT=profile_one.py bash /tmp/ncu_ring.sh w4a16 w4a16 --size 8192 --m 64 --split 4 --config 64x128x64x4 2>&1 | head -60
