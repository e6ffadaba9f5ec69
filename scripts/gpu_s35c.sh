#!/bin/bash
# GPU (session 35, one call): the D64 experiments first (gpu_s35b.sh), then gpu_s35a.sh.
bash scripts/gpu_s35b.sh
bash scripts/gpu_s35a.sh
