"""The on-disk kernel cache seen through ``@tj.kernel`` (CPU: the cuda backend compiles to PTX and
a cubin without a GPU): a second Kernel object or a new process hits it without running the
frontend, editing a called ``tj.func`` or a global the kernel reads misses it, a corrupt entry
is recompiled with a warning, two processes compiling at once, and ``tilejit cache info|clear``.

The kernels live in real module files in a temp dir, imported with importlib, as a user's would.
"""
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

import tilejit as tj
from tilejit import backends, cli, frontend
from tilejit.backends import cuda
from tilejit.runtime import cache
from tilejit.specs import ArraySpec

SPECS = (ArraySpec(tj.float32, 1), ArraySpec(tj.float32, 1))
CONSTS = {"BLOCK": 128}
NUM_WARPS = 4

KERNELS = '''\
import tilejit as tj
import user_helpers

SCALE = 2.0


class Config:
    GAIN = 1.5


@tj.func
def shift(t):
    return user_helpers.bias(t) + 1.0


@tj.kernel
def scale_shift(x, y, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tj.store(y, (i,), shift(tj.load(x, (i,), (BLOCK,)) * SCALE * Config.GAIN))
'''

HELPERS = '''\
import tilejit as tj


@tj.func
def bias(t):
    return t - 0.5
'''

# Child process: import the kernel file, compile (or, with "hit", insist on a disk-cache hit by
# making the frontend and the compiler stages fail), print the cubin's sha256.
CHILD = textwrap.dedent('''
    import hashlib, importlib.util, sys
    import tilejit as tj
    import tilejit.backends.cuda, tilejit.frontend
    from tilejit.specs import ArraySpec

    path, mode = sys.argv[1], sys.argv[2]
    sys.path.insert(0, __import__("os").path.dirname(path))
    spec = importlib.util.spec_from_file_location("user_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if mode == "hit":
        def refuse(*args, **kwargs):
            raise SystemExit("the compiler ran: the disk cache was missed")
        tilejit.frontend.compile_tile_ir = refuse
        tilejit.backends.cuda.build = refuse
    if mode == "wait":                      # line up with a sibling process before compiling
        print("ready", flush=True)
        sys.stdin.readline()
    art = module.scale_shift.compile((ArraySpec(tj.float32, 1),) * 2, {"BLOCK": 128}, 4, "cuda").artifact
    print(hashlib.sha256(art.cubin).hexdigest())
''')

@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    # an edit within the same second keeps the file's size and mtime: a stale .pyc would hide it
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    return tmp_path / "cache"


@pytest.fixture
def kernel_file(tmp_path, monkeypatch):
    (tmp_path / "user_helpers.py").write_text(HELPERS)
    path = tmp_path / "user_kernels.py"
    path.write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return path


def import_kernel(path):
    """A fresh import of the kernel file (and of the helper module it imports): a new Kernel."""
    sys.modules.pop("user_helpers", None)
    spec = importlib.util.spec_from_file_location("user_kernels", path)   # a new module object
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scale_shift


def build(kern):
    """Compile for cuda through the public inspection API (nothing runs)."""
    return kern.inspect_specs(SPECS, CONSTS, NUM_WARPS, backend="cuda")


def disk_key(kern) -> str:
    from tilejit.kernel import compile_switches
    return backends.get("cuda").cache_key(kern.fn, SPECS, CONSTS, NUM_WARPS, dict(compile_switches()))


def refuse_to_compile(monkeypatch) -> None:
    """Make the frontend and every compiler stage fail: only a cache hit can succeed."""
    def refuse(*args, **kwargs):
        raise AssertionError("the compiler ran: the disk cache was missed")
    monkeypatch.setattr(frontend, "compile_tile_ir", refuse)
    monkeypatch.setattr(cuda, "build", refuse)


def count_frontend_calls(monkeypatch) -> list:
    calls, real = [], frontend.compile_tile_ir

    def counting(*args, **kwargs):
        calls.append(args[0].__name__)
        return real(*args, **kwargs)
    monkeypatch.setattr(frontend, "compile_tile_ir", counting)
    return calls


