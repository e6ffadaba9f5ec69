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
    assert "cuLaunchKernel through" in rows["launches"]
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cuda-python")
    assert "cuda-python (TILEJIT_LAUNCH_BINDING)" in "\n".join(cli.info_lines())
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cffi")
    assert "neither" in "\n".join(cli.info_lines())
    assert str(tmp_path / "cache") in rows["cache"] and "0 kernels" in rows["cache"]


def test_info_says_which_ptxas_assembles_warp_specialised_kernels(monkeypatch, tmp_path):
    tool = tmp_path / "ptxas"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("TILEJIT_PTXAS", str(tool))
    rows = {line.split()[0]: line for line in cli.info_lines()}
    assert rows["ptxas"].split()[1] == f"{tool}:" and "whole-program" in rows["ptxas"]
    monkeypatch.setenv("TILEJIT_PTXAS", str(tmp_path / "missing"))
    rows = {line.split()[0]: line for line in cli.info_lines()}
    assert "not found" in rows["ptxas"] and "driver JIT-compiles" in rows["ptxas"]


def test_the_suite_caches_kernels_in_a_directory_of_its_own():
    """(conftest) Whatever TILEJIT_CACHE_DIR says outside, the tests compile into a temporary
    cache that the session removes: they never write into the user's."""
    import os

    from conftest import SESSION_CACHE
    from tilejit.runtime import cache
    assert cache.cache_dir() == os.path.abspath(SESSION_CACHE)
    assert os.path.basename(SESSION_CACHE).startswith("tilejit-test-cache-")


MATMUL = ["examples/matmul.py::matmul_kernel", "--sig", "bf16[2], bf16[2], bf16[2]", "--const", "BM=64",
          "--const", "BN=64", "--const", "BK=32"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compile_for_an_architecture_without_its_gpu(arch, capsys, monkeypatch):
    import os
    monkeypatch.chdir(os.path.dirname(os.path.dirname(__file__)))
    assert cli.main(["compile", *MATMUL, "--arch", arch, "--emit", "ptx"]) == 0
    assert f".target {arch}" in capsys.readouterr().out
    assert cli.main(["compile", *MATMUL, "--arch", arch, "--emit", "plan_loops"]) == 0
    assert "loop plans" in capsys.readouterr().out


def test_a_wrong_kernel_name_lists_the_file_s_kernels(capsys, monkeypatch):
    import os
    monkeypatch.chdir(os.path.dirname(os.path.dirname(__file__)))
    assert cli.main(["compile", "examples/matmul.py::matmul", "--sig", "f32[2]"]) == 1
    assert "no @tj.kernel named 'matmul'; its kernels: matmul_kernel" in capsys.readouterr().err


def test_emit_sass_says_what_to_install_without_a_disassembler(capsys, monkeypatch):
    import os
    import shutil
    if shutil.which("nvdisasm") or shutil.which("cuobjdump"):
        pytest.skip("a disassembler is installed here")
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    monkeypatch.chdir(os.path.dirname(os.path.dirname(__file__)))
    assert cli.main(["compile", *MATMUL, "--arch", "sm_80", "--emit", "sass"]) == 1
    assert "needs nvdisasm or cuobjdump" in capsys.readouterr().err


def test_a_closed_pipe_is_quiet():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(__file__))
    proc = subprocess.Popen([sys.executable, "-m", "tilejit", "compile", *MATMUL, "--arch", "sm_90a", "--emit", "llvm"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()                      # as `| head -1` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_cache_info_and_clear_print_lines(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    assert cli.main(["cache", "info"]) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path}: 0 kernels, 0 bytes (0.0 MiB)"
    assert cli.main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.startswith(f"removed 0 kernels from {tmp_path}")


def test_an_inspection_prints_as_one_line(monkeypatch):
    import numpy as np
    from tilejit.examples import matmul
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    a = np.ones((64, 64), np.float32)
    text = repr(matmul.matmul_kernel.kernel.inspect(a, a, a, BM=64, BN=64, BK=32))
    assert "\n" not in text and text.startswith("Inspection(backend=") and "stages=tile_ir/simt_ir" in text


def test_a_python_whose_bytecode_the_frontend_does_not_know_is_refused(monkeypatch):
    from tilejit.frontend import bytecode
    monkeypatch.setattr(bytecode, "PY", (3, 14))

    @tj.kernel
    def copy(x, y, B: tj.constexpr):
        tj.store(y, (0,), tj.load(x, (0,), (B,)))
    from tilejit.specs import ArraySpec
    with pytest.raises(tj.CompileError, match=r"Python 3.11, 3.12, 3.13, and this is Python 3.14") as err:
        copy.tile_ir((ArraySpec(tj.float32, 1),) * 2, {"B": 16})
    assert "'copy'" in str(err.value) and "test_cli_info.py" in str(err.value)
