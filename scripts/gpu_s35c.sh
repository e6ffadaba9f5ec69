#!/bin/bash
# GPU (session 35, one call): gpu_s35a.sh (session 34's unrun GPU tests, attention with the
# defaults, the D64 256x64x16 tiles alone) then gpu_s35b.sh (D64 attention with CTAS_PER_SM 1 / 2 / 3).
bash scripts/gpu_s35a.sh
bash scripts/gpu_s35b.sh
