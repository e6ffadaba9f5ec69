"""Programmatic dependent launch: ``tj.wait_prior_kernels()`` and ``tj.launch_dependents()``.

A kernel that waits is launched with programmatic stream serialization (``cuLaunchKernelEx``),
so its CTAs may start while the previous kernel on the stream ends; the wait is
``griddepcontrol.wait`` in its PTX, before every load that follows it. On sm_80, interpret and
emulate both calls do nothing (launches there never overlap)."""
import ctypes
import re

import numpy as np
import pytest

import tilejit as tj
from conftest import assemble_or_skip, compile_source


@tj.kernel
def scale_after_wait(x, y, n, factor, BLOCK: tj.constexpr):
    offs = tj.program_id(0) * BLOCK
    lane = tj.arange(0, BLOCK)
    keep = offs + lane < n
    f = factor * 2.0                       # work before the wait overlaps the previous kernel
    tj.wait_prior_kernels()
    tj.store(y, (offs,), tj.load(x, (offs,), (BLOCK,), mask=keep) * f, mask=keep)


@tj.kernel
def add_then_release(x, n, BLOCK: tj.constexpr):
    offs = tj.program_id(0) * BLOCK
    keep = offs + tj.arange(0, BLOCK) < n
    tj.launch_dependents()
    tj.store(x, (offs,), tj.load(x, (offs,), (BLOCK,), mask=keep) + 1.0, mask=keep)


def _build(kernel, args, consts, target):
    """The stages' outputs (``backends.cuda.build``) of ``kernel`` for ``target``."""
    from tilejit.backends.cuda import build
    from tilejit.frontend import compile_tile_ir
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return build(compile_tile_ir(kernel.fn, list(specs), dict(consts)), 4, target)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_the_calls_keep_the_kernels_results(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, 300).astype(np.float32)
    y = np.full(300, np.nan, np.float32)
    add_then_release[(3,)](x.copy(), 300, BLOCK=128)
    scale_after_wait[(3,)](x, y, 300, 1.5, BLOCK=128)
    np.testing.assert_allclose(y, x * 3.0, rtol=1e-6)


def _cuda(kernel, args, consts):
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return kernel.compile(specs, consts, 4, "cuda").artifact


def test_the_wait_comes_before_every_load_and_only_a_waiting_kernel_launches_dependently():
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    art = _cuda(scale_after_wait, (x, y, 256, 1.0), {"BLOCK": 128})
    lines = art.ptx.splitlines()
    wait = [i for i, line in enumerate(lines) if "griddepcontrol.wait;" in line]
    loads = [i for i, line in enumerate(lines) if re.search(r"\bld\.global", line)]
    assert len(wait) == 1 and loads and wait[0] < min(loads)
    assert art.dependent_launch
    release = _cuda(add_then_release, (x, 256), {"BLOCK": 128})
    assert "griddepcontrol.launch_dependents;" in release.ptx and "griddepcontrol.wait" not in release.ptx
    assert not release.dependent_launch            # it only lets the next kernel start early
    for a in (art, release):
        assemble_or_skip(a.ptx, "sm_90a")


def test_the_flag_survives_the_disk_cache():
    from tilejit.backends.cuda import CudaArtifact
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    art = _cuda(scale_after_wait, (x, y, 256, 1.0), {"BLOCK": 128})
    again = CudaArtifact.from_cache(art.files(), art.meta())
    assert again.dependent_launch is True
    meta = art.meta()
    del meta["dependent_launch"]                   # an entry an older tilejit wrote
    assert CudaArtifact.from_cache(art.files(), meta).dependent_launch is False


def test_sm_80_emits_nothing():
    from tilejit import simt
    x, y = np.ones(256, np.float32), np.zeros(256, np.float32)
    state = _build(scale_after_wait, (x, y, 256, 1.0), {"BLOCK": 128}, "sm_80")
    assert "griddepcontrol" not in state["ptx"]
    assert simt.waits_on_prior_kernels(state["simt_fn"])   # the op is kept; codegen drops it below sm_90
    assemble_or_skip(state["ptx"], "sm_80")


@pytest.mark.parametrize("where", ["for i in range(2):\n        tj.wait_prior_kernels()",
                                   "if n > 3:\n        tj.launch_dependents()"])
