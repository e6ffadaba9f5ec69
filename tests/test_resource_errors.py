"""Kernels that ask for too much, and launch mistakes caught before anything runs (CPU).

A tile too large for the registers or shared memory must be a clear tilejit error naming the
kernel and what overflowed, never a crash, an LLVM abort, a hang or a raw traceback from inside
llvmlite / nvJitLink: each such compile runs in a child process (an abort cannot take pytest
down, a hang is cut short by faulthandler) and the test reads its exit code and output.
Bad grids, warp counts and constexpr values must fail before the frontend runs or the output is
touched (tests/test_launch.py has the basic cases; these add the ones it leaves out)."""
import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import tilejit as tj
from tilejit import cli, frontend
from tilejit.specs import ArraySpec, ScalarSpec

HANG_SECONDS = 12       # a correct compiler refuses these in ~2 s (mostly the import)
TILEJIT_ERROR_EXIT = 3

# Child: compile one kernel for cuda (no GPU needed) and report how it ended.
CHILD = textwrap.dedent('''
    import faulthandler, sys
    faulthandler.dump_traceback_later({hang}, exit=True)       # a hang ends with a traceback
    import tilejit as tj
    from tilejit.specs import ArraySpec

    @tj.kernel
    def rowsum(x, y, N: tj.constexpr):
        t = tj.load(x, (0, 0), (N, N))
        tj.store(y, (0,), tj.sum(t, axis=1))

    @tj.kernel
    def transpose(x, y, N: tj.constexpr):
        tj.store(y, (0, 0), tj.trans(tj.load(x, (0, 0), (N, N))))

    kernel, ranks = {{"rowsum": (rowsum, (2, 1)), "transpose": (transpose, (2, 2))}}[sys.argv[1]]
    specs = [ArraySpec(tj.float32, r) for r in ranks]
    try:
        found = kernel.inspect_specs(specs, {{"N": int(sys.argv[2])}}, int(sys.argv[3]), "cuda")
    except tj.TilejitError as err:
        print(type(err).__name__)
        print(err)
        sys.exit({code})
    print("compiled", found.registers, found.spills, found.shared_bytes)
''').format(hang=HANG_SECONDS, code=TILEJIT_ERROR_EXIT)


def compile_in_child(tmp_path, kernel: str, n: int, num_warps: int = 4) -> subprocess.CompletedProcess:
    env = dict(os.environ, TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-c", CHILD, kernel, str(n), str(num_warps)], env=env,
                          capture_output=True, text=True, timeout=HANG_SECONDS + 60)


def assert_clear_tilejit_error(done: subprocess.CompletedProcess, kernel: str, *what: str) -> None:
    """The child ended with a tilejit error naming ``kernel`` and one of ``what`` (no crash,
    no hang, no traceback from the compiler's insides)."""
    report = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == TILEJIT_ERROR_EXIT, report
    kind, _, message = done.stdout.partition("\n")
    assert kind in ("CompileError", "LaunchError"), report
    assert f"'{kernel}'" in message, report
    assert any(w in message.lower() for w in what), report
    assert "Traceback" not in done.stderr, report


# --- resources the compiler can see --------------------------------------------------------------
def test_tile_too_large_for_the_registers_is_a_clear_error(tmp_path):
    done = compile_in_child(tmp_path, "rowsum", 4096)
    assert_clear_tilejit_error(done, "rowsum", "register", "too large", "spill")


def test_shared_memory_over_the_target_limit_is_a_compile_error(tmp_path):
    done = compile_in_child(tmp_path, "transpose", 256, num_warps=32)
    assert_clear_tilejit_error(done, "transpose", "shared memory")


def test_shared_memory_overflow_never_crashes_the_compiler(tmp_path):
    """Whatever the verdict, compiling it is a clean exit: compiled (the GPU refuses it at load
    time, tests/test_gpu_kernels.py) or a tilejit error."""
    done = compile_in_child(tmp_path, "transpose", 256, num_warps=32)
    assert done.returncode in (0, TILEJIT_ERROR_EXIT), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if done.returncode == 0:
        shared = int(done.stdout.split()[-1])
        assert shared > 232448, done.stdout         # reported, so the launch can refuse it


def test_a_tile_that_fits_compiles_without_spills(tmp_path):
    """The same child and kernel at a sane size: the harness itself reports success."""
    done = compile_in_child(tmp_path, "rowsum", 64)
    assert done.returncode == 0 and done.stdout.startswith("compiled"), done.stderr[-3000:]
    _, registers, spills, _ = done.stdout.split()
    assert 0 < int(registers) <= 255 and int(spills) == 0


