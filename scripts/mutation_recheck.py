"""Re-run the surviving mutants of a cosmic-ray session against the tests of today's HEAD.

A mutation session runs on a scratch clone of the commit it started from; tests written while it
ran do not count in it.  This applies each survivor's diff to a fresh clone of HEAD (the mutated
file must be unchanged at the mutated lines: ``patch`` refuses otherwise) and runs the module's
targeted tests from ``scripts/mutation.sh`` on it, one mutant at a time.

    python3 scripts/mutation_recheck.py SESSION.sqlite MODULE          (outside CI)

Prints one line per survivor (killed now / still survives / the diff no longer applies) and the
totals; the still-surviving diffs follow, for the verdicts in tests/README.md.
"""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def targeted_tests(module: str) -> list[str]:
    text = (ROOT / "scripts" / "mutation.sh").read_text()
    match = re.search(rf'\[{re.escape(module)}\]="([^"]+)"', text)
    if not match:
        raise SystemExit(f"mutation_recheck: scripts/mutation.sh lists no tests for {module}")
    return match[1].split()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    session, module = argv
    tests = targeted_tests(module)
    rows = sqlite3.connect(session).execute(
        "select job_id, diff from work_results where test_outcome = 'SURVIVED'").fetchall()
    work = Path(tempfile.mkdtemp(prefix="tj-recheck."))
    subprocess.run(["git", "clone", "-q", str(ROOT), str(work / "repo")], check=True)
    repo = work / "repo"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts" / "mutation"), "TJ_ROOT": str(repo),
           "HYPOTHESIS_PROFILE": "ci"}
    counts = {"killed": 0, "survives": 0, "stale": 0}
    alive = []
    for job, diff in rows:
        diff = diff if diff.endswith("\n") else diff + "\n"
        applied = subprocess.run(["patch", "-p1", "-s", "-f"], cwd=repo, input=diff, text=True,
                                 capture_output=True)
        if applied.returncode:
            counts["stale"] += 1
            subprocess.run(["git", "checkout", "-q", "."], cwd=repo)
            print(job[:8], "stale (the diff no longer applies)")
            continue
        run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        subprocess.run(["git", "checkout", "-q", "."], cwd=repo)
        verdict = "killed" if run.returncode else "survives"
        counts[verdict] += 1
        if verdict == "survives":
            alive.append(diff)
        print(job[:8], verdict, flush=True)
    print(f"{len(rows)} survivors re-run: {counts['killed']} killed now, {counts['survives']} still survive, "
          f"{counts['stale']} no longer apply")
    for diff in alive:
        print("=" * 60)
        print(diff)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
