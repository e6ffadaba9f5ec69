#!/usr/bin/env bash
# The lead's one device call: install tilejit, print versions, run the GPU tests, the demo on the
# cuda backend and the benchmarks; full logs go to $OUT, a short summary is printed last.
#
#   bash scripts/gpu_check.sh [all|tests|demo|bench|PART,PART...] [-k EXPR]
#
# -k EXPR goes to pytest. Every part is time-boxed with `timeout`, and all of them together stay
# inside TJ_BUDGET_S seconds (default 480), so the call ends well before the 9-minute mark.
# Files in $OUT (flat names, at most 8): env.log install.log gpu_tests.log demo.log bench.log
# bench.jsonl summary.txt
set -uo pipefail
export PYTHONUNBUFFERED=1 TILEJIT_CACHE_DIR=/tmp/tj-cache
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1      # the device machine has no network

cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$OUT"

# ---------------------------------------------------------------------------------- arguments
usage() { sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//'; }
parts=all
kexpr=""
while [ $# -gt 0 ]; do
    case "$1" in
        -k) [ $# -ge 2 ] || { echo "gpu_check: -k needs an expression"; exit 2; }
            kexpr=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu_check: unknown option $1"; usage; exit 2 ;;
        *) parts=$1; shift ;;
    esac
done
for p in ${parts//,/ }; do
    case "$p" in all|tests|demo|bench) ;; *) echo "gpu_check: unknown part '$p'"; usage; exit 2 ;; esac
done
wants() { [[ ",$parts," == *",all,"* || ",$parts," == *",$1,"* ]]; }

# ------------------------------------------------------------------------------ time keeping
BUDGET_S=${TJ_BUDGET_S:-480}
START_S=$SECONDS
declare -a SUMMARY=()
# seconds a part may take: its own limit, cut to what is left of the budget (at least 5)
limit() {
    local left=$((BUDGET_S - (SECONDS - START_S)))
    local t=$1
    [ "$t" -gt "$left" ] && t=$left
    [ "$t" -lt 5 ] && t=5
    echo "$t"
}
note() {        # note NAME RC SECONDS: one summary line per step
    local status="ok"
    [ "$2" -eq 124 ] || [ "$2" -eq 137 ] && status="TIMED OUT"
    [ "$1" = tests ] && [ "$2" -eq 5 ] && status="NO TESTS RAN"     # pytest's exit 5
    [ "$2" -ne 0 ] && [ "$status" = ok ] && status="FAILED (exit $2)"
    SUMMARY+=("$(printf '%-16s %-18s %4ss' "$1" "$status" "$3")")
}
run_boxed() {   # run_boxed NAME LIMIT_S LOG CMD...: output to LOG only
    local name=$1 t; t=$(limit "$2"); local log=$3; shift 3
    local t0=$SECONDS
    timeout -k 10 "$t" "$@" >>"$log" 2>&1
    local rc=$?
    note "$name" "$rc" $((SECONDS - t0))
    return $rc
}

# --------------------------------------------------------------------------- install, versions
echo "== install (pip -e, no deps, no build isolation)"
: >"$OUT/install.log"
if ! run_boxed install 90 "$OUT/install.log" python3 -m pip install -q --no-deps --no-build-isolation -e .; then
    tail -n 20 "$OUT/install.log"
fi

