"""The cache key's parts, one behaviour each (``tilejit.fingerprint``): what the kernel
fingerprint and the staleness readers must see, how deep they look, what they must survive, and
what the compiler fingerprint hashes.  Each test failed on a mutant of fingerprint.py that the
other cache tests let through (tests/README.md, mutation score)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import numpy as np

from tilejit import fingerprint
from tilejit.fingerprint import _MAX_ATTRIBUTE_DEPTH, dependency_readers, kernel_fingerprint, snapshot


def function(source: str, **globals_):
    """``k`` defined by ``source`` in a fresh module namespace holding ``globals_``."""
    g = {"__name__": "user_module", **globals_}
    exec(textwrap.dedent(source), g)
    return g["k"]


def readings(fn) -> list:
    return [snapshot(read()) for read in dependency_readers(fn)]


class Node:
    def __init__(self, child=None, value=0):
        self.a, self.v = child, value


def chain(depth: int, value) -> Node:
    """``root.a.a ... .a.v`` with ``depth`` ``.a`` steps before ``.v``."""
    node = Node(None, value)
    for _ in range(depth):
        node = Node(node)
    return node


# --------------------------------------------------------------------------- attribute chains
def test_the_deepest_attribute_chain_followed_is_keyed_and_one_past_it_is_not():
    """``G.a`` x 6 ``.v`` (7 attribute reads) is the deepest value the key and the staleness
    readers see; one ``.a`` more is past the limit (a documented bound on the walk)."""
    assert _MAX_ATTRIBUTE_DEPTH == 6
    deepest = "G" + ".a" * _MAX_ATTRIBUTE_DEPTH + ".v"
    source = f"def k(x):\n    return x * {deepest}\n"
    root = chain(_MAX_ATTRIBUTE_DEPTH, 2)
    fn = function(source, G=root)
    key, seen = kernel_fingerprint(fn), readings(fn)
    leaf = root
    for _ in range(_MAX_ATTRIBUTE_DEPTH):
        leaf = leaf.a
    leaf.v = 3
    assert kernel_fingerprint(fn) != key and readings(fn) != seen

    past = function(source.replace(".v", ".a.v"), G=chain(_MAX_ATTRIBUTE_DEPTH + 1, 2))
    key, seen = kernel_fingerprint(past), readings(past)
    leaf = past.__globals__["G"]
    for _ in range(_MAX_ATTRIBUTE_DEPTH + 1):
        leaf = leaf.a
    leaf.v = 3
    assert kernel_fingerprint(past) == key and readings(past) == seen


def test_a_chain_from_a_closure_cell_has_the_same_depth_limit():
    """The deepest value of a chain read from a closure cell is watched; one past it is not."""
    def make(root):
        def k(x):
            return x * root.a.a.a.a.a.a.v + root.a.a.a.a.a.a.a.v
        return k
    root = chain(_MAX_ATTRIBUTE_DEPTH + 1, 2)
    k = make(root)
    seen = readings(k)
    leaf = root
    for _ in range(_MAX_ATTRIBUTE_DEPTH + 1):
        leaf = leaf.a
    leaf.v = 3                          # 8 reads deep: past the limit
    assert readings(k) == seen
    leaf = root
    for _ in range(_MAX_ATTRIBUTE_DEPTH):
        leaf = leaf.a
    leaf.v = 3                          # 7 reads deep: the deepest watched
    assert readings(k) != seen


def test_names_read_only_inside_nested_code_are_watched():
    """A global read only in a lambda (a nested code object) is keyed and watched."""
    fn = function("def k(x):\n    f = lambda v: v * SCALE\n    return f(x)\n", SCALE=2)
    key, seen = kernel_fingerprint(fn), readings(fn)
    fn.__globals__["SCALE"] = 3
    assert kernel_fingerprint(fn) != key and readings(fn) != seen


def test_a_reader_whose_attribute_starts_raising_reports_a_change():
    class Good:
        gain = 2

    class Bad:
        @property
        def gain(self):
            raise RuntimeError("no")
    fn = function("def k(x):\n    return x * cfg.gain\n", cfg=Good())
    readers, seen = dependency_readers(fn), readings(fn)
    fn.__globals__["cfg"] = Bad()
    assert [snapshot(read()) for read in readers] != seen


def test_a_user_module_named_like_a_standard_one_is_still_walked():
    """Only the top-level package decides (``numpy``, ``math``): ``userpkg.math.GAIN`` counts."""
    mod = types.ModuleType("userpkg.math")
    mod.GAIN = 2
    fn = function("def k(x):\n    return x * m.GAIN\n", m=mod)
    key, seen = kernel_fingerprint(fn), readings(fn)
    mod.GAIN = 3
    assert kernel_fingerprint(fn) != key and readings(fn) != seen


def test_a_very_long_chain_and_a_cycle_end_the_walk():
    """A 5000-long linked list and a self-referencing object: the walk stops at the depth limit
    and at objects already seen (no RecursionError, no endless loop)."""
    fn = function("def k(x):\n    return x * G.a.a.v\n", G=chain(5000, 1))
    kernel_fingerprint(fn)
    assert len(dependency_readers(fn)) <= 2 * (_MAX_ATTRIBUTE_DEPTH + 2)
    loop = Node(value=1)
    loop.a = loop
    fn = function("def k(x):\n    return x * G.a.v\n", G=loop)
    kernel_fingerprint(fn)
    dependency_readers(fn)


def test_a_missing_attribute_does_not_hide_the_ones_after_it():
    """The code names ``aa`` (absent on ``cfg``) before ``zz``: ``cfg.zz`` is still watched."""
    class Cfg:
        zz = 1
    cfg = Cfg()
    fn = function("def k(x):\n    return x * cfg.zz + aa\n", cfg=cfg, aa=0)
    key, seen = kernel_fingerprint(fn), readings(fn)
    cfg.zz = 2
    assert kernel_fingerprint(fn) != key and readings(fn) != seen


def test_an_attribute_that_raises_is_skipped_and_the_rest_still_watched():
    class Cfg:
        gain = 2

        @property
        def broken(self):
            raise RuntimeError("no")
    cfg = Cfg()
    fn = function("def k(x):\n    return x * cfg.gain if x else cfg.broken\n", cfg=cfg)
    key, seen = kernel_fingerprint(fn), readings(fn)
    assert all(read() is not None for read in dependency_readers(fn))
    cfg.gain = 3
    assert kernel_fingerprint(fn) != key and readings(fn) != seen


# ------------------------------------------------------------------------ functions and cells
def test_a_plain_helper_function_is_hashed_by_its_body_and_watched():
    """A non-``tj.func`` helper the kernel calls: a change to its body changes the key, and a
    global it reads is watched for staleness."""
    g = {"__name__": "user_module", "SCALE": 2}
    exec("def helper(v):\n    return v * SCALE\n", g)
    exec("def k(x):\n    return helper(x)\n", g)
    key, seen = kernel_fingerprint(g["k"]), readings(g["k"])
    g["SCALE"] = 3
    assert readings(g["k"]) != seen
    exec("def helper(v):\n    return v * SCALE + 1\n", g)
    assert kernel_fingerprint(g["k"]) != key


def test_mutually_recursive_helpers_end_the_walk():
    g = {"__name__": "user_module"}
    exec("def f(v):\n    return g(v - 1) if v else 0\n"
         "def g(v):\n    return f(v - 1) if v else 1\n"
         "def k(x):\n    return f(x)\n", g)
    kernel_fingerprint(g["k"])
    assert len(dependency_readers(g["k"])) >= 2


def test_an_empty_closure_cell_is_a_value_of_its_own():
    """A cell bound after the function is made: fingerprinting it empty works, and binding it
    changes both the key and the readings."""
    def make():
        def k(x):
            return x * later
        state = (kernel_fingerprint(k), readings(k))
        later = 2  # noqa: F841  (read by k)
        return k, state
    k, (key, seen) = make()
    assert kernel_fingerprint(k) != key and readings(k) != seen


def test_a_changed_literal_changes_the_key():
    """``x * 2.5`` → ``x * 3.5`` changes only the code's constants table, not its bytecode."""
    two, three = function("def k(x):\n    return x * 2.5\n"), function("def k(x):\n    return x * 3.5\n")
    assert two.__code__.co_code == three.__code__.co_code
    assert kernel_fingerprint(two) != kernel_fingerprint(three)