def run_child(path, mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- hits ----------------------------------------------------------------------------------------
def test_compiling_writes_one_entry_holding_the_artifacts(kernel_file):
    kern = import_kernel(kernel_file)
    found = build(kern)
    assert found.backend == "cuda" and found.cubin.startswith(b"\x7fELF") and ".entry" in found.ptx
    assert cache.info()["entries"] == 1
    files, meta = cache.get(disk_key(kern))
    assert files["ptx"].decode() == found.ptx and files["cubin"] == found.cubin
    assert meta["registers"] == found.registers and meta["spills"] == found.spills == 0


def test_a_second_kernel_object_hits_the_disk_cache_without_the_frontend(kernel_file, monkeypatch):
    first = build(import_kernel(kernel_file))
    again = import_kernel(kernel_file)               # same source, new function and Kernel objects
    refuse_to_compile(monkeypatch)
    hit = again.compile(SPECS, CONSTS, NUM_WARPS, "cuda").artifact
    assert (hit.ptx, hit.cubin, hit.registers, hit.spills, hit.shared_bytes) == \
        (first.ptx, first.cubin, first.registers, first.spills, first.shared_bytes)
    assert hit.simt_ir == first.simt_ir and hit.llvm_ir == first.llvm_ir


def test_inspect_on_a_disk_hit_gives_the_stored_stages(kernel_file, monkeypatch):
    first = build(import_kernel(kernel_file))
    monkeypatch.setattr(cuda, "build", lambda *a, **k: pytest.fail("recompiled on a hit"))
    found = build(import_kernel(kernel_file))        # the frontend may run: it prints the tile IR
    assert (found.ptx, found.cubin, found.registers) == (first.ptx, first.cubin, first.registers)
    assert found.tile_ir == first.tile_ir


def test_a_new_process_hits_the_cache_written_here(kernel_file):
    first = build(import_kernel(kernel_file))
    assert run_child(kernel_file, "hit") == sha(first.cubin)


# --- misses: what the key covers -----------------------------------------------------------------
@pytest.mark.parametrize("file, old, new", [
    ("user_kernels.py", "return user_helpers.bias(t) + 1.0", "return user_helpers.bias(t) + 3.0"),
    ("user_helpers.py", "return t - 0.5", "return t - 0.25"),
    ("user_kernels.py", "SCALE = 2.0", "SCALE = 5.0"),
    ("user_kernels.py", "GAIN = 1.5", "GAIN = 3.0"),
], ids=["called-tj.func", "tj.func-called-through-a-module", "read-global", "read-class-attribute"])
def test_an_edit_the_kernel_depends_on_misses_the_cache(kernel_file, monkeypatch, file, old, new):
    before = import_kernel(kernel_file)
    old_build = build(before)
    edited = kernel_file.parent / file
    edited.write_text(edited.read_text().replace(old, new))
    after = import_kernel(kernel_file)
    assert disk_key(after) != disk_key(before), "same key: the disk cache would return stale code"
    calls = count_frontend_calls(monkeypatch)
    new_build = build(after)
    assert calls == ["scale_shift"], "the edited kernel must be traced again"
    assert new_build.ptx != old_build.ptx
    assert cache.info()["entries"] == 2


def test_an_unrelated_edit_keeps_the_key(kernel_file):
    before = import_kernel(kernel_file)
    kernel_file.write_text(KERNELS + "\nUNUSED = 1\n\n\ndef unrelated():\n    return 2\n")
    assert disk_key(import_kernel(kernel_file)) == disk_key(before)


# --- corruption ----------------------------------------------------------------------------------
@pytest.mark.parametrize("victim", ["cubin", "ptx", "manifest.json"])
def test_a_corrupt_entry_is_recompiled_with_a_warning(kernel_file, victim):
    kern = import_kernel(kernel_file)
    good = build(kern)
    directory = cache.entry_dir(disk_key(kern))
    name = next(f for f in os.listdir(directory) if f == victim or f.startswith(victim + "."))
    path = os.path.join(directory, name)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01                    # one flipped bit in the middle
    open(path, "wb").write(bytes(data))

    fresh = import_kernel(kernel_file)
    with pytest.warns(UserWarning, match="corrupt cache entry"):
        again = fresh.compile(SPECS, CONSTS, NUM_WARPS, "cuda").artifact
    assert again.ptx == good.ptx and again.cubin.startswith(b"\x7fELF")
    assert (again.registers, again.spills) == (good.registers, good.spills)
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # the entry was written again, intact
        files, _ = cache.get(disk_key(kern))
    assert files["cubin"] == again.cubin and files["ptx"].decode() == good.ptx


# --- concurrency ---------------------------------------------------------------------------------
def test_two_processes_compiling_the_same_kernel_at_once(kernel_file):
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(kernel_file), "wait"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        for p in procs:                         # both imported and ready: start them together
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
    digests = [out.split()[-1] for out, _ in results]
    assert cache.info()["entries"] == 1
    key = disk_key(import_kernel(kernel_file))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        files, meta = cache.get(key)
    assert sha(files["cubin"]) in digests and meta["name"]
    leftovers = [f for f in os.listdir(cache.entry_dir(key)) if f.endswith(".tmp")]
    assert leftovers == []


# --- the command line ----------------------------------------------------------------------------
def test_cli_cache_info_and_clear(kernel_file, cache_dir, capsys):
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out and re.search(r"\b0 kernels", out), out

    build(import_kernel(kernel_file))
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\b1 kernels", out), out
    size = int(re.search(r"(\d+) bytes", out).group(1))
    assert size >= len(build(import_kernel(kernel_file)).cubin)

    assert cli.main(["cache", "clear"]) == 0
    assert re.search(r"\b1\b", capsys.readouterr().out)
    assert cache.info()["entries"] == 0
    assert cli.main(["cache", "clear"]) == 0 and re.search(r"\b0\b", capsys.readouterr().out)