echo "== versions"
{
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
            --format=csv 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    timeout 60 python3 - <<'EOF'
import importlib, importlib.metadata as md, sys
print("python", sys.version.split()[0])
for module, dist in [("torch", "torch"), ("triton", "triton"), ("cupy", None), ("cuda.bindings", "cuda-bindings"),
                     ("llvmlite", "llvmlite"), ("numpy", "numpy"), ("pytest", "pytest"),
                     ("pytest_benchmark", "pytest-benchmark"), ("tilejit", "tilejit")]:
    try:
        m = importlib.import_module(module)
        version = getattr(m, "__version__", None) or (md.version(dist) if dist else "?")
        print(f"{module:18} {version}")
    except Exception as e:
        print(f"{module:18} NOT IMPORTABLE: {type(e).__name__}: {e}")
try:
    import torch
    print("torch CUDA", torch.version.cuda, "| device:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
    from tilejit.runtime import driver
    print("tilejit sees a device:", driver.available(), "| backend:", __import__("tilejit.backends").backends.selected())
except Exception as e:
    print("device query failed:", type(e).__name__, e)
EOF
} 2>&1 | tee "$OUT/env.log"

# ------------------------------------------------------------------------------------- tests
if wants tests; then
    echo "== pytest -m gpu ${kexpr:+-k \"$kexpr\"}"
    pytest_args=(-m gpu -q -rfEs --timeout="${TJ_TEST_TIMEOUT_S:-120}")
    [ -n "$kexpr" ] && pytest_args+=(-k "$kexpr")
    t0=$SECONDS
    timeout -k 10 "$(limit "${TJ_TESTS_S:-230}")" python3 -m pytest "${pytest_args[@]}" 2>&1 | tee "$OUT/gpu_tests.log"
    note tests "${PIPESTATUS[0]}" $((SECONDS - t0))
    echo "== frontend and interpreter tests on this machine's Python ($(python3 --version 2>&1))"
    run_boxed "cpu tests" 90 "$OUT/gpu_tests.log" python3 -m pytest -q tests/test_frontend.py \
        tests/test_semantics.py tests/test_errors.py tests/test_interpreter.py tests/test_verifier.py
    tail -n 2 "$OUT/gpu_tests.log"
fi

# -------------------------------------------------------------------------------------- demo
if wants demo; then
    echo "== TILEJIT_BACKEND=cuda python3 -m tilejit demo"
    : >"$OUT/demo.log"
    run_boxed demo 45 "$OUT/demo.log" env TILEJIT_BACKEND=cuda python3 -m tilejit demo
    tail -n 25 "$OUT/demo.log"
fi

# --------------------------------------------------------------------------------- benchmarks
if wants bench; then
    : >"$OUT/bench.log"
    rm -f "$OUT/bench.jsonl"
    export TILEJIT_BENCH_OUT="$OUT/bench.jsonl"
    for spec in "softmax 75" "sweep 150 --columns 128,1024,16384,65536 --reps 15" "matmul ${TJ_MATMUL_S:-200} ${TJ_MATMUL_ARGS:-}" "compile 90" "launch 50"; do
        set -- $spec        # NAME LIMIT_S [ARGS...]
        echo "== benchmarks/bench_$1.py ${*:3}" | tee -a "$OUT/bench.log"
        lines_before=$(wc -l <"$OUT/bench.log")
        run_boxed "bench $1" "$2" "$OUT/bench.log" python3 "benchmarks/bench_$1.py" "${@:3}"
        tail -n +$((lines_before + 1)) "$OUT/bench.log" | tail -n 30
    done
    unset TILEJIT_BENCH_OUT
fi

# ----------------------------------------------------------------------------------- summary
{
    echo
    echo "================================ summary ================================"
    grep -m1 -A1 '^name' "$OUT/env.log" 2>/dev/null | tail -n 1
    grep -E '^(torch|triton|llvmlite|cuda.bindings) ' "$OUT/env.log" 2>/dev/null | tr -s ' ' | paste -sd ';' -
    printf '%s\n' "${SUMMARY[@]}"
    if wants tests && [ -f "$OUT/gpu_tests.log" ]; then
        echo "-- tests:"
        grep -E '^(FAILED|ERROR) ' "$OUT/gpu_tests.log" | head -n 10
        grep -E '(passed|failed|error|skipped|no tests ran|deselected)' "$OUT/gpu_tests.log" | tail -n 1
    fi
    if wants demo && [ -f "$OUT/demo.log" ]; then
        echo "-- demo (last lines):"
        tail -n 8 "$OUT/demo.log"
    fi
    if wants bench; then
        echo "-- benchmarks:"
        python3 benchmarks/summary.py "$OUT/bench.jsonl"
    fi
    echo "total $((SECONDS - START_S)) s; logs in $OUT: $(ls "$OUT" | tr '\n' ' ')"
} 2>&1 | tee "$OUT/summary.txt"