def test_tilejits_own_modules_are_not_walked():
    """``tj.float32`` is read through tilejit's module, which the compiler fingerprint covers:
    one reader for the name ``tj``, none for its attributes."""
    import tilejit as tj
    fn = function("def k(x):\n    return x.to(tj.float32)\n", tj=tj)
    assert len(dependency_readers(fn)) == 1


# ----------------------------------------------------------------------------------- values
def test_container_values_keep_list_order_and_ignore_set_order():
    order = lambda v: kernel_fingerprint(function("def k(x):\n    return x * len(V)\n", V=v))  # noqa: E731
    assert order([1, 2]) != order([2, 1])
    assert order({"a", "b"}) == order({"b", "a"})
    assert order({"a": 1, "b": 1}) == order({"b": 1, "a": 1})     # dicts by key, whatever the values


def test_a_set_of_strings_hashes_the_same_in_processes_with_other_hash_seeds():
    code = ("from tilejit.fingerprint import kernel_fingerprint\n"
            "g = {'__name__': 'm', 'V': {'alpha', 'beta', 'gamma', 'delta'}}\n"
            "exec('def k(x):\\n    return x * len(V)\\n', g)\n"
            "print(kernel_fingerprint(g['k']))\n")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(keys) == 1


def test_numpy_dtypes_and_scalars_as_globals():
    key = lambda v: kernel_fingerprint(function("def k(x):\n    return x.to(D)\n", D=v))  # noqa: E731
    assert key(np.dtype(np.float32)) != key(np.dtype(np.float16))
    assert key(np.float32(2)) != key(np.float64(2)) != key(np.float32(3))


# ------------------------------------------------------------------------ compiler fingerprint
def test_the_compiler_fingerprint_hashes_every_python_source_of_the_three_packages(tmp_path, monkeypatch):
    """Each of tilejit/, passes/ and runtime/ counts (sub-folders too), by file name and
    content; __pycache__ and files that are not .py do not."""
    files = {"tilejit/a.py": "A = 1\n", "tilejit/sub/b.py": "B = 1\n", "passes/c.py": "C = 1\n",
             "runtime/d.py": "D = 1\n", "tilejit/__pycache__/e.py": "E = 1\n", "tilejit/notes.txt": "x\n",
             "tilejit/Upper/f.py": "F = 1\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(fingerprint, "_ROOT_DIR", str(tmp_path))
    compute = fingerprint.compiler_fingerprint.__wrapped__
    base = compute()
    for name in files:
        path = tmp_path / name
        path.write_text(files[name] + "# changed\n")
        changed = compute() != base
        path.write_text(files[name])
        assert changed == (name.endswith(".py") and "__pycache__" not in name), name
    (tmp_path / "passes/c.py").rename(tmp_path / "passes/c2.py")
    assert compute() != base