def test_a_call_in_a_loop_or_branch_is_refused_at_its_line(where):
    src = ("def k(x, n):\n"
           f"    {where}\n"
           "    tj.store(x, (0,), tj.load(x, (0,), (16,)))\n")
    with pytest.raises(tj.CompileError, match=r"must stand in the kernel's top level") as err:
        compile_source(src, [tj.specs.ArraySpec(tj.float32, 1), tj.specs.ScalarSpec(tj.int32)], {},
                       filename="grid_dep_src.py")
    assert "grid_dep_src.py:3" in str(err.value) and "'k'" in str(err.value)


def _copy_kernel(call):
    src = ("def k(x, y, BLOCK: tj.constexpr):\n"
           f"    {call}\n"
           "    offs = tj.program_id(0) * BLOCK\n"
           "    tj.store(y, (offs,), tj.load(x, (offs,), (BLOCK,)))\n")
    return compile_source(src, [tj.specs.ArraySpec(tj.float32, 1)] * 2, {"BLOCK": 1024}, filename="copy_src.py")


@pytest.mark.parametrize("call, coarsenable", [("pass", True), ("tj.wait_prior_kernels()", False),
                                               ("tj.launch_dependents()", False)])
def test_kernels_with_either_call_are_not_coarsened(call, coarsenable):
    """Coarsening moves the next programs' loads ahead: they could pass a wait."""
    from tilejit.backends.cuda import build
    from tilejit.passes import coarsen_programs
    simt_fn = build(_copy_kernel(call), 4, "sm_90a")["simt_fn"]
    assert coarsen_programs.coarsenable(simt_fn) is coarsenable


# --- the launch: cuLaunchKernelEx with the attribute, on a fake libcuda -----------------------
def test_the_ctypes_binding_launches_a_waiting_kernel_with_the_attribute():
    from types import SimpleNamespace
    from tilejit.runtime.launch import LaunchConfig, LibcudaLaunch
    from test_runtime import _fake_libcuda
    lib, calls = _fake_libcuda()
    seen = []

    def launch_ex(config, function, params, extra):
        c = ctypes.cast(config, ctypes.POINTER(LaunchConfig)).contents
        seen.append(((c.gridDimX, c.gridDimY, c.gridDimZ), (c.blockDimX, c.blockDimY, c.blockDimZ),
                     c.sharedMemBytes, c.hStream, c.numAttrs, c.attrs[0].id, c.attrs[0].value,
                     function.value, params.value, extra))
        return 0
    lib.cuLaunchKernelEx = launch_ex
    waiting = SimpleNamespace(function=0x1000, context=0x2000, shared_bytes=96, name="k", dependent_launch=True)
    plain = SimpleNamespace(function=0x1000, context=0x2000, shared_bytes=96, name="k2", dependent_launch=False)
    launch = LibcudaLaunch(lib)
    launch(waiting, (5, 2, 1), 128, 0x55, 0x7000)
    launch(plain, (5, 2, 1), 128, 0x55, 0x7000)
    assert seen == [((5, 2, 1), (128, 1, 1), 96, 0x55, 1, 6, 1, 0x1000, 0x7000, None)]
    assert [c[0] for c in calls] == ["get", "set", "get", "launch"]     # the plain kernel: cuLaunchKernel


