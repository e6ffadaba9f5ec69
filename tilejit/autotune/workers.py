"""Compiling an autotuner's configs in parallel worker processes.

Each config's frontend runs here (milliseconds); its tile IR and backend options, plain picklable
data, go to one of ``TILEJIT_COMPILE_WORKERS`` (default: the CPUs, at most 16) fresh Python
processes, which run the passes, LLVM and assembly and write the result to the on-disk cache.
The tuner's own ``compile`` of each config then reads it from there.  Workers are started with
``python -c`` (not ``multiprocessing``), so a user's script is never re-imported in them.  A job
that fails in a worker is simply compiled again in this process, which reports its error as
usual; so is everything when workers cannot start.

    python3 -c "from tilejit.autotune import workers; workers.serve()"   # a worker: jobs on stdin
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

MAX_WORKERS = 16
WORKER_TIMEOUT_S = 900         # a worker that takes longer is killed; its jobs compile here


def worker_count(jobs: int) -> int:
    """How many workers ``jobs`` compiles get: ``TILEJIT_COMPILE_WORKERS`` (0 or 1: none), else
    one per CPU, at most MAX_WORKERS, never more than the jobs."""
    setting = os.environ.get("TILEJIT_COMPILE_WORKERS", "").strip()
    limit = int(setting) if setting.isdigit() else min(os.cpu_count() or 1, MAX_WORKERS)
    return min(limit, jobs)


def compile_in_workers(backend_name: str, jobs: list) -> int:
    """Run ``backend.compile(tile_fn, options)`` for each (tile_fn, options) in ``jobs`` in worker
    processes; returns how many succeeded (their artifacts are in the on-disk cache)."""
    count = worker_count(len(jobs))
    if count < 2:
        return 0
    from tilejit.passes import switches
    shares = [jobs[i::count] for i in range(count)]
    settings = switches.overrides()             # the module switches this process compiles with
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = []
    try:
        for share in shares:
            proc = subprocess.Popen([sys.executable, "-c", "from tilejit.autotune import workers; workers.serve()"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=env)
            procs.append(proc)
            proc.stdin.write(pickle.dumps((backend_name, share, settings)))
            proc.stdin.close()
            proc.stdin = None                     # (so that communicate() only reads)
        done = 0
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=WORKER_TIMEOUT_S)
                done += sum(pickle.loads(out)) if proc.returncode == 0 else 0
            except Exception:                     # a worker that died or hung: its jobs compile here
                pass
        return done
    except OSError:                               # no processes here: everything compiles in this one
        return 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def serve() -> None:
    """A worker: (backend name, jobs, module switch overrides) pickled on stdin, one success flag
    per job pickled on stdout."""
    from tilejit import backends
    from tilejit.passes import switches
    backend_name, jobs, settings = pickle.loads(sys.stdin.buffer.read())
    switches.apply(settings)
    backend = backends.get(backend_name)
    flags = []
    for tile_fn, options in jobs:
        try:
            backend.compile(tile_fn, options)
            flags.append(True)
        except Exception:                         # reported by the parent's own compile of it
            flags.append(False)
    sys.stdout.buffer.write(pickle.dumps(flags))
