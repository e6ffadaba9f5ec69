#!/usr/bin/env bash
# Mutation testing (outside CI) with cosmic-ray: each module where a one-line bug gives wrong
# results is mutated by cosmic-ray's own operators, one mutant at a time, and its targeted tests
# run against each mutant.  The run happens in a scratch clone of HEAD (the checkout is never
# touched); scripts/mutation/sitecustomize.py makes `import tilejit` load that clone.
#
#   bash scripts/mutation.sh [MODULE...]        (default: every module below; pip install cosmic-ray)
#
# Prints, per module, the mutants killed / survived / timed out and each survivor's diff; the
# figures and the survivors' verdicts (equivalent, or the gap a test then closed) go in
# tests/README.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
command -v cosmic-ray >/dev/null || { echo "mutation: needs cosmic-ray (python3 -m pip install cosmic-ray)"; exit 2; }

# module -> the tests that pin it down (run with -x: the first failure kills the mutant)
declare -A TESTS=(
  [runtime/packing.py]="tests/test_runtime.py tests/test_codegen.py::test_kernel_abi_and_constants"
  [tilejit/dtypes.py]="tests/test_dtypes.py tests/test_audit_gaps.py tests/test_interpreter.py"
  [passes/mma_layouts.py]="tests/test_mma_layouts.py tests/test_emulator_mma.py"
  [tilejit/codegen/mma.py]="tests/test_codegen_mma.py tests/test_audit_gaps.py tests/test_wgmma.py"
  [passes/pipeline_loads.py]="tests/test_pipelining.py tests/test_plans.py tests/test_dot.py tests/test_attention.py tests/test_wgmma.py"
  [passes/lower_memory.py]="tests/test_lower_memory.py tests/test_audit_gaps.py tests/test_kernels.py tests/test_emulator.py tests/test_passes.py"
  [tilejit/frontend/semantics.py]="tests/test_semantics.py tests/test_frontend.py tests/test_audit_gaps.py tests/test_dtypes.py"
  [tilejit/frontend/tracer.py]="tests/test_frontend_folding.py tests/test_control_folding.py tests/test_frontend.py tests/test_audit_gaps.py tests/test_none_args.py tests/test_static_debug.py"
  [tilejit/frontend/control.py]="tests/test_control_folding.py tests/test_errors.py tests/test_frontend_folding.py tests/test_frontend.py tests/test_audit_gaps.py tests/test_none_args.py tests/test_static_debug.py"
  [passes/persist_programs.py]="tests/test_persist_programs.py"
  [tilejit/frontend/mathlib.py]="tests/test_mathlib.py tests/test_float64_math.py"
  [passes/remat_indices.py]="tests/test_remat_indices.py tests/test_pack_programs.py"
  [tilejit/fingerprint.py]="tests/test_fingerprint.py tests/test_kernel_cache.py tests/test_stale_kernels.py tests/test_cache.py"
  [runtime/tensormap.py]="tests/test_tensormap.py tests/test_tma.py"
  [passes/tma.py]="tests/test_tma.py tests/test_plans.py"
  [tilejit/backends/emulate_tma.py]="tests/test_tma.py"
  [passes/specialise_warps.py]="tests/test_tma.py tests/test_attention.py"
  [passes/cluster_rows.py]="tests/test_cluster_rows.py tests/test_warps.py"
  [tilejit/backends/cuda.py]="tests/test_occupancy.py tests/test_cluster_rows.py tests/test_tma.py tests/test_backends_elementwise.py"
  [tilejit/backends/emulate_async.py]="tests/test_tma.py tests/test_wgmma.py tests/test_emulator_mma.py tests/test_pipelining.py"
)
modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=(runtime/packing.py tilejit/dtypes.py passes/mma_layouts.py tilejit/codegen/mma.py
                                    passes/pipeline_loads.py passes/lower_memory.py tilejit/fingerprint.py
                                    tilejit/frontend/semantics.py tilejit/frontend/tracer.py tilejit/frontend/control.py)

WORK=$(mktemp -d /tmp/tj-mutation.XXXXXX)
git clone -q . "$WORK/repo" || exit 2
export TJ_ROOT="$WORK/repo" PYTHONPATH="$PWD/scripts/mutation${PYTHONPATH:+:$PYTHONPATH}" HYPOTHESIS_PROFILE=ci
cd "$WORK/repo" || exit 2
for m in "${modules[@]}"; do
  tests=${TESTS[$m]:-}
  [ -n "$tests" ] || { echo "mutation: no tests listed for $m"; continue; }
  for t in $tests; do [ -e "${t%%::*}" ] || { echo "mutation: $m: missing test file ${t%%::*}"; continue 2; }; done
  name=$(echo "$m" | tr '/.' '__')
  cat > "$WORK/$name.toml" <<TOML
[cosmic-ray]
module-path = "$m"
timeout = 120.0
excluded-modules = []
test-command = "python3 -m pytest -x -q -p no:cacheprovider $tests"

[cosmic-ray.distributor]
name = "local"
TOML
  python3 -m pytest -x -q -p no:cacheprovider $tests >/dev/null 2>&1 || { echo "mutation: $m: its tests fail unmutated"; continue; }
  cosmic-ray init "$WORK/$name.toml" "$WORK/$name.sqlite" >/dev/null
  cosmic-ray exec "$WORK/$name.toml" "$WORK/$name.sqlite" >/dev/null 2>&1
  echo "=== $m"
  cr-report --show-diff --surviving-only "$WORK/$name.sqlite" 2>/dev/null | tail -n +1
done
echo "scratch clone and sessions: $WORK"
