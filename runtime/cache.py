"""The on-disk kernel cache: one directory per key holding the artifacts and a manifest.

Layout: ``<cache dir>/<key[:2]>/<key>/manifest.json`` plus one file per artifact, named after
its content hash (``kernel.ptx.<sha256[:16]>``). Every file is written under a temporary name
and ``os.replace``d into place; the manifest, naming each file and its sha256 and checksummed
itself, is written last. So a reader sees either no entry or a complete one, and two processes
writing the same key both leave a valid entry (the last manifest renamed wins, and it only
names files that writer wrote). A corrupt or truncated entry is deleted with a warning and
reads as a miss, so the caller recompiles.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
import warnings

MANIFEST = "manifest.json"
_KEY = re.compile(r"^[0-9A-Za-z_\-]{8,128}$")
_NAME = re.compile(r"^[0-9A-Za-z_.\-]{1,64}$")


def cache_dir() -> str:
    """``$TILEJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilejit``, else ``~/.cache/tilejit``."""
    if os.environ.get("TILEJIT_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["TILEJIT_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tilejit")


def entry_dir(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"cache key {key!r} must be 8-128 characters of [0-9A-Za-z_-]")
    return os.path.join(cache_dir(), key[:2], key)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _body_checksum(files: dict, meta: dict) -> str:
    return _sha256(json.dumps({"files": files, "meta": meta}, sort_keys=True).encode())


def _write_atomic(path: str, data: bytes) -> None:
    tmp = os.path.join(os.path.dirname(path),
                       f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def put(key: str, files: dict[str, bytes], meta: dict) -> bool:
    """Store ``files`` (artifact name -> bytes) and JSON-able ``meta`` under ``key``.

    Returns False (with a warning) if the cache cannot be written: a cache failure must never
    stop a compilation."""
    for name in files:
        if not _NAME.match(name):
            raise ValueError(f"cache file name {name!r} must be 1-64 characters of [0-9A-Za-z_.-]")
    directory = entry_dir(key)
    listing = {name: {"file": f"{name}.{_sha256(data)[:16]}", "sha256": _sha256(data),
                      "bytes": len(data)} for name, data in files.items()}
    manifest = {"version": 1, "files": listing, "meta": meta,
                "checksum": _body_checksum(listing, meta)}
    text = json.dumps(manifest, sort_keys=True, indent=1).encode()
    for attempt in range(2):    # a concurrent reader may delete a corrupt dir under us: retry once
        try:
            os.makedirs(directory, exist_ok=True)
            for name, data in files.items():
                _write_atomic(os.path.join(directory, listing[name]["file"]), data)
            _write_atomic(os.path.join(directory, MANIFEST), text)
            return True
        except FileNotFoundError:
            continue
        except OSError as e:
            warnings.warn(f"tilejit: could not write cache entry {directory}: {e}", stacklevel=2)
            return False
    warnings.warn(f"tilejit: could not write cache entry {directory}", stacklevel=2)
    return False


class _Corrupt(Exception):
    pass


def _read_entry(directory: str):
    with open(os.path.join(directory, MANIFEST), "rb") as f:
        raw = f.read()
    try:
        manifest = json.loads(raw)
        listing, meta = manifest["files"], manifest["meta"]
    except (ValueError, KeyError, TypeError):
        raise _Corrupt("unreadable manifest") from None
    if manifest.get("checksum") != _body_checksum(listing, meta):
        raise _Corrupt("manifest checksum mismatch")
    files = {}
    for name, record in listing.items():
        try:
            with open(os.path.join(directory, record["file"]), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise _Corrupt(f"missing file {record['file']}") from None
        if len(data) != record["bytes"] or _sha256(data) != record["sha256"]:
            raise _Corrupt(f"{name}: checksum mismatch (truncated or modified)")
        files[name] = data
    return files, meta


def get(key: str):
    """``(files, meta)`` stored under ``key``, or None on a miss.

    A corrupt entry is deleted, named in a warning, and reported as a miss."""
    directory = entry_dir(key)
    try:
        return _read_entry(directory)
    except FileNotFoundError:
        return None
    except (_Corrupt, OSError) as e:
        problem = e
    try:    # a writer may have replaced the manifest between our reads: look once more
        return _read_entry(directory)
    except FileNotFoundError:
        return None
    except (_Corrupt, OSError):
        pass
    warnings.warn(f"tilejit: corrupt cache entry {directory} ({problem}); deleted, recompiling",
                  stacklevel=2)
    shutil.rmtree(directory, ignore_errors=True)
    return None


def _entries(root: str):
    if not os.path.isdir(root):
        return
    for shard in sorted(os.listdir(root)):
        shard_dir = os.path.join(root, shard)
        if os.path.isdir(shard_dir):
            for key in sorted(os.listdir(shard_dir)):
                if os.path.isdir(os.path.join(shard_dir, key)):
                    yield os.path.join(shard_dir, key)


def info() -> dict:
    """``{"dir": path, "entries": complete entries, "bytes": total size on disk}``."""
    root = cache_dir()
    entries = total = 0
    for directory in _entries(root):
        entries += os.path.exists(os.path.join(directory, MANIFEST))
        for name in os.listdir(directory):
            try:
                total += os.path.getsize(os.path.join(directory, name))
            except OSError:     # removed meanwhile
                pass
    return {"dir": root, "entries": entries, "bytes": total}


def clear() -> int:
    """Delete every entry; returns how many were removed."""
    removed = 0
    root = cache_dir()
    for directory in list(_entries(root)):
        shutil.rmtree(directory, ignore_errors=True)
        removed += 1
    for shard in os.listdir(root) if os.path.isdir(root) else ():
        try:
            os.rmdir(os.path.join(root, shard))
        except OSError:         # not empty (a concurrent writer) or not a directory
            pass
    return removed
