"""Code generation: SIMT IR -> LLVM IR -> PTX -> cubin.  In: a SIMT ``ir.Function`` from
``tilejit.passes.compile_to_simt``.  Out: LLVM IR text, PTX text, and a cubin with its ptxas
resource report.  The only stage that imports llvmlite; it never touches the CUDA driver.

    llvm.py         SIMT op -> LLVM instructions, the kernel ABI, the NVPTX target machine -> PTX
    base.py         LLVM types of dtypes, constants, conversions (shared by the modules below)
    elementwise.py  elementwise ops in LLVM (NumPy semantics); floatmath.py: approximate math
    memory.py       global/shared loads and stores, vectorisation, cp.async
    mma.py          tensor-core and async-copy intrinsics (mma, ldmatrix, wgmma, fences)
    ptxas.py        PTX -> cubin with nvJitLink, and the register/spill report
    host.py         the elementwise LLVM run on the host CPU, for GPU-less tests of the math
"""
from tilejit.codegen.llvm import TRIPLE, compile_ptx, emit_llvm, kernel_name, ptx_from_llvm  # noqa: F401
