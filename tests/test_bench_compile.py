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
