"""The cache never loses a user's files and never follows links: ``clear`` removes only entries
it can prove it wrote, every directory below the cache directory is opened without following
links, manifests of another schema or shape are misses (not crashes), files get the user's
umask, and a cache directory others can write to gets a warning."""
from __future__ import annotations

import json
import os
import stat
import warnings

import pytest

from tilejit.runtime import cache

KEY = "ab" + "0123456789abcdef" * 3
FILES = {"kernel.ptx": b".version 8.0\n" * 50, "kernel.cubin": bytes(range(256)) * 4}
META = {"name": "add", "num_warps": 4}


@pytest.fixture(autouse=True)
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


def tree(path) -> dict:
    """Every file and directory below ``path`` (links as links) with file contents."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, path)] = open(p, "rb").read() if os.path.isfile(p) and not os.path.islink(p) \
                else ("link" if os.path.islink(p) else "dir")
    return out


def test_clear_leaves_a_users_files_in_the_cache_directory(root):
    (root / "projects" / "thesis").mkdir(parents=True)
    (root / "projects" / "thesis" / "main.tex").write_text("\\chapter{One}")
    (root / ".config" / "app").mkdir(parents=True)
    (root / "ab" / ("ab" + "x" * 10)).mkdir(parents=True)              # shaped like an entry,
    (root / "ab" / ("ab" + "x" * 10) / "notes.txt").write_text("mine")   # but no manifest
    before = tree(root)
    assert cache.info()["entries"] == 0
    assert cache.clear() == 0
    assert tree(root) == before


def test_clear_removes_entries_but_not_a_file_a_user_put_inside_one(root):
    cache.put(KEY, FILES, META)
    cache.put("cd" + KEY[2:], FILES, META)
    stray = root / KEY[:2] / KEY / "mine.txt"
    stray.write_text("keep me")
    assert cache.clear() == 2
    assert stray.read_text() == "keep me"
    assert cache.info()["entries"] == 0 and not (root / "cd").exists()
    assert sorted(os.listdir(root / KEY[:2] / KEY)) == ["mine.txt"]


def test_a_manifest_of_another_schema_is_not_cleared_nor_read(root):
    cache.put(KEY, FILES, META)
    manifest = root / KEY[:2] / KEY / cache.MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="another tilejit"):
        assert cache.get(KEY) is None
    assert cache.clear() == 0 and manifest.exists()
    assert cache.put(KEY, FILES, META) and cache.get(KEY)[1] == META       # rewritten as ours


def test_a_symlinked_shard_is_not_followed(root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / KEY[:2])
    with pytest.warns(UserWarning, match="refusing"):
        assert cache.put(KEY, FILES, META) is False
    assert os.listdir(elsewhere) == []
    with pytest.warns(UserWarning, match="refusing"):
        assert cache.get(KEY) is None


def test_clear_does_not_follow_a_symlinked_shard_to_real_entries(root, tmp_path):
    other = tmp_path / "other-cache"
    os.environ["TILEJIT_CACHE_DIR"] = str(other)
    cache.put(KEY, FILES, META)                           # a real entry, in another directory
    os.environ["TILEJIT_CACHE_DIR"] = str(root)
    os.symlink(other / KEY[:2], root / KEY[:2])
    before = tree(other)
    assert cache.clear() == 0 and cache.info()["entries"] == 0
    assert tree(other) == before


def test_a_symlinked_entry_directory_is_not_written_through(root, tmp_path):
    target = tmp_path / "etc"
    target.mkdir()
    (root / KEY[:2]).mkdir()
    os.symlink(target, root / KEY[:2] / KEY)
    with pytest.warns(UserWarning, match="refusing"):
        assert cache.put(KEY, FILES, META) is False
    assert os.listdir(target) == []


def test_a_symlinked_artifact_is_a_corrupt_entry_and_its_target_survives(root, tmp_path):
    cache.put(KEY, FILES, META)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    entry = root / KEY[:2] / KEY
    artifact = next(f for f in os.listdir(entry) if f.startswith("kernel.ptx."))
    os.unlink(entry / artifact)
    os.symlink(victim, entry / artifact)
    with pytest.warns(UserWarning, match="corrupt"):
        assert cache.get(KEY) is None
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("manifest", [
    b"[1, 2, 3]",
    b"\xff\xfe not utf-8",
    json.dumps({"version": 1, "files": [], "meta": {}, "checksum": ""}).encode(),
    json.dumps({"version": 1, "files": {"x": "not a record"}, "meta": {}, "checksum": ""}).encode(),
    json.dumps({"version": 1, "files": {"x": {"file": "../../etc/passwd", "sha256": "", "bytes": 1}},
                "meta": {}, "checksum": ""}).encode(),
    json.dumps({"version": 1, "files": {}}).encode(),
])
def test_a_manifest_of_an_unexpected_shape_is_a_miss_not_a_crash(root, manifest):
    cache.put(KEY, FILES, META)
    (root / KEY[:2] / KEY / cache.MANIFEST).write_bytes(manifest)
    with pytest.warns(UserWarning, match="corrupt"):
        assert cache.get(KEY) is None
    assert cache.info()["entries"] == 0
    assert cache.put(KEY, FILES, META) and cache.get(KEY)[0] == FILES


def test_files_and_directories_follow_the_users_umask(root):
    old = os.umask(0o027)
    try:
        cache.put(KEY, FILES, META)
    finally:
        os.umask(old)
    entry = root / KEY[:2] / KEY
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o750
    for name in os.listdir(entry):
        assert stat.S_IMODE(os.stat(entry / name).st_mode) == 0o640, name


def test_a_world_writable_cache_owned_by_someone_else_gets_a_warning(root, monkeypatch):
    os.chmod(root, 0o777)
    monkeypatch.setattr(cache, "_warned_unsafe", set())
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.warns(UserWarning, match="writable by other users"):
        cache.put(KEY, FILES, META)
    monkeypatch.setattr(cache, "_warned_unsafe", set())
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put(KEY, FILES, META)                       # the user's own directory: quiet


@pytest.mark.parametrize("meta", [{}, {"name": "k", "params": "nope"}, {"name": "k", "params": [[1]]}])
def test_an_entry_whose_meta_this_tilejit_cannot_load_is_a_miss(meta):
    from tilejit import backends
    cache.put(KEY, {"ptx": b"x", "llvm_ir": b"", "simt_ir": b""}, meta)
    with pytest.warns(UserWarning, match="recompiling"):
        assert backends.get("cuda").lookup(KEY) is None
