"""An autotuner compiles its uncached configs in parallel worker processes
(``tilejit/autotune/workers.py``): the workers fill the on-disk cache and the tuner only reads
it; a config the workers cannot compile is compiled here and reported as before."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import backends
from tilejit.autotune import workers

CONFIGS = [tj.Config(BLOCK=b, num_warps=w) for b, w in ((256, 4), (512, 4), (1024, 8))]


@tj.autotune(configs=CONFIGS, key=["x"])
@tj.kernel
def scaled(x, y, BLOCK: tj.constexpr):
    tj.static_assert(BLOCK % 128 == 0, "BLOCK must be a multiple of 128")
    i = tj.program_id(0) * BLOCK
    tj.store(y, (i,), tj.exp(tj.load(x, (i,), (BLOCK,))) * 2.0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    scaled.kernel._cache.clear()
    return tmp_path


def refuse_compiles(monkeypatch):
    backend = backends.get("cuda")

    def refuse(tile_fn, options):
        raise AssertionError("compiled in the tuner's process")
    monkeypatch.setattr(backend, "compile", refuse)


def test_the_workers_compile_every_config_and_the_tuner_reads_them(cache, monkeypatch):
    monkeypatch.setenv("TILEJIT_COMPILE_WORKERS", "2")
    refuse_compiles(monkeypatch)
    x = np.zeros(4096, np.float32)
    kept, dropped = scaled.viable_configs(x, x, backend="cuda")
    assert kept == CONFIGS and dropped == {}


def test_without_workers_the_tuner_compiles_itself(cache, monkeypatch):
    monkeypatch.setenv("TILEJIT_COMPILE_WORKERS", "0")
    refuse_compiles(monkeypatch)
    x = np.zeros(4096, np.float32)
    kept, dropped = scaled.viable_configs(x, x, backend="cuda")
    assert kept == [] and all("compiled in the tuner's process" in why for why in dropped.values())


def test_a_config_that_fails_is_reported_as_without_workers(cache, monkeypatch):
    monkeypatch.setenv("TILEJIT_COMPILE_WORKERS", "2")
    bad = tj.Config(BLOCK=96, num_warps=4)                  # the kernel's static_assert refuses it
    tuned = tj.autotune(configs=CONFIGS[:2] + [bad], key=["x"])(scaled.kernel)
    x = np.zeros(4096, np.float32)
    kept, dropped = tuned.viable_configs(x, x, backend="cuda")
    assert kept == CONFIGS[:2] and list(dropped) == [bad] and "BLOCK must be a multiple of 128" in dropped[bad]


@pytest.mark.parametrize("setting,jobs,count", [("", 1, 1), ("0", 9, 0), ("3", 9, 3), ("3", 2, 2), ("x", 40, None)])
def test_worker_count(monkeypatch, setting, jobs, count):
    monkeypatch.setenv("TILEJIT_COMPILE_WORKERS", setting)
    import os
    want = count if count is not None else min(os.cpu_count() or 1, workers.MAX_WORKERS, jobs)
    assert workers.worker_count(jobs) == want
