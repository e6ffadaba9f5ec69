"""pytest for the benchmarks: collect ``bench_*.py`` (pytest's default pattern is ``test_*.py``)
so ``python3 -m pytest benchmarks/ --benchmark-only`` finds them. CI never runs these: the
project's ``testpaths`` is ``tests`` only."""
import pytest


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        if parent.session.isinitpath(file_path):
            return None         # named on the command line: pytest collects it already
        return pytest.Module.from_parent(parent, path=file_path)
    return None
