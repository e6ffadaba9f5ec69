"""The package as users get it: every package directory of the tree is listed in pyproject.toml
(under its installed name), and a wheel built from the tree, installed into a folder of its own,
imports and runs a kernel from outside the source tree."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_directory_is_listed_under_its_installed_name():
    config = setuptools_config()
    mapping = config["package-dir"]
    listed = set(config["packages"])
    on_disk = set()
    for installed, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((installed, *rel)))
    assert on_disk == listed, (sorted(on_disk - listed), sorted(listed - on_disk))


def test_a_built_wheel_runs_outside_the_source_tree(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheel_dir)],
                           capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and ("Could not find a version" in build.stderr or "NewConnectionError" in build.stderr):
        pytest.skip("no package index to build the wheel with: " + build.stderr.strip().splitlines()[-1])
    assert build.returncode == 0, build.stderr
    wheel = next(wheel_dir.glob("tilejit-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    script = (
        "import numpy as np, tilejit as tj, tilejit.passes, tilejit.runtime, tilejit.examples, tilejit.autotune\n"
        "assert tj.__file__.startswith(%r), tj.__file__\n"
        "from tilejit.examples import softmax\n"
        "x = np.random.default_rng(0).standard_normal((5, 100)).astype(np.float32)\n"
        "tj.testing.assert_close(softmax.run(x), softmax.reference(x))\n"
        "print('ok', tj.__version__)\n") % str(target)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(target), TILEJIT_BACKEND="interpret", TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stderr[-2000:]
    cli = subprocess.run([sys.executable, "-m", "tilejit", "--version"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 0 and "tilejit" in cli.stdout
