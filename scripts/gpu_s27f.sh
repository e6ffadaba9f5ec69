#!/usr/bin/env bash
# Session 27: native launches of kernels with tensor maps and launch geometry (persistent,
# clustered, packed): GPU tests of those kernels, the TMA GEMM probe, bench_launch once.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "from tilejit.runtime import native; print('native:', native.status())"
timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_native_launch.py tests/test_tensormap.py \
    tests/test_tma_store.py tests/test_persist_tiles.py tests/test_persist_programs.py tests/test_cluster_rows.py \
    tests/test_wgmma.py tests/test_grid_dependency.py tests/test_decode_attention.py tests/test_gpu_kernels.py \
    tests/test_split_dot_loads.py tests/test_ring_barriers.py 2>&1 | tail -6
python3 scripts/probes/tma_launch.py
timeout 100 python3 benchmarks/bench_launch.py
