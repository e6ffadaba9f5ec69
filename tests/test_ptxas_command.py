"""Without nvJitLink, PTX is assembled by the CUDA toolkit's ``ptxas`` command where one exists,
so ``inspect()`` still reports registers and spills; with neither, the error says what to install."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit.codegen import ptxas


@tj.kernel
def exp_kernel(x, y, BLOCK: tj.constexpr):
    tj.store(y, (0,), tj.exp(tj.load(x, (0,), (BLOCK,))))


def ptx_of_exp() -> str:
    from tilejit.backends import cuda
    x = np.zeros(1024, np.float32)
    specs, consts, _ = exp_kernel.specialise(exp_kernel.bind((x, x), {"BLOCK": 1024}))
    return cuda.build(exp_kernel.tile_ir(specs, consts), 4, "sm_90a", stop_after="ptx")["ptx"]


@pytest.fixture
def no_nvjitlink(monkeypatch):
    monkeypatch.setattr(ptxas, "_nvjitlink", lambda: None)
    ptxas.available.cache_clear()
    yield
    ptxas.available.cache_clear()


def test_the_ptxas_command_assembles_with_the_same_report(no_nvjitlink):
    if ptxas.ptxas_command() is None:
        pytest.skip("no ptxas command on this machine")
    asm = ptxas.assemble(ptx_of_exp(), "sm_90a")
    assert asm.cubin[:4] == b"\x7fELF" and asm.registers > 0 and asm.spills == 0
    assert "Used" in asm.log and ptxas.available()


def test_inspect_reports_registers_through_the_command(no_nvjitlink, tmp_path, monkeypatch):
    if ptxas.ptxas_command() is None:
        pytest.skip("no ptxas command on this machine")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    exp_kernel._cache.clear()
    x = np.zeros(1024, np.float32)
    info = exp_kernel.inspect(x, x, BLOCK=1024)
    assert info.registers and info.registers > 0 and info.spills == 0


def test_with_neither_the_error_says_what_to_install(no_nvjitlink, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_PTXAS", str(tmp_path / "missing-ptxas"))
    assert ptxas.ptxas_command() is None and not ptxas.available()
    with pytest.raises(ptxas.PtxAssemblyError, match="install nvidia-nvjitlink"):
        ptxas.assemble(ptx_of_exp(), "sm_90a")


def test_a_ptxas_failure_is_reported_with_its_log(no_nvjitlink):
    if ptxas.ptxas_command() is None:
        pytest.skip("no ptxas command on this machine")
    with pytest.raises(ptxas.PtxAssemblyError, match="ptxas .* failed for sm_90a"):
        ptxas.assemble(ptx_of_exp().replace("ret;", "bogus.instruction;"), "sm_90a")


@pytest.mark.parametrize("line_info", [True, False])
def test_whole_program_asks_for_the_command_and_line_info_follows_the_switch(monkeypatch, tmp_path, line_info):
    """``whole_program`` assembles with the command even where nvJitLink is installed, and
    ``LINE_INFO`` alone decides ``-lineinfo`` (a fake ptxas records its arguments)."""
    seen = tmp_path / "args"
    tool = tmp_path / "ptxas"
    tool.write_text(f'#!/bin/sh\necho "$@" > {seen}\nfor a; do out=$a; done\nprintf "\\177ELF" > "$out"\n'
                    'echo "ptxas info    : Used 42 registers"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("TILEJIT_PTXAS", str(tool))
    monkeypatch.setattr(ptxas, "LINE_INFO", line_info)
    asm = ptxas.assemble(".version 8.4\n", "sm_90a", whole_program=True)
    args = seen.read_text().split()
    assert args[0] == "-arch=sm_90a" and ("-lineinfo" in args) is line_info
    assert asm.cubin == b"\x7fELF" and asm.registers == 42
