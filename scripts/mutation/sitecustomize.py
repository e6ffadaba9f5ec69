# mutation runs: import tilejit from $TJ_ROOT (a scratch clone), not from the editable install
import importlib.abc
import importlib.util
import os
import sys

_ROOT = os.environ.get("TJ_ROOT")
if _ROOT:
    _MAP = {"tilejit": "tilejit", "tilejit.passes": "passes", "tilejit.runtime": "runtime"}

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name in _MAP:
                d = os.path.join(_ROOT, _MAP[name])
                return importlib.util.spec_from_file_location(name, os.path.join(d, "__init__.py"),
                                                              submodule_search_locations=[d])
            return None

    sys.meta_path.insert(0, _Finder())
