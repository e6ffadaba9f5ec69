"""GPU probe: can the driver's own linker (cuLinkCreate / cuLinkAddData / cuLinkComplete) give the
cubin of a warp-specialised kernel with its setmaxnreg honoured (no info C7504), so tilejit could
cache the driver's code without the CUDA toolkit's ptxas?  Prints the linker's log, the cubin's
registers, and whether its .text matches the ptxas command's.
    python3 scripts/probes/culink.py"""
import ctypes
import struct
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
import bench_compile  # noqa: E402
from tilejit.codegen import ptxas  # noqa: E402


class _Args:
    pass


def text_sections(cubin: bytes) -> dict:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    size, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * size) for i in range(count)]
    table = heads[names][4]
    out = {}
    for name, kind, _, _, offset, length in heads:
        label = cubin[table + name:cubin.index(b"\0", table + name)].decode()
        if label.startswith(".text"):
            out[label] = cubin[offset:offset + length]
    return out


def main():
    from cuda.bindings import driver as cu
    cu.cuInit(0)
    _, dev = cu.cuDeviceGet(0)
    _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    cu.cuCtxSetCurrent(ctx)
    kernel, values, consts, _, num_warps, _ = bench_compile._problem("attention", _Args(), np)
    specs, consts, _ = kernel.specialise(kernel.bind(values, consts))
    ptx = kernel.compile(specs, consts, num_warps, "cuda").artifact.ptx
    size = 1 << 16
    info, error = bytearray(size), bytearray(size)
    jit = cu.CUjit_option
    options = [jit.CU_JIT_INFO_LOG_BUFFER, jit.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, jit.CU_JIT_ERROR_LOG_BUFFER,
               jit.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, jit.CU_JIT_LOG_VERBOSE]
    vals = [info, size, error, size, 1]
    err, state = cu.cuLinkCreate(len(options), options, vals)
    print("cuLinkCreate", err)
    data = ptx.encode() + b"\0"
    err, = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), b"attention.ptx", 0, None, None)
    print("cuLinkAddData", err)
    err, image, nbytes = cu.cuLinkComplete(state)
    print("cuLinkComplete", err, nbytes)
    print("info log:", bytes(info).split(b"\0", 1)[0].decode(errors="replace")[:1500])
    print("error log:", bytes(error).split(b"\0", 1)[0].decode(errors="replace")[:800])
    if err == 0:
        cubin = ctypes.string_at(image, nbytes)
        print("registers / frame (cubin):", ptxas.cubin_report(cubin))
        command = ptxas.ptxas_command()
        if command:
            whole = ptxas._assemble_with_command(command, ptx, "sm_90a", ())
            mine, theirs = text_sections(cubin), text_sections(whole.cubin)
            print("ptxas command registers", whole.registers, "; .text equal:",
                  {k: mine.get(k) == theirs.get(k) for k in theirs}, {k: (len(mine.get(k, b"")), len(v)) for k, v in theirs.items()})
    cu.cuLinkDestroy(state)


if __name__ == "__main__":
    main()
