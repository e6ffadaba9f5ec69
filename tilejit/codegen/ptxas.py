"""PTX -> cubin with nvJitLink (``cuda.bindings.nvjitlink``, the ``nvidia-nvjitlink`` wheel), or,
where that is missing, with the CUDA toolkit's ``ptxas`` command (``$TILEJIT_PTXAS``, else on
``PATH`` or under ``$CUDA_HOME/bin``), plus the resource report ptxas prints with ``-verbose``:
registers, spill bytes, static shared memory.

Needs no GPU, so CI assembles every kernel for sm_80 and sm_90a and checks it does not spill.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass

from tilejit.errors import CompileError

# The switch: the PTX's .loc lines into the cubin (``-lineinfo``: profilers and
# compute-sanitizer name source lines); False leaves them out.
LINE_INFO = True
_USED = re.compile(r"^ptxas info\s*: Used (\d+) registers(.*)$", re.M)
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class Assembled:
    """A cubin and its ptxas resource report.

    registers: registers per thread (the most over the entry functions); spills: bytes of
    spill stores plus spill loads (summed; where nvJitLink printed no report, the stack frame's
    bytes, ``cubin_report``); shared_bytes: *static* shared memory (dynamic
    shared memory is chosen at launch and not counted); log: nvJitLink's info log."""
    cubin: bytes
    registers: int
    spills: int
    shared_bytes: int
    log: str


class PtxAssemblyError(CompileError):
    """nvJitLink rejected the PTX (a compiler bug, or a resource the target lacks)."""


