#!/bin/bash
# GPU (session 35, the budget's last seconds): D64 attention with the defaults (the CTA wishes on)
# at the tilings that take 2 and 3 CTAs an SM; the benchmark checks each output against SDPA.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
cd benchmarks && timeout 60 python3 bench_attention.py --configs 16x16x1024x64 --reps 8 \
  --kernel-configs 128x64x8,64x64x4 2>&1 | grep -v "^ *$" | tail -3
