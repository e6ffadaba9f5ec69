"""PTX -> cubin with nvJitLink: the cubin, the parsed register/spill/shared report, and errors
that carry ptxas's log."""
from __future__ import annotations

import re
import sys

import pytest

from tilejit import codegen
from tilejit import dtypes as D
from tilejit.errors import CompileError
from tilejit.ir import TileOp
from tilejit.codegen.ptxas import Assembled, PtxAssemblyError, assemble, parse_report
from tilejit.simt import GlobalAttrs, RegType, SimtOp

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_codegen import Kernel, exp_kernel  # noqa: E402  (the SIMT kernel builder)

f32, i32 = D.float32, D.int32

SAMPLE_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_80'
ptxas info    : Function properties for a
ptxas         .     24 bytes stack frame, 20 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 512 bytes smem, 364 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_80'
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 4 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 364 bytes cmem[0]
info    : used 255 registers, used 1 barriers, 24 stack, 1536 bytes smem, 364 bytes cmem[0], 0 bytes lmem
"""


def test_parse_report_takes_ptxas_lines():
    # the most registers, all spill bytes, the static shared memory of the ptxas lines (the
    # nvJitLink summary line counts Hopper's reserved 1 KiB too, so it is not used)
    assert parse_report(SAMPLE_LOG) == (255, 36, 512)
    assert parse_report("") == (0, 0, 0)


@pytest.mark.parametrize("target", ("sm_80", "sm_90a"))
def test_assemble_reports_resources(target):
    result = assemble(codegen.compile_ptx(exp_kernel(), target), target)
    assert isinstance(result, Assembled)
    assert result.cubin[:4] == b"\x7fELF"
    assert f"Compiling entry function 'vexp' for '{target}'" in result.log
    assert 8 <= result.registers <= 64 and result.spills == 0 and result.shared_bytes == 0


def live_values_kernel(n: int):
    """A loop carrying ``n`` floats: they all stay live, so a small register cap must spill."""
    k = Kernel("pressure")
    out = k.param("ptr", f32)
    offs = k.const(i32, *range(n))
    init = k.op(SimtOp.LOAD_GLOBAL, (out, offs), RegType(f32, n), GlobalAttrs(vec=4))
    body = k.region(RegType(i32), RegType(f32, n))
    iv, acc = body.args
    ivf = k.splat(k.ew(TileOp.CAST, iv, dtype=f32), n)
    k.end_region(k.ew(TileOp.FMA, acc, acc, ivf))
    res = k.op(SimtOp.FOR, (k.const(i32, 0), k.param("scalar", i32), k.const(i32, 1), init),
               RegType(f32, n), regions=[body])
    k.op(SimtOp.STORE_GLOBAL, (out, offs, res), attrs=GlobalAttrs(vec=4))
    return k.function()


def test_spills_are_reported():
    ptx = codegen.compile_ptx(live_values_kernel(64), "sm_80")
    assert assemble(ptx, "sm_80").spills == 0
    capped = assemble(ptx.replace(".maxntid 128", ".maxntid 128\n.maxnreg 24"), "sm_80")
    assert capped.spills > 0 and capped.registers <= 24


def test_bad_ptx_raises_with_the_log():
    ptx = codegen.compile_ptx(exp_kernel(), "sm_80").replace("ld.global.v4", "ld.globalx.v4", 1)
    with pytest.raises(PtxAssemblyError, match=r"(?s)sm_80.*ptxas.*line \d+") as info:
        assemble(ptx, "sm_80")
    assert isinstance(info.value, CompileError)


def test_ptx_for_a_newer_target_is_refused():
    ptx = codegen.compile_ptx(exp_kernel(), "sm_90a")
    with pytest.raises(PtxAssemblyError):
        assemble(ptx, "sm_80")


def test_a_cached_assembly_without_a_report_reads_the_cubin(monkeypatch):
    """nvJitLink serves a PTX it has assembled before from the CUDA JIT cache and prints no
    ``-verbose`` report (seen on the H200: a wish that spilled read as 0 spills and was kept,
    running at 0.28x copy).  The registers and the stack frame then come from the cubin, and a
    spilling assembly still reads as spilling."""
    from tilejit.codegen import ptxas
    ptx = codegen.compile_ptx(live_values_kernel(64), "sm_80")
    capped_ptx = ptx.replace(".maxntid 128", ".maxntid 128\n.maxnreg 24")
    logged, capped = assemble(ptx, "sm_80"), assemble(capped_ptx, "sm_80")
    assert ptxas.cubin_report(logged.cubin) == (logged.registers, 0)
    frame = int(re.search(r"(\d+) bytes stack frame", capped.log).group(1))
    assert ptxas.cubin_report(capped.cubin) == (capped.registers, frame) and frame > 0
    monkeypatch.setattr(ptxas, "_read_log", lambda *a: "")          # as a cached assembly
    quiet, quiet_capped = assemble(ptx, "sm_80"), assemble(capped_ptx, "sm_80")
    assert (quiet.registers, quiet.spills) == (logged.registers, 0)
    assert (quiet_capped.registers, quiet_capped.spills) == (capped.registers, frame)
    assert ptxas.cubin_report(b"not an elf") == (0, 0)