# --- launch mistakes, refused before the frontend runs -------------------------------------------
@tj.kernel
def fill(out, value, BLOCK: tj.constexpr = 8):
    i = tj.program_id(0) * BLOCK
    tj.store(out, (i,), tj.full((BLOCK,), value, out.dtype))


@pytest.fixture
def poisoned_frontend(monkeypatch):
    """Interpret backend, and a frontend that fails the test if anything gets as far as tracing."""
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel was traced: the mistake was not caught first")
    monkeypatch.setattr(frontend, "compile_tile_ir", refuse)


def launch_error_before_tracing(launch, *fragments) -> str:
    out = np.zeros(16, np.float32)
    with pytest.raises(tj.LaunchError) as info:
        launch(out)
    text = str(info.value)
    assert "'fill'" in text and all(f in text for f in fragments), text
    assert traceback.extract_tb(info.value.__traceback__)[-1].filename == __file__
    assert not out.any()
    return text


@pytest.mark.parametrize("grid", [(1, 1, 65536), (np.int64(2**31),), (1, np.uint16(0)),
                                  lambda args: (1, 65536)])
def test_grid_over_the_limit_fails_before_tracing(poisoned_frontend, grid):
    text = launch_error_before_tracing(lambda out: fill[grid](out, 1.0), "grid")
    assert "between 1 and" in text


@pytest.mark.parametrize("num_warps", [6, 0, 64, -4, True, 4.0, "4"])
def test_bad_num_warps_fails_before_tracing(poisoned_frontend, num_warps):
    launch_error_before_tracing(lambda out: fill[2](out, 1.0, num_warps=num_warps), "num_warps")


def test_inspect_checks_num_warps():
    with pytest.raises(tj.LaunchError, match="num_warps must be a power of two"):
        fill.inspect(np.zeros(16, np.float32), 1.0, num_warps=12)


def test_inspect_specs_checks_num_warps():
    with pytest.raises(tj.LaunchError, match="num_warps"):
        fill.inspect_specs([ArraySpec(tj.float32, 1), ScalarSpec(tj.float32)], {"BLOCK": 8},
                           num_warps=3, backend="cuda")


def test_cli_compile_with_bad_num_warps_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    rc = cli.main(["compile", f"{__file__}::fill", "--sig", "f32[1], f32", "--num-warps", "3",
                   "--backend", "cuda", "--emit", "ptx"])
    err = capsys.readouterr().err
    assert rc == 1 and "num_warps" in err and "Traceback" not in err, err


# --- constexpr values of the wrong type ----------------------------------------------------------
@tj.kernel
def copy(x, y, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)))


COPY_LINES = range(copy.fn.__code__.co_firstlineno, copy.fn.__code__.co_firstlineno + 4)


@pytest.mark.parametrize("block", [128.0, "128", tj.float32, None, (128,), 0, -4, True])
def test_wrong_constexpr_is_a_compile_error_at_the_kernel_line(monkeypatch, block):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    with pytest.raises(tj.CompileError) as info:
        copy[2](x, y, BLOCK=block)
    text = str(info.value)
    assert "'copy'" in text and "^" in text, text
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.filename == __file__ and last.lineno in COPY_LINES, last
    assert not y.any()


def test_bool_constexpr_shape_message_does_not_misdirect(monkeypatch):
    """BUG (reported, not yet fixed): for BLOCK=True the frontend says the tile shape is not
    compile-time and suggests a tj.constexpr parameter, which BLOCK already is."""
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    with pytest.raises(tj.CompileError) as info:
        copy[1](np.ones(8, np.float32), np.zeros(8, np.float32), BLOCK=True)
    assert "use a tj.constexpr parameter" not in str(info.value), str(info.value)


# --- host arrays ---------------------------------------------------------------------------------
class UnexportableHostArray:
    """Host memory whose DLPack export fails, the way a CPU torch tensor that requires grad
    does ("Can't export tensors that require gradient, use tensor.detach()")."""

    def __dlpack__(self, **kwargs):
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")

    def __dlpack_device__(self):
        return (1, 0)       # kDLCPU


def test_unexportable_host_array_is_a_launch_error(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    with pytest.raises(tj.LaunchError, match="argument 'out'"):
        fill[1](UnexportableHostArray(), 1.0)
