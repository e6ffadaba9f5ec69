"""``tilejit --version`` and ``tilejit info``: the versions tilejit runs on, the driver and GPUs
(or why there are none), the backend a launch picks and the on-disk cache."""
import pytest

import tilejit as tj
from tilejit import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"tilejit {tj.__version__}"
    assert tj.__version__.count(".") == 2 and all(p.isdigit() for p in tj.__version__.split("."))


def test_info_reports_versions_gpus_backend_and_cache(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rows["tilejit"].split()[1] == tj.__version__
    assert "LLVM" in rows["llvmlite"] and "python" in rows and "cuda-python" in rows and "nvJitLink" in rows
    from tilejit.runtime import driver
    if driver.available():
        assert "driver" in rows and "compute capability" in rows["gpu"]
    else:
        assert "none" in rows["gpu"]
    assert rows["backend"].split()[1] == "emulate"
    assert str(tmp_path / "cache") in rows["cache"] and "0 kernels" in rows["cache"]


def test_the_suite_caches_kernels_in_a_directory_of_its_own():
    """(conftest) Whatever TILEJIT_CACHE_DIR says outside, the tests compile into a temporary
    cache that the session removes: they never write into the user's."""
    import os

    from conftest import SESSION_CACHE
    from tilejit.runtime import cache
    assert cache.cache_dir() == os.path.abspath(SESSION_CACHE)
    assert os.path.basename(SESSION_CACHE).startswith("tilejit-test-cache-")
