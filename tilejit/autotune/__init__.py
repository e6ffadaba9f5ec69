"""Autotuning: ``@tj.autotune`` picks the fastest of several ``tj.Config``s once per key.  In: a
``Kernel`` and its configs.  Out: the winning config, launched, and kept on disk.

    tuner.py     the decorator, the key, pruning and timing policy (``Config``, ``autotune``)
    store.py     results on disk, one checksummed JSON file per key
    inputs.py    snapshots of arrays the kernel overwrites, restored around timed runs
    progress.py  the status line shown on an interactive terminal
"""
from tilejit.autotune.tuner import Config, autotune  # noqa: F401
