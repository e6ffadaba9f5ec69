#!/bin/bash
# GPU (session 29, last): the persistent-programs path after its masked cp.async copies were given
# aligned addresses (rows past the array read from its first element).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/test_persist_programs.py tests/test_kernels.py \
  tests/test_pipelining.py 2>&1 | tail -3
