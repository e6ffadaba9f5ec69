#!/bin/bash
# GPU: ncu of the W4A16 example (benchmarks/profile_one.py w4a16) at M1 N = K = 8192, split 8.
# Usage: bash scripts/w4_profile.sh [CONFIG] [M]
bash "$(dirname "$0")/ncu_profile.sh" w4a16 w4a16 --size 8192 --m "${2:-1}" --config "${1:-16x128x128x4}"
