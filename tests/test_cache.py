"""On-disk cache (hit across processes, corruption, concurrent writers, info/clear) and the
kernel fingerprint that keys it."""
import multiprocessing
import os
import subprocess
import sys
import textwrap
import types
import warnings

import pytest

import tilejit as tj
from tilejit import fingerprint
from tilejit.runtime import cache
from tilejit.specs import ArraySpec, ScalarSpec

KEY = "ab" + "0123456789abcdef" * 3
FILES = {"kernel.ptx": b".version 8.0\n.target sm_90a\n" * 50, "kernel.cubin": bytes(range(256)) * 40}
META = {"name": "add", "num_warps": 4, "shared_bytes": 0, "params": [["ptr", 0, None, "float32"]]}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entry_file(name: str) -> str:
    directory = cache.entry_dir(KEY)
    return next(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(name + "."))


# --- cache -------------------------------------------------------------------------------------
def test_put_then_get_round_trips_files_and_meta():
    assert cache.get(KEY) is None
    assert cache.put(KEY, FILES, META)
    files, meta = cache.get(KEY)
    assert files == FILES and meta == META


def test_default_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == str(tmp_path / "xdg" / "tilejit")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "tilejit")


def _run(code: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_hit_in_a_new_process(cache_dir):
    env = dict(os.environ, TILEJIT_CACHE_DIR=str(cache_dir))
    _run(f"""
        from tilejit.runtime import cache
        assert cache.put({KEY!r}, {{"kernel.ptx": b"PTX TEXT"}}, {{"name": "k"}})
    """, env)
    out = _run(f"""
        from tilejit.runtime import cache
        files, meta = cache.get({KEY!r})
        print(files["kernel.ptx"].decode(), meta["name"])
    """, env)
    assert out == "PTX TEXT k"


def test_flipped_byte_is_deleted_with_a_warning():
    cache.put(KEY, FILES, META)
    path = entry_file("kernel.cubin")
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0x40
    open(path, "wb").write(bytes(data))
    with pytest.warns(UserWarning, match="corrupt cache entry .*" + KEY):
        assert cache.get(KEY) is None
    assert not os.path.exists(cache.entry_dir(KEY))
    assert cache.get(KEY) is None      # stays a plain miss afterwards, no second warning


def test_truncated_file_is_a_miss_with_a_warning():
    cache.put(KEY, FILES, META)
    path = entry_file("kernel.ptx")
    os.truncate(path, 10)
    with pytest.warns(UserWarning, match="truncated or modified"):
        assert cache.get(KEY) is None


@pytest.mark.parametrize("damage", ["truncate", "edit-meta", "delete-file"])
def test_damaged_manifest_or_missing_file_is_a_miss(damage):
    cache.put(KEY, FILES, META)
    manifest = os.path.join(cache.entry_dir(KEY), cache.MANIFEST)
    if damage == "truncate":
        os.truncate(manifest, os.path.getsize(manifest) // 2)
    elif damage == "edit-meta":
        text = open(manifest).read().replace('"num_warps": 4', '"num_warps": 8')
        open(manifest, "w").write(text)
    else:
        os.unlink(entry_file("kernel.ptx"))
    with pytest.warns(UserWarning, match="corrupt cache entry"):
        assert cache.get(KEY) is None


def test_bad_key_and_file_name_are_rejected():
    with pytest.raises(ValueError):
        cache.get("../../etc")
    with pytest.raises(ValueError):
        cache.put(KEY, {"../evil": b""}, {})


def _writer(directory: str, worker: int, rounds: int) -> None:
    os.environ["TILEJIT_CACHE_DIR"] = directory
    for r in range(rounds):      # different bytes per writer: a mix-up would fail the checksums
        files = {"kernel.ptx": f"ptx from {worker} round {r}".encode() * 500,
                 "kernel.cubin": bytes([worker]) * (1000 + r)}
        assert cache.put(KEY, files, {"worker": worker, "round": r})


def assert_consistent(entry) -> None:
    files, meta = entry
    worker, rnd = meta["worker"], meta["round"]
    assert files["kernel.ptx"] == f"ptx from {worker} round {rnd}".encode() * 500
    assert files["kernel.cubin"] == bytes([worker]) * (1000 + rnd)


def test_concurrent_writers_leave_a_valid_entry_and_readers_never_see_a_mix(cache_dir):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(cache_dir), w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a reader must never take a live entry for corrupt
        while any(p.is_alive() for p in procs):
            entry = cache.get(KEY)
            if entry is not None:
                assert_consistent(entry)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert_consistent(cache.get(KEY))


def test_info_and_clear(cache_dir):
    assert cache.info() == {"dir": str(cache_dir), "entries": 0, "bytes": 0}
    cache.put(KEY, FILES, META)
    cache.put("cd" + KEY[2:], {"a.ptx": b"x"}, {})
    info = cache.info()
    assert info["entries"] == 2
    assert info["bytes"] > sum(len(v) for v in FILES.values())
    assert cache.clear() == 2
    assert cache.info()["entries"] == 0 and cache.get(KEY) is None


def test_unwritable_cache_warns_instead_of_failing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(blocker))
    with pytest.warns(UserWarning, match="could not write cache entry"):
        assert cache.put(KEY, FILES, META) is False


# --- fingerprint -------------------------------------------------------------------------------
def make(source: str, namespace: dict | None = None, name: str = "kernel"):
    """Define a function from source in a fresh module namespace (a stand-in for a user file)."""
    module = types.ModuleType("user_kernels")
    module.__dict__.update({"tj": tj, **(namespace or {})})
    exec(compile(textwrap.dedent(source), "user_kernels.py", "exec"), module.__dict__)
    return module.__dict__[name]


def as_tj_func(fn):
    """The shape the frontend's ``tj.func`` objects have: a marker and the function at ``.fn``."""
    wrapper = types.SimpleNamespace(fn=fn, __tilejit_func__=True)
    return wrapper


KERNEL = """
def kernel(x, out, n, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tile = tj.load(x, (i,), (BLOCK,)) * SCALE
    tj.store(out, (i,), helper(tile))
"""


def test_identical_redefinition_has_the_same_fingerprint():
    helper = as_tj_func(make("def helper(t):\n    return t + 1\n", name="helper"))
    a = make(KERNEL, {"SCALE": 2.0, "helper": helper})
    b = make(KERNEL, {"SCALE": 2.0, "helper": helper})
    assert a is not b
    assert fingerprint.kernel_fingerprint(a) == fingerprint.kernel_fingerprint(b)


def test_code_change_changes_the_fingerprint():
    helper = as_tj_func(make("def helper(t):\n    return t + 1\n", name="helper"))
    a = make(KERNEL, {"SCALE": 2.0, "helper": helper})
    b = make(KERNEL.replace("* SCALE", "+ SCALE"), {"SCALE": 2.0, "helper": helper})
    c = make(KERNEL.replace("(i,), (BLOCK,)", "(i,), (BLOCK,), 0.5"), {"SCALE": 2.0, "helper": helper})
    prints = {fingerprint.kernel_fingerprint(f) for f in (a, b, c)}
    assert len(prints) == 3


@pytest.mark.parametrize("scale", [3.0, 2, "2.0", tj.float16, (2.0,)])
def test_referenced_global_change_changes_the_fingerprint(scale):
    helper = as_tj_func(make("def helper(t):\n    return t + 1\n", name="helper"))
    base = fingerprint.kernel_fingerprint(make(KERNEL, {"SCALE": 2.0, "helper": helper}))
    assert fingerprint.kernel_fingerprint(make(KERNEL, {"SCALE": scale, "helper": helper})) != base


def test_unreferenced_global_does_not_change_the_fingerprint():
    helper = as_tj_func(make("def helper(t):\n    return t + 1\n", name="helper"))
    a = make(KERNEL, {"SCALE": 2.0, "helper": helper, "UNUSED": 1})
    b = make(KERNEL, {"SCALE": 2.0, "helper": helper, "UNUSED": 2})
    assert fingerprint.kernel_fingerprint(a) == fingerprint.kernel_fingerprint(b)


def test_called_tj_func_change_changes_the_fingerprint():
    one = as_tj_func(make("def helper(t):\n    return t + 1\n", name="helper"))
    two = as_tj_func(make("def helper(t):\n    return t + 2\n", name="helper"))
    # a change two calls deep: the kernel calls `helper`, which calls `inner`
    deep = """
        def helper(t):
            return inner(t)
    """
    inner1 = as_tj_func(make("def inner(t):\n    return t * 2\n", name="inner"))
    inner2 = as_tj_func(make("def inner(t):\n    return t * 3\n", name="inner"))
    via1 = as_tj_func(make(deep, {"inner": inner1}, name="helper"))
    via2 = as_tj_func(make(deep, {"inner": inner2}, name="helper"))
    prints = [fingerprint.kernel_fingerprint(make(KERNEL, {"SCALE": 2.0, "helper": h}))
              for h in (one, two, via1, via2)]
    assert len(set(prints)) == 4


def test_recursive_tj_funcs_terminate():
    namespace = {}
    f = as_tj_func(make("def f(t):\n    return g(t)\n", namespace, name="f"))
    g = as_tj_func(make("def g(t):\n    return f(t)\n", namespace, name="g"))
    f.fn.__globals__["g"] = g
    g.fn.__globals__["f"] = f
    assert len(fingerprint.kernel_fingerprint(f)) == 64


def test_module_attribute_values_are_part_of_the_fingerprint():
    config = types.ModuleType("config")
    config.BLOCK_SCALE = 4
    source = "def kernel(x):\n    return x * config.BLOCK_SCALE\n"
    before = fingerprint.kernel_fingerprint(make(source, {"config": config}))
    config.BLOCK_SCALE = 8
    assert fingerprint.kernel_fingerprint(make(source, {"config": config})) != before


def test_closure_and_defaults_are_part_of_the_fingerprint():
    def outer(k):
        def kernel(x, y=1):
            return x * k + y
        return kernel
    assert fingerprint.kernel_fingerprint(outer(1)) != fingerprint.kernel_fingerprint(outer(2))
    f, g = outer(1), outer(1)
    g.__defaults__ = (2,)
    assert fingerprint.kernel_fingerprint(f) != fingerprint.kernel_fingerprint(g)


def test_fingerprint_is_stable_across_processes():
    source = KERNEL.replace("helper(tile)", "tile")
    code = f"""
        import types, tilejit as tj
        from tilejit.fingerprint import kernel_fingerprint
        m = types.ModuleType("user_kernels"); m.tj = tj; m.SCALE = 2.0
        exec(compile({source!r}, "user_kernels.py", "exec"), m.__dict__)
        print(kernel_fingerprint(m.kernel))
    """
    here = fingerprint.kernel_fingerprint(make(source, {"SCALE": 2.0}))
    assert _run(code, dict(os.environ)) == here


def test_compiler_fingerprint_is_cached_and_cheap():
    import time
    fingerprint.compiler_fingerprint.cache_clear()
    start = time.perf_counter()
    first = fingerprint.compiler_fingerprint()
    elapsed = time.perf_counter() - start
    assert fingerprint.compiler_fingerprint() is first
    assert elapsed < 0.25, f"compiler_fingerprint took {elapsed * 1e3:.1f} ms"


def test_cache_key_covers_every_input():
    fp = "f" * 64
    base = dict(fingerprint=fp, specs=[ArraySpec(tj.float32, 1), ScalarSpec(tj.int32)],
                constexprs={"BLOCK": 128}, num_warps=4, target="sm_90a", driver_version=12080)
    key = fingerprint.cache_key(**base)
    assert key == fingerprint.cache_key(**base) and len(key) == 64
    changes = {"fingerprint": "e" * 64,
               "specs": [ArraySpec(tj.float32, 1, aligned16=False), ScalarSpec(tj.int32)],
               "constexprs": {"BLOCK": 256}, "num_warps": 8, "target": "sm_80",
               "driver_version": 12090}
    for name, value in changes.items():
        assert fingerprint.cache_key(**{**base, name: value}) != key, name


def _chain_namespaces(value):
    """Globals of a user file whose kernel reads ``value`` through attribute chains of a
    package's submodule, nested classes, an object's attribute and an enum member's value."""
    import enum
    pkg, sub = types.ModuleType("pkg"), types.ModuleType("pkg.sub")
    sub.SCALE = value
    pkg.sub = sub

    class Outer:
        class Inner:
            GAIN = value

    cfg = types.SimpleNamespace(inner=types.SimpleNamespace(gain=value))
    Mode = enum.Enum("Mode", {"FAST": value})
    return {"pkg": pkg, "Outer": Outer, "cfg": cfg, "Mode": Mode}


@pytest.mark.parametrize("expr", ["pkg.sub.SCALE", "Outer.Inner.GAIN", "cfg.inner.gain", "Mode.FAST.value"])
def test_values_reached_through_attribute_chains_are_part_of_the_fingerprint(expr):
    source = f"def kernel(x):\n    return x * {expr}\n"
    two = fingerprint.kernel_fingerprint(make(source, _chain_namespaces(2)))
    assert fingerprint.kernel_fingerprint(make(source, _chain_namespaces(2))) == two
    assert fingerprint.kernel_fingerprint(make(source, _chain_namespaces(3))) != two


def test_the_toolchain_versions_are_part_of_the_compiler_fingerprint():
    assert "cuda-bindings" in fingerprint.toolchain_versions()


def test_the_toolchain_versions_are_importlib_metadatas(tmp_path, monkeypatch):
    """Read from the ``.dist-info`` folders' names: the same answer as ``importlib.metadata``,
    and the first folder on ``sys.path`` wins (a fake newer nvJitLink placed first)."""
    import importlib.metadata as md
    want = []
    for dist in fingerprint._TOOLCHAIN:
        try:
            want.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    assert fingerprint.toolchain_versions() == "; ".join(want)
    (tmp_path / "nvidia_nvjitlink_cu13-13.9.1.dist-info").mkdir()
    (tmp_path / "Cuda_Bindings-99.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    found = fingerprint.toolchain_versions()
    assert "cuda-bindings 99.0" in found and "nvidia-nvjitlink-cu13 13.9.1" in found