def _read_log(handle, size_fn, read_fn) -> str:
    size = size_fn(handle)
    if size <= 1:
        return ""
    buf = bytearray(size)
    read_fn(handle, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def parse_report(log: str) -> tuple[int, int, int]:
    """(registers, spill bytes, static shared bytes) from a ptxas ``-verbose`` info log."""
    registers = shared = 0
    for m in _USED.finditer(log):
        registers = max(registers, int(m.group(1)))
        smem = _SMEM.search(m.group(2))
        shared = max(shared, int(smem.group(1)) if smem else 0)
    spills = sum(int(stores) + int(loads) for stores, loads in _SPILLS.findall(log))
    return registers, spills, shared


# .nv.info attributes (format 4: a 16-bit size, then a 32-bit symbol index and a 32-bit value)
EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x11, 0x2f


def cubin_report(cubin: bytes) -> tuple[int, int]:
    """(registers, stack frame bytes), the most over the entry functions, read from the cubin's
    ``.nv.info`` section.  nvJitLink serves a PTX it has assembled before from the CUDA JIT cache
    (``~/.nv/ComputeCache``) and then prints no ``-verbose`` report: the cubin still says.  Our
    kernels keep no arrays in local memory, so a stack frame is spilled registers."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:       # ELF64 only
        return 0, 0
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * size) for i in range(count)]
    table = heads[names][4]
    registers = frame = 0
    for name, _, _, _, offset, length in heads:
        if not cubin[table + name:].startswith(b".nv.info\0"):
            continue
        i = offset
        while i + 4 <= offset + length:
            fmt, attr, n = cubin[i], cubin[i + 1], struct.unpack_from("<H", cubin, i + 2)[0]
            if fmt != 4:                   # (formats 1-3 carry no 16-bit size)
                i += 4
                continue
            if n == 8 and attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE):
                value = struct.unpack_from("<I", cubin, i + 8)[0]
                if attr == EIATTR_REGCOUNT:
                    registers = max(registers, value)
                else:
                    frame = max(frame, value)
            i += 4 + n
    return registers, frame


def _nvjitlink():
    """cuda-python's nvJitLink module if the library behind it starts, else None."""
    try:
        from cuda.bindings import nvjitlink
        nvjitlink.destroy(nvjitlink.create(1, ["-arch=sm_80"]))
        return nvjitlink
    except Exception:               # ImportError, or DynamicLibNotFoundError without the wheel
        return None


def ptxas_command() -> str | None:
    """The CUDA toolkit's ``ptxas``: ``$TILEJIT_PTXAS``, else the one on PATH, else under
    ``$CUDA_HOME`` (or /usr/local/cuda); None when there is none."""
    chosen = os.environ.get("TILEJIT_PTXAS")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("ptxas")
    if found:
        return found
    home = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
    return home if os.access(home, os.X_OK) else None


@functools.cache
def available() -> bool:
    """Whether PTX can be assembled here: nvJitLink starts, or a ``ptxas`` command exists."""
    return _nvjitlink() is not None or ptxas_command() is not None


def whole_program_available() -> bool:
    """Whether a whole-program cubin can be made here (the ``ptxas`` command; nvJitLink compiles
    only relocatable code)."""
    return ptxas_command() is not None


def assemble(ptx: str, arch: str, options: tuple[str, ...] = (), whole_program: bool = False) -> Assembled:
    """Assemble ``ptx`` for ``arch`` (e.g. "sm_80", "sm_90a") into a cubin with nvJitLink, or with
    the ``ptxas`` command where nvJitLink is missing or ``whole_program`` asks for it: nvJitLink
    compiles relocatable code, where ptxas ignores ``setmaxnreg`` (info C7504), so a kernel that
    moves registers between warpgroups needs the whole-program assembly."""
    nvjitlink = None if whole_program else _nvjitlink()
    if nvjitlink is None:
        command = ptxas_command()
        if command is None:
            raise PtxAssemblyError("neither nvJitLink nor ptxas is available: install nvidia-nvjitlink "
                                   "(pip install nvidia-nvjitlink) or the CUDA toolkit")
        return _assemble_with_command(command, ptx, arch, options)
    opts = [f"-arch={arch}", "-verbose", *(["-lineinfo"] if LINE_INFO else []), *options]
    try:
        handle = nvjitlink.create(len(opts), opts)
    except Exception as e:            # DynamicLibNotFoundError when the wheel is missing
        raise PtxAssemblyError(f"nvJitLink could not start ({e}); install nvidia-nvjitlink") from None
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = _read_log(handle, nvjitlink.get_error_log_size, nvjitlink.get_error_log)
            raise PtxAssemblyError(f"ptxas (nvJitLink) failed for {arch}: {e}\n{log}") from None
        log = _read_log(handle, nvjitlink.get_info_log_size, nvjitlink.get_info_log)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return _assembled(bytes(cubin), log)


def _assembled(cubin: bytes, log: str) -> Assembled:
    registers, spills, shared = parse_report(log)
    if not registers:               # no report (a cached assembly): the cubin's registers and frame
        registers, spills = cubin_report(cubin)
    return Assembled(cubin, registers, spills, shared, log)


def _assemble_with_command(command: str, ptx: str, arch: str, options: tuple[str, ...]) -> Assembled:
    """The same with the ``ptxas`` command (a whole-program cubin; its ``-v`` report)."""
    with tempfile.TemporaryDirectory(prefix="tilejit-ptxas-") as tmp:
        source, target = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(source, "w") as f:
            f.write(ptx)
        extra = [o for o in options if o.startswith("-") and not o.startswith("-arch")]
        line_info = ["-lineinfo"] if LINE_INFO else []
        done = subprocess.run([command, f"-arch={arch}", "-v", *line_info, *extra, source, "-o", target],
                              capture_output=True, text=True)
        log = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise PtxAssemblyError(f"ptxas ({command}) failed for {arch}:\n{log}")
        with open(target, "rb") as f:
            cubin = f.read()
    return _assembled(cubin, log)


def with_min_ctas(ptx: str, n: int) -> str | None:
    """``ptx`` with its entry's occupancy hint set to ``n`` CTAs per SM (``.minnctapersm``, which
    LLVM writes after ``.maxntid`` from the ``nvvm.minctasm`` attribute, and nothing else of the
    PTX depends on); ``n == 0`` drops it.  None where there is no ``.maxntid`` line to place it
    after, or more than one entry."""
    lines = ptx.split("\n")
    anchors = [i for i, line in enumerate(lines) if line.startswith(".maxntid")]
    if len(anchors) != 1:
        return None
    lines = [line for line in lines if not line.startswith(".minnctapersm")]
    if n:
        lines.insert(anchors[0] + 1, f".minnctapersm {n}")
    return "\n".join(lines)


def with_registers(ptx: str, max_registers: int, increase: int, decrease: int) -> str | None:
    """``ptx`` of a warp-specialised kernel with its register count (``.maxnreg``) and its one
    ``setmaxnreg.inc`` / ``.dec`` pair set to other values (what ``specialise_warps.ctas_per_sm``
    gives for another count of CTAs an SM; nothing else of the PTX depends on them).  None where
    the PTX has no such line, or more than one of any."""
    lines = ptx.split("\n")
    found = {}
    for i, line in enumerate(lines):
        text = line.strip()
        for key, prefix in (("max", ".maxnreg "), ("inc", "setmaxnreg.inc.sync.aligned.u32 "),
                            ("dec", "setmaxnreg.dec.sync.aligned.u32 ")):
            if text.startswith(prefix):
                if key in found:
                    return None
                found[key] = i
    if len(found) != 3:
        return None
    for key, value in (("max", max_registers), ("inc", increase), ("dec", decrease)):
        line = lines[found[key]]
        head = line[:len(line) - len(line.lstrip())]
        text = line.strip()
        lines[found[key]] = head + (f".maxnreg {value}" if key == "max" else
                                    text[:text.rindex(" ") + 1] + f"{value};")
    return "\n".join(lines)