# --- on the GPU: the waiting kernel sees everything the long kernel before it wrote -------------
@tj.kernel
def slow_fill(x, rounds, BLOCK: tj.constexpr):
    tj.launch_dependents()                  # the next kernel's CTAs may start at once
    offs = tj.program_id(0) * BLOCK
    acc = tj.zeros((BLOCK,), tj.float32)
    for _ in range(rounds):                 # long enough that an early reader would see zeros
        acc = acc * 0.5 + 1.0
    tj.store(x, (offs,), acc + tj.cast(tj.program_id(0), tj.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("binding", ["ctypes", "cuda-python"])
def test_a_waiting_kernel_sees_the_long_kernel_before_it(binding, monkeypatch):
    torch = pytest.importorskip("torch")
    from tilejit.runtime import launch
    monkeypatch.setattr(launch, "_driver_launch_impl", None)
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", binding)
    blocks, block = 264, 1024
    want = (2.0 - 0.5 ** 4000 * 2.0 + torch.arange(blocks, dtype=torch.float32, device="cuda")).repeat_interleave(block) * 3.0
    for _ in range(20):
        x = torch.zeros(blocks * block, device="cuda")
        y = torch.full_like(x, float("nan"))
        slow_fill[(blocks,)](x, 4000, BLOCK=block)
        scale_after_wait[(blocks,)](x, y, blocks * block, 1.5, BLOCK=block)
        torch.testing.assert_close(y, want)


@pytest.mark.gpu
def test_a_captured_cuda_graph_replays_the_dependent_launch():
    """Stream capture records the dependent launch as a programmatic edge (CUDA 12.3+); replays
    see the long kernel's writes, with new inputs each time."""
    torch = pytest.importorskip("torch")
    blocks, block = 132, 1024
    x = torch.zeros(blocks * block, device="cuda")
    y = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):                  # compile and load outside the capture
        slow_fill[(blocks,)](x, 2000, BLOCK=block)
        scale_after_wait[(blocks,)](x, y, blocks * block, 1.5, BLOCK=block)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        slow_fill[(blocks,)](x, 2000, BLOCK=block)
        scale_after_wait[(blocks,)](x, y, blocks * block, 1.5, BLOCK=block)
    want = (2.0 + torch.arange(blocks, dtype=torch.float32, device="cuda")).repeat_interleave(block) * 3.0
    for _ in range(5):
        x.zero_()
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, want)


# --- the emulator's check: nothing the last launch wrote is touched before the wait ------------
@tj.kernel
def read_before_wait(x, y, other, BLOCK: tj.constexpr, EARLY: tj.constexpr):
    offs = tj.program_id(0) * BLOCK
    if EARLY == 1:                          # the previous kernel's output, before the wait: a race
        t = tj.load(x, (offs,), (BLOCK,))
        tj.wait_prior_kernels()
    elif EARLY == 2:                        # an input that kernel did not write: fine
        t = tj.load(other, (offs,), (BLOCK,))
        tj.wait_prior_kernels()
        t = t + tj.load(x, (offs,), (BLOCK,))
    else:
        tj.wait_prior_kernels()
        t = tj.load(x, (offs,), (BLOCK,))
    tj.store(y, (offs,), t)


@pytest.mark.parametrize("early", [0, 1, 2])
def test_the_emulator_finds_a_read_of_the_previous_kernels_output_before_the_wait(early, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x, y, other = np.ones(256, np.float32), np.zeros(256, np.float32), np.ones(256, np.float32)
    add_then_release[(2,)](x, 256, BLOCK=128)                     # writes x
    if early == 1:
        with pytest.raises(tj.TilejitError, match=r"reads argument 'x' before tj.wait_prior_kernels\(\)") as err:
            read_before_wait[(2,)](x, y, other, BLOCK=128, EARLY=early)
        assert "read_before_wait" in str(err.value) and "t = tj.load(x" in str(err.value)
    else:
        read_before_wait[(2,)](x, y, other, BLOCK=128, EARLY=early)
        np.testing.assert_array_equal(y, 3.0 if early == 2 else 2.0)
    # an unrelated launch in between: its writes are what the next waiting kernel is checked against
    add_then_release[(2,)](other, 256, BLOCK=128)
    read_before_wait[(2,)](x, y, other, BLOCK=128, EARLY=1)


def test_the_check_forgets_arrays_that_are_gone(monkeypatch):
    """Memory may go to a new array once the one the last launch wrote is gone: not a race."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    memory = bytearray(1024)
    x = np.frombuffer(memory, np.float32)
    add_then_release[(2,)](x, 256, BLOCK=128)
    del x
    fresh, y = np.frombuffer(memory, np.float32), np.zeros(256, np.float32)     # the same addresses
    read_before_wait[(2,)](fresh, y, fresh, BLOCK=128, EARLY=1)
    np.testing.assert_array_equal(y, 1.0)


def test_a_launch_on_another_backend_in_between_ends_the_check(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x, y, other = np.ones(256, np.float32), np.zeros(256, np.float32), np.ones(256, np.float32)
    add_then_release[(2,)](x, 256, BLOCK=128)                     # emulated: writes x
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    add_then_release[(2,)](other, 256, BLOCK=128)                 # the last launch now
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    read_before_wait[(2,)](x, y, other, BLOCK=128, EARLY=1)
    np.testing.assert_array_equal(y, 2.0)
