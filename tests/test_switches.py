"""The compiler's module switches (``tilejit/switches.py``): their defaults match the sources,
and a switch set away from its default is part of both compile caches' keys, reaches autotuning
worker processes and drops fast-path launchers when announced."""
from __future__ import annotations

import ast
import io
import os
import pickle
import sys

import numpy as np
import pytest

import tilejit as tj
from tilejit import backends, fingerprint
from tilejit.passes import switches
from tilejit.autotune import workers

ROOT = os.path.join(os.path.dirname(__file__), "..")


def source_settings() -> dict:
    """Every upper-case module-level bool/int/float or tuple of ints (``DECODE_DOT_THREADS_PER_SM``)
    of the passes, the code generators and the backends' package, read from the source files."""
    files = [(os.path.join(ROOT, d, n), pkg if n == "__init__.py" else f"{pkg}.{n[:-3]}")
             for d, pkg in (("passes", "tilejit.passes"), ("tilejit/codegen", "tilejit.codegen"))
             for n in sorted(os.listdir(os.path.join(ROOT, d))) if n.endswith(".py")]
    files.append((os.path.join(ROOT, "tilejit", "backends", "__init__.py"), "tilejit.backends"))
    found: dict = {}
    for path, module in files:
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if not name.isupper() or name.startswith("_"):
                    continue
                try:
                    value = eval(compile(ast.Expression(node.value), path, "eval"), {})
                except Exception:       # an expression of other names: not a setting
                    continue
                if type(value) in (bool, int, float) or (type(value) is tuple and all(type(v) is int for v in value)):
                    found.setdefault(module, {})[name] = value
    return found


def test_the_defaults_are_the_sources_values_and_name_every_setting():
    assert switches.DEFAULTS == source_settings()


@pytest.fixture
def multicast_on(monkeypatch):
    from tilejit.passes import multicast
    monkeypatch.setattr(multicast, "MULTICAST", True)
    yield
    switches.changed()


def test_only_switches_away_from_their_defaults_are_overrides(monkeypatch):
    from tilejit.passes import multicast
    from tilejit.codegen import llvm
    assert switches.overrides() == ()
    monkeypatch.setattr(llvm, "CODEGEN_OPT", 3)
    monkeypatch.setattr(multicast, "MULTICAST", True)
    assert switches.overrides() == (("tilejit.passes.multicast.MULTICAST", True),
                                    ("tilejit.codegen.llvm.CODEGEN_OPT", 3))
    monkeypatch.setattr(llvm, "CODEGEN_OPT", 2.0)            # equal, but not the same setting
    assert ("tilejit.codegen.llvm.CODEGEN_OPT", 2.0) in switches.overrides()


def test_a_tuple_switch_is_an_override_too(monkeypatch):
    from tilejit.passes import pipeline
    monkeypatch.setattr(pipeline, "DECODE_DOT_THREADS_PER_SM", ())
    assert switches.overrides() == (("tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM", ()),)


def test_a_module_not_imported_is_not_imported_to_read_it(monkeypatch):
    monkeypatch.delitem(sys.modules, "tilejit.passes.multicast")
    assert switches.overrides() == ()
    assert "tilejit.passes.multicast" not in sys.modules


def test_the_disk_key_changes_with_an_override(multicast_on, monkeypatch):
    args = ("f" * 64, [], {"BLOCK": 128}, 4, "sm_90a", 12080)
    on = fingerprint.cache_key(*args)
    from tilejit.passes import multicast
    monkeypatch.setattr(multicast, "MULTICAST", False)
    assert fingerprint.cache_key(*args) != on


@tj.kernel
def doubled(x, y, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)) * 2.0)


def test_a_kernel_compiles_again_when_a_switch_changes(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    from tilejit.passes import sink_transposes
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    doubled[(2,)](x, y, BLOCK=128)
    before = len(doubled._cache)
    monkeypatch.setattr(sink_transposes, "SINK_TRANSPOSES", False)
    doubled[(2,)](x, y, BLOCK=128)
    assert len(doubled._cache) == before + 1
    np.testing.assert_array_equal(y, x * 2)


def test_announcing_a_change_drops_the_fast_path_launchers(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.arange(256, dtype=np.float32)
    y = np.zeros_like(x)
    doubled[(2,)](x, y, BLOCK=128)
    doubled._fast["probe"] = object()
    switches.changed()
    doubled[(2,)](x, y, BLOCK=128)
    assert "probe" not in doubled._fast


def test_apply_sets_known_switches_and_refuses_others(monkeypatch):
    from tilejit.passes import specialise_warps
    monkeypatch.setattr(specialise_warps, "ELECT_RELEASES", False)
    generation = switches.generation
    switches.apply([("tilejit.passes.specialise_warps.ELECT_RELEASES", True)])
    assert specialise_warps.ELECT_RELEASES is True and switches.generation == generation + 1
    with pytest.raises(KeyError, match="'tilejit.passes.specialise_warps.ELECT' is not a compiler switch"):
        switches.apply([("tilejit.passes.specialise_warps.ELECT", True)])


def test_a_worker_compiles_with_the_parents_overrides(monkeypatch):
    from tilejit.passes import multicast
    seen = []

    class Probe:
        def compile(self, tile_fn, options):
            seen.append((tile_fn, multicast.MULTICAST))

    monkeypatch.setitem(backends._registry, "probe", Probe())
    monkeypatch.setitem(backends.PROVIDERS, "probe", ())
    monkeypatch.setattr(multicast, "MULTICAST", False)
    out = io.BytesIO()
    stdin = io.BytesIO(pickle.dumps(("probe", [("job", {})], (("tilejit.passes.multicast.MULTICAST", True),))))
    monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": stdin})())
    monkeypatch.setattr(sys, "stdout", type("Out", (), {"buffer": out})())
    workers.serve()
    assert seen == [("job", True)] and pickle.loads(out.getvalue()) == [True]


def test_the_parent_sends_its_overrides_to_each_worker(multicast_on, monkeypatch):
    sent = []

    class Proc:
        returncode = 0

        def __init__(self, *args, **kwargs):
            self.stdin = io.BytesIO()
            self.stdin.close = lambda: sent.append(pickle.loads(self.stdin.getvalue()))
            self.index = len(sent)

        def communicate(self, timeout=None):
            return pickle.dumps([True] * len(sent[self.index][1])), b""

        def poll(self):
            return 0

    monkeypatch.setattr(workers, "worker_count", lambda jobs: 2)
    monkeypatch.setattr(workers.subprocess, "Popen", Proc)
    assert workers.compile_in_workers("probe", ["a", "b", "c"]) == 3
    assert [s[2] for s in sent] == [(("tilejit.passes.multicast.MULTICAST", True),)] * 2
