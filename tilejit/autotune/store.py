"""On-disk autotuning results: one small JSON file per (kernel fingerprint, key values, list of
configs, device, compiler) under ``<kernel cache dir>/autotune/``.

A file records which config won and every config's time or drop reason, as indices into the
config list, so nothing has to be deserialised back into constexpr values. Files are written to
a temporary name and ``os.replace``d into place, and carry a checksum of their body: a
truncated, edited or unreadable file is ignored with a warning (the caller re-tunes and
overwrites it). The compiler part of the key is the package version plus the hash of tilejit's
sources (``fingerprint.compiler_fingerprint``): a changed code generator can change which config
is fastest, or whether a config fits at all, so results from another compiler are not reused.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings

FORMAT = 1


def device_identity(backend_name: str) -> dict:
    """What the measured times depend on besides the kernel: GPU name and driver version on the
    cuda backend; the backend's name on the CPU backends (times there come from an injected
    timer, and must never be mistaken for a GPU's)."""
    if backend_name == "cuda":
        from tilejit.runtime import driver
        props = driver.device_properties(driver.current_device())
        return {"backend": "cuda", "gpu": props.name, "driver": props.driver_version}
    return {"backend": backend_name, "gpu": None, "driver": None}


def tilejit_version() -> str:
    """The installed package version plus the hash of tilejit's own sources."""
    from importlib import metadata
    from tilejit.fingerprint import compiler_fingerprint
    try:
        version = metadata.version("tilejit")
    except metadata.PackageNotFoundError:     # a bare source checkout on sys.path
        version = "source"
    return f"{version}+{compiler_fingerprint()[:16]}"


def canonical(value) -> str:
    """A process-independent text for a key or constexpr value (DTypes by name, not by id)."""
    from tilejit.dtypes import DType
    if isinstance(value, DType):
        return f"dtype:{value.name}"
    if isinstance(value, tuple):
        return "(" + ", ".join(canonical(v) for v in value) + ",)"
    return repr(value)


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class ResultStore:
    """The results file of one kernel, key and config list on one device."""

    def __init__(self, kernel_name: str, kernel_fingerprint: str, key: tuple, configs: list,
                 device: dict):
        from tilejit.runtime.cache import cache_dir
        self.identity = {"kernel": kernel_name, "fingerprint": kernel_fingerprint,
                         "key": canonical(key), "configs": [c.canonical() for c in configs],
                         "device": device, "tilejit": tilejit_version()}
        digest = hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()
        self.path = os.path.join(cache_dir(), "autotune", f"{kernel_name}-{digest[:40]}.json")

    def load(self) -> tuple[int, list] | None:
        """(index of the best config, per-config ms or reason or None) or None when there is no
        usable file; a damaged one is named in a warning."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._corrupt(f"unreadable ({err})")
        try:
            record = json.loads(raw)
            body, best, timings = record["body"], record["body"]["best"], record["body"]["timings"]
        except (ValueError, KeyError, TypeError):
            return self._corrupt("not a results file")
        if record.get("checksum") != _checksum(body):
            return self._corrupt("checksum mismatch (truncated or modified)")
        if body.get("identity") != self.identity or body.get("format") != FORMAT:
            return self._corrupt("written for another kernel, key or config list")
        n = len(self.identity["configs"])
        if not isinstance(best, int) or not 0 <= best < n or not isinstance(timings, list) or len(timings) != n:
            return self._corrupt("best config or timings out of range")
        return best, timings

    def _corrupt(self, problem: str) -> None:
        warnings.warn(f"tilejit: ignoring corrupt autotune results {self.path}: {problem}; re-tuning",
                      stacklevel=4)
        return None

    def save(self, best: int, timings: list) -> bool:
        """Write atomically; False (with a warning) when the directory is not writable: a
        results file that cannot be written must never stop a launch."""
        body = {"format": FORMAT, "identity": self.identity, "best": best, "timings": timings}
        text = json.dumps({"body": body, "checksum": _checksum(body)}, sort_keys=True, indent=1)
        directory = os.path.dirname(self.path)
        tmp = os.path.join(directory, f".{os.path.basename(self.path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path)
            return True
        except OSError as err:
            warnings.warn(f"tilejit: could not write autotune results {self.path}: {err}", stacklevel=4)
            return False
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
