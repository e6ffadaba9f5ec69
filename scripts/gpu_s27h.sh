#!/usr/bin/env bash
# Session 27, last: bench_launch with the three-tensor row (the launch target's kernel shape),
# three times, and the parts probe.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 scripts/probes/native_launch_parts.py | tail -9
for i in 1 2 3; do timeout 120 python3 benchmarks/bench_launch.py; done
