"""The on-disk kernel cache: one directory per key holding the artifacts and a manifest.

Layout: ``<cache dir>/<key[:2]>/<key>/manifest.json`` plus one file per artifact, named after
its content hash (``kernel.ptx.<sha256[:16]>``). Every file is written under a temporary name
and ``os.replace``d into place; the manifest, naming each file and its sha256 and checksummed
itself, is written last. So a reader sees either no entry or a complete one, and two processes
writing the same key both leave a valid entry (the last manifest renamed wins, and it only
names files that writer wrote). A corrupt entry, or one written by another version of the
manifest schema, reads as a miss with a one-line warning, so the caller recompiles.

Safety: the cache never deletes what it cannot prove is its own, and never follows a link.

- Below the cache directory every directory is opened relative to its parent with
  ``O_NOFOLLOW``: a symlinked shard or entry directory is refused (a warning, a miss, nothing
  written), never followed.
- ``clear`` removes an entry only when its manifest has this schema and a valid checksum, and
  then only the files that manifest names (plus the manifest and this module's temporary
  files); a directory that still holds anything else is left where it is.  Directories whose
  names are not shard or key names are never looked into.
- A corrupt entry loses only its manifest and files named like artifacts.
- Files are created with mode 0o666 and directories with 0o777, less the user's umask; a cache
  directory that others may write to and that the user does not own gets a warning.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import uuid
import warnings

MANIFEST = "manifest.json"
SCHEMA = 1                                              # the manifest's "version"
_KEY = re.compile(r"^[0-9A-Za-z_\-]{8,128}$")
_NAME = re.compile(r"^[0-9A-Za-z_.\-]{1,64}$")
_SHARD = re.compile(r"^[0-9A-Za-z_\-]{2}$")
_ARTIFACT = re.compile(r"^[0-9A-Za-z_.\-]{1,64}\.[0-9a-f]{16}$")
_TEMP = re.compile(r"^\.[0-9A-Za-z_.\-]{1,80}\.\d+\.[0-9a-f]{32}\.tmp$")
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_warned_unsafe: set[str] = set()


class Unsafe(OSError):
    """A path inside the cache is a symbolic link (or not a directory where one belongs)."""


def cache_dir() -> str:
    """``$TILEJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilejit``, else ``~/.cache/tilejit``."""
    if os.environ.get("TILEJIT_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["TILEJIT_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tilejit")


def entry_dir(key: str) -> str:
    _check_key(key)
    return os.path.join(cache_dir(), key[:2], key)


def _check_key(key: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"cache key {key!r} must be 8-128 characters of [0-9A-Za-z_-]")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _body_checksum(files: dict, meta: dict) -> str:
    return _sha256(json.dumps({"files": files, "meta": meta}, sort_keys=True).encode())


# ------------------------------------------------------------------------------ directories
def _open_root(create: bool) -> int | None:
    """A descriptor of the cache directory (the user's choice: a link to it is followed), or
    None when it does not exist and ``create`` is False."""
    root = cache_dir()
    if create:
        os.makedirs(root, exist_ok=True)
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    _warn_if_shared(root, fd)
    return fd


def _warn_if_shared(root: str, fd: int) -> None:
    st = os.fstat(fd)
    if st.st_mode & stat.S_IWOTH and hasattr(os, "getuid") and st.st_uid != os.getuid() \
            and root not in _warned_unsafe:
        _warned_unsafe.add(root)
        warnings.warn(f"tilejit: the kernel cache {root} is writable by other users and not owned by "
                      "you; another user could plant compiled code there (set TILEJIT_CACHE_DIR to a "
                      "private directory)", stacklevel=3)


def _open_dir(parent_fd: int, name: str, create: bool = False) -> int:
    """``name`` inside ``parent_fd`` as a directory descriptor; a link there is refused."""
    if create:
        try:
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        except FileExistsError:
            pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(e.errno, f"{name} is a symbolic link or not a directory") from None
        raise


def _is_regular(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _read(name: str, dir_fd: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _write_atomic(name: str, data: bytes, dir_fd: int) -> None:
    tmp = f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _warn_unsafe(where: str, e: OSError) -> None:
    warnings.warn(f"tilejit: refusing to use the cache entry {where}: {e.strerror}; not following "
                  "links inside the cache", stacklevel=3)


# ------------------------------------------------------------------------------------ writing
def put(key: str, files: dict[str, bytes], meta: dict) -> bool:
    """Store ``files`` (artifact name -> bytes) and JSON-able ``meta`` under ``key``.

    Returns False (with a warning) if the cache cannot be written: a cache failure must never
    stop a compilation."""
    _check_key(key)
    for name in files:
        if not _NAME.match(name):
            raise ValueError(f"cache file name {name!r} must be 1-64 characters of [0-9A-Za-z_.-]")
    directory = entry_dir(key)
    listing = {name: {"file": f"{name}.{_sha256(data)[:16]}", "sha256": _sha256(data),
                      "bytes": len(data)} for name, data in files.items()}
    manifest = {"version": SCHEMA, "files": listing, "meta": meta,
                "checksum": _body_checksum(listing, meta)}
    text = json.dumps(manifest, sort_keys=True, indent=1).encode()
    for attempt in range(2):    # a concurrent reader may remove a corrupt dir under us: retry once
        fds = []
        try:
            fds.append(_open_root(create=True))
            fds.append(_open_dir(fds[-1], key[:2], create=True))
            fds.append(_open_dir(fds[-1], key, create=True))
            for name, data in files.items():
                _write_atomic(listing[name]["file"], data, fds[-1])
            _write_atomic(MANIFEST, text, fds[-1])
            return True
        except Unsafe as e:
            _warn_unsafe(directory, e)
            return False
        except FileNotFoundError:
            continue
        except OSError as e:
            warnings.warn(f"tilejit: could not write cache entry {directory}: {e}", stacklevel=2)
            return False
        finally:
            for fd in fds:
                os.close(fd)
    warnings.warn(f"tilejit: could not write cache entry {directory}", stacklevel=2)
    return False


# ------------------------------------------------------------------------------------ reading
class _Corrupt(Exception):
    pass


class _OtherSchema(Exception):
    pass


def _manifest(entry_fd: int) -> dict:
    """The entry's manifest, checked: this schema, the expected shape, a valid checksum."""
    raw = _read(MANIFEST, entry_fd)
    try:
        manifest = json.loads(raw)
    except ValueError:                                  # UnicodeDecodeError included
        raise _Corrupt("unreadable manifest") from None
    if not isinstance(manifest, dict):
        raise _Corrupt("the manifest is not a JSON object")
    if manifest.get("version") != SCHEMA:
        raise _OtherSchema(f"manifest schema {manifest.get('version')!r}, this tilejit reads {SCHEMA}")
    listing, meta = manifest.get("files"), manifest.get("meta")
    if not isinstance(listing, dict) or not isinstance(meta, dict) or not all(
            isinstance(r, dict) and isinstance(r.get("file"), str) and _ARTIFACT.match(r["file"])
            and isinstance(r.get("sha256"), str) and isinstance(r.get("bytes"), int)
            for r in listing.values()):
        raise _Corrupt("the manifest does not have the expected fields")
    if manifest.get("checksum") != _body_checksum(listing, meta):
        raise _Corrupt("manifest checksum mismatch")
    return manifest


def _read_entry(entry_fd: int):
    manifest = _manifest(entry_fd)
    files = {}
    for name, record in manifest["files"].items():
        try:
            data = _read(record["file"], entry_fd)
        except FileNotFoundError:
            raise _Corrupt(f"missing file {record['file']}") from None
        if len(data) != record["bytes"] or _sha256(data) != record["sha256"]:
            raise _Corrupt(f"{name}: checksum mismatch (truncated or modified)")
        files[name] = data
    return files, manifest["meta"]


def _attempt(entry_fd: int) -> tuple[str, object]:
    """("hit", (files, meta)) | ("miss", None) | ("schema", why) | ("corrupt", why)."""
    try:
        return "hit", _read_entry(entry_fd)
    except FileNotFoundError:                   # no manifest (a missing artifact is _Corrupt)
        return "miss", None
    except _OtherSchema as e:
        return "schema", e
    except (_Corrupt, OSError) as e:
        return "corrupt", e


def get(key: str):
    """``(files, meta)`` stored under ``key``, or None on a miss.

    A corrupt entry loses its manifest and artifact files, is named in a warning, and is
    reported as a miss; an entry of another manifest schema is a miss with a warning."""
    _check_key(key)
    directory = entry_dir(key)
    fds = []
    try:
        root = _open_root(create=False)
        if root is None:
            return None
        fds.append(root)
        fds.append(_open_dir(root, key[:2]))
        fds.append(_open_dir(fds[-1], key))
        outcome, found = _attempt(fds[-1])
        if outcome == "corrupt" or outcome == "schema":   # a writer may have replaced the manifest
            outcome, found = _attempt(fds[-1])            # between our reads: look once more
        if outcome == "hit":
            return found
        if outcome == "schema":
            warnings.warn(f"tilejit: cache entry {directory} was written by another tilejit ({found}); "
                          "recompiling", stacklevel=2)
        elif outcome == "corrupt":
            warnings.warn(f"tilejit: corrupt cache entry {directory} ({found}); removed, recompiling",
                          stacklevel=2)
            _remove_entry(fds[1], key, None)
        return None
    except Unsafe as e:
        _warn_unsafe(directory, e)
        return None
    except FileNotFoundError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


# ------------------------------------------------------------------------------- housekeeping
def _remove_entry(shard_fd: int, key: str, manifest: dict | None) -> bool:
    """Remove entry ``key``: the files ``manifest`` names (without one: files named like
    artifacts), the manifest and this module's temporary files, then the directory if that
    left it empty.  Links are removed as links, never followed.  True when its manifest is
    gone (it is no longer an entry, even if files that are not ours keep the directory)."""
    try:
        fd = _open_dir(shard_fd, key)
    except (Unsafe, FileNotFoundError):
        return False
    gone = False
    try:
        listed = {r["file"] for r in manifest["files"].values()} if manifest else None
        for name in os.listdir(fd):
            ours = name == MANIFEST or _TEMP.match(name) or \
                (name in listed if listed is not None else bool(_ARTIFACT.match(name)))
            if ours and _is_regular(name, fd):
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                gone |= name == MANIFEST
    finally:
        os.close(fd)
    try:
        os.rmdir(key, dir_fd=shard_fd)
    except OSError:                 # something that is not ours is left in it
        pass
    return gone


def _entries(root_fd: int):
    """(shard fd, key, entry fd) of each directory shaped like an entry: a shard named by two
    key characters holding directories named by keys that start with them.  Nothing else is
    opened, and no link is followed.  The caller closes the descriptors."""
    for shard in sorted(os.listdir(root_fd)):
        if not _SHARD.match(shard):
            continue
        try:
            shard_fd = _open_dir(root_fd, shard)
        except (Unsafe, FileNotFoundError):
            continue
        try:
            for key in sorted(os.listdir(shard_fd)):
                if not (_KEY.match(key) and key.startswith(shard)):
                    continue
                try:
                    entry_fd = _open_dir(shard_fd, key)
                except (Unsafe, FileNotFoundError):
                    continue
                try:
                    yield shard_fd, key, entry_fd
                finally:
                    os.close(entry_fd)
        finally:
            os.close(shard_fd)


def _valid_manifest(entry_fd: int) -> dict | None:
    try:
        return _manifest(entry_fd) if _is_regular(MANIFEST, entry_fd) else None
    except (_Corrupt, _OtherSchema, OSError):
        return None


def info() -> dict:
    """``{"dir": path, "entries": valid entries, "bytes": their artifacts and manifests}``."""
    root = cache_dir()
    entries = total = 0
    root_fd = _open_root(create=False)
    if root_fd is None:
        return {"dir": root, "entries": 0, "bytes": 0}
    try:
        for _, _, entry_fd in _entries(root_fd):
            manifest = _valid_manifest(entry_fd)
            if manifest is None:
                continue
            entries += 1
            for name in [MANIFEST] + [r["file"] for r in manifest["files"].values()]:
                try:
                    total += os.stat(name, dir_fd=entry_fd, follow_symlinks=False).st_size
                except OSError:     # removed meanwhile
                    pass
    finally:
        os.close(root_fd)
    return {"dir": root, "entries": entries, "bytes": total}


def clear() -> int:
    """Delete every entry this module can prove it wrote (a manifest of this schema with a valid
    checksum); returns how many were removed.  Nothing else is touched."""
    removed = 0
    root_fd = _open_root(create=False)
    if root_fd is None:
        return 0
    try:
        shards = set()
        for shard_fd, key, entry_fd in _entries(root_fd):
            manifest = _valid_manifest(entry_fd)
            if manifest is not None and _remove_entry(shard_fd, key, manifest):
                removed += 1
            shards.add(key[:2])
        for shard in shards:
            try:
                os.rmdir(shard, dir_fd=root_fd)
            except OSError:         # not empty: other entries, or files that are not ours
                pass
    finally:
        os.close(root_fd)
    return removed

