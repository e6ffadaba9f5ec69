#!/bin/bash
# GPU: A/B probes of compiler module switches in one call.  Each line of $PROBES (or of the
# file given as $1, one probe per line) is
# "LABEL|SWITCHES|BENCH_SWEEP_ARGS", run as
#   switch_probe.py SWITCHES -- BENCH_SWEEP_ARGS     (SWITCHES may be empty: the defaults)
# with a fresh cache per label (the cache key does not see module switches); each result goes to
# $OUT/probe-LABEL.txt and the ratio columns to stdout.  Env: TESTS (pytest args, run first),
# NCU ("kernel:cols:dtype ..." profiled with the defaults), PROBE_S (seconds per probe).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -n "$TESTS" ]; then
  TILEJIT_CACHE_DIR=/tmp/tjc_t timeout ${TEST_S:-150} python3 -m pytest -q -x $TESTS 2>&1 | tail -4 | tee "$OUT/tests.txt"
fi
PROBES=${PROBES:-$(cat "${1:-/dev/null}")}
while IFS='|' read -r label switches args; do
  [ -z "$label" ] && continue
  echo "== $label: ${switches:-defaults} -- $args"
  TILEJIT_CACHE_DIR=/tmp/tjc_p_$label timeout ${PROBE_S:-150} python3 benchmarks/switch_probe.py $switches -- $args \
    > "$OUT/probe-$label.txt" 2>&1
  grep -v "Warning\|entry = self" "$OUT/probe-$label.txt" | tail -${LINES_SHOWN:-14}
done <<< "$PROBES"
if [ -n "$NCU" ]; then
  MODES=${NCU_MODES:-1} SWITCH=${NCU_SWITCH:-TILEJIT_PROBE_UNUSED} bash scripts/profile_rows.sh "$NCU"
fi
