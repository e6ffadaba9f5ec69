"""Test configuration: Hypothesis profiles, the `gpu` marker (skipped without a CUDA device), and
a kernel cache of the session's own (a temporary directory, removed at the end): the tests never
write into the user's cache, whatever ``TILEJIT_CACHE_DIR`` says."""
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

SESSION_CACHE = tempfile.mkdtemp(prefix="tilejit-test-cache-")
os.environ["TILEJIT_CACHE_DIR"] = SESSION_CACHE          # before anything compiles


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)

settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("gpu", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _have_gpu() -> bool:
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:          # no driver library (DynamicLibNotFoundError) or no bindings: no GPU
        return False


HAVE_GPU = _have_gpu()


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def assemble_or_skip(ptx: str, target: str):
    """The assembly of ``ptx`` as the cuda backend makes it (its resource report): nvJitLink's,
    or, for a kernel that moves registers between warpgroups (``setmaxnreg``, which nvJitLink's
    relocatable code ignores), the ptxas command's whole program (the backend's choice; without
    the command the driver JIT-compiles the PTX whole).  A skip where the assembler is missing:
    the PTX tests then still check the text."""
    from tilejit.codegen import ptxas
    whole = "setmaxnreg" in ptx
    if whole and not ptxas.whole_program_available():
        pytest.skip("a setmaxnreg kernel is assembled whole: no ptxas command here")
    try:
        return ptxas.assemble(ptx, target, whole_program=whole)
    except ptxas.PtxAssemblyError as e:
        if "not available" in str(e) or "could not start" in str(e):
            pytest.skip(str(e))
        raise


def compile_source(src: str, specs, consts: dict, filename: str = "kernel_src.py", **names):
    """The tile IR of the function ``k`` defined by ``src`` (with ``tj`` and ``names`` as its
    globals), its source registered with linecache so errors can show the user's line."""
    import linecache

    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = {"tj": tj, **names}
    exec(compile(src, filename, "exec"), namespace)
    return compile_tile_ir(namespace["k"], list(specs), dict(consts))


def body_error(body: str, message: str, specs, consts: dict, line: int = 3, head: str = "", filename="body_src.py"):
    """Compile ``k(x, y, B)`` whose body is ``head`` then ``body`` (4-space indented lines) and
    check it fails with a CompileError matching ``message`` at ``line`` of its source."""
    import pytest

    import tilejit as tj
    src = "def k(x, y, B: tj.constexpr):\n" + head + "    " + body + "\n"
    with pytest.raises(tj.CompileError, match=message) as err:
        compile_source(src, specs, consts, filename)
    assert f"{filename}:{line}" in str(err.value), str(err.value)
    return err.value


def emulated_bf16_gemm(fn, m: int, n: int, k: int, bm: int, bn: int, seed: int = 0) -> None:
    """Run SIMT GEMM ``fn`` (``(a, b, c)``, one program per (bm, bn) block of C) on the emulator
    on random bfloat16 inputs and check C against the float64 product (bfloat16 rounding)."""
    import numpy as np

    import tilejit as tj
    from tilejit.backends import emulate
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    b = rng.standard_normal((k, n)).astype(tj.bfloat16.np)
    c = np.zeros((m, n), tj.bfloat16.np)
    emulate.run(fn, (-(-m // bm), -(-n // bn)), [a, b, c])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-8, atol=1e-3 * np.abs(ref).max())


def pipeline_until(kernel, specs, consts: dict, stage: str, num_warps: int = 4, target: str = "sm_90a"):
    """``kernel``'s tile IR for ``specs`` / ``consts`` after the PIPELINE stage named ``stage``."""
    from tilejit.passes.pipeline import PIPELINE, Options
    fn = kernel.tile_ir(specs, consts)
    opt = Options(num_warps=num_warps, target=target)
    for s in PIPELINE:
        fn = s.run(fn, opt)
        if s.name == stage:
            return fn
    raise ValueError(f"no PIPELINE stage named {stage!r}")
