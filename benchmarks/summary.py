"""Print the JSON-lines records the benchmarks wrote (``$TILEJIT_BENCH_OUT``) as one short table,
in the README's columns: ``python3 benchmarks/summary.py bench.jsonl``."""
from __future__ import annotations

import json
import sys

import common

COLUMNS = [("benchmark", "benchmark", ""), ("shape", "shape", ""), ("dtype", "dtype", ""),
           ("figure_text", "figure", ""), ("reference_text", "reference", ""),
           ("ratio", "ratio", ".3f"), ("note", "note", "")]
NOTE_KEYS = ("status", "num_warps", "mode")


def load(path: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    print(f"summary: {path}:{number} is not JSON, skipped", file=sys.stderr)
    return rows


def table_row(row: dict) -> dict:
    unit = row.get("unit", "")
    ref_figure = row.get("reference_figure")
    reference = row.get("reference", "")
    if ref_figure is not None and not reference.startswith("target"):
        reference = f"{reference}: {common.format_number(ref_figure, '.4g')} {unit}"
    note = ", ".join(f"{k}={row[k]}" for k in NOTE_KEYS if row.get(k) is not None)
    return {**row, "figure_text": f"{common.format_number(row.get('figure'), '.4g')} {unit}",
            "reference_text": reference, "note": note}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python3 benchmarks/summary.py RESULTS.jsonl", file=sys.stderr)
        return 2
    try:
        rows = load(argv[0])
    except FileNotFoundError:
        print(f"summary: no results file {argv[0]}")
        return 1
    if not rows:
        print(f"summary: {argv[0]} has no results")
        return 1
    first = rows[0]
    common.print_table([table_row(r) for r in rows], COLUMNS,
                       title=f"results {first.get('date', '?')} on {first.get('gpu', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
