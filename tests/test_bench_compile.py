"""``benchmarks/bench_compile.py --stages``: each stage of a cold compile timed in a new process
(the hooks wrap the functions the cuda backend calls, so a renamed stage fails here)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


def test_stage_hooks_time_every_stage_of_a_cold_compile(tmp_path, monkeypatch):
    import numpy as np
    import bench_compile
    import tilejit as tj
    from tilejit.codegen import ptxas
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    for stage, module_name, attr in bench_compile.STAGE_HOOKS:     # restored after the test
        owner = __import__(module_name, fromlist=["_"])
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if isinstance(owner, dict):
            monkeypatch.setitem(owner, name, owner[name])
        else:
            monkeypatch.setattr(owner, name, getattr(owner, name))
    spent = bench_compile._time_stages()

    @tj.kernel
    def double(x, y, BLOCK: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)) * 2)
    x = np.ones(256, np.float32)
    specs, consts, _ = double.specialise(double.bind((x, np.empty_like(x)), {"BLOCK": 128}))
    double.compile(specs, consts, 4, "cuda")
    expected = {"frontend", "passes", "LLVM IR", "O3", "ptx"} | ({"nvJitLink"} if ptxas.available() else set())
    assert expected <= set(spent), spent
    assert all(ms > 0 for ms in spent.values()) and spent["ptx"] >= spent["O3"], spent


def test_measured_processes_cache_bytecode_and_cold_ones_start_without_the_jit_cache(tmp_path, monkeypatch):
    """A host that sets PYTHONDONTWRITEBYTECODE (the GPU host does) would time compiling
    tilejit's sources in every process, and the CUDA JIT cache would serve a cold process the
    warm-up process's assembly of the same kernel."""
    import bench_compile
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("CUDA_CACHE_DISABLE", raising=False)
    cold = bench_compile.child_env("cold", "gpu", str(tmp_path / "cold0"))
    hit = bench_compile.child_env("hit", "gpu", str(tmp_path / "cold0"))
    for env in (cold, hit):
        assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
        assert env["TILEJIT_CACHE_DIR"] == str(tmp_path / "cold0") and env["TILEJIT_BACKEND"] == "cuda"
    assert cold["CUDA_CACHE_DISABLE"] == "1" and "CUDA_CACHE_DISABLE" not in hit
    kept = bench_compile.child_env("cold", "cpu", str(tmp_path / "cold1"), keep_jit_cache=True)
    assert "CUDA_CACHE_DISABLE" not in kept


def test_switches_set_reach_every_measured_process(tmp_path):
    """``--set MODULE.NAME=VALUE`` (e.g. the LLVM level of #17's cold compile) is applied in each
    new process before it compiles; an unknown name fails the process, naming it."""
    import bench_compile
    import pytest
    args = bench_compile.parse_args(["--mode", "cpu", "--set", "tilejit.codegen.llvm.IR_OPT=1", "--cols", "64"])
    result = bench_compile.run_child("cold", "cpu", str(tmp_path / "cold"), args)
    assert result["cache_ok"] and "tilejit.codegen.llvm.IR_OPT=1" in result["switches"], result
    plain = bench_compile.run_child("cold", "cpu", str(tmp_path / "plain"), bench_compile.parse_args(["--mode", "cpu", "--cols", "64"]))
    assert plain["switches"] == []
    args.set = ["tilejit.codegen.llvm.NO_SUCH_SWITCH=1"]
    with pytest.raises(RuntimeError, match="NO_SUCH_SWITCH"):
        bench_compile.run_child("cold", "cpu", str(tmp_path / "bad"), args)
