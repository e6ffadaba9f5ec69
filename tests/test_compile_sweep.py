"""``scripts/compile_sweep.py``: example kernels compiled for sm_90a from their own ``run``
functions with a backend that builds and launches nothing (a few of its cases here; the whole
sweep takes about a minute)."""
import importlib.util
import os

import pytest

from tilejit.codegen import ptxas

HERE = os.path.dirname(os.path.abspath(__file__))


def isolate(monkeypatch, tmp_path):
    """What ``main`` changes (the environment, the backend table) is put back after the test."""
    from tilejit import backends
    monkeypatch.setitem(backends.PROVIDERS, "sweep", ())
    monkeypatch.setitem(backends._registry, "sweep", None)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))


def sweep():
    spec = importlib.util.spec_from_file_location("compile_sweep", os.path.join(HERE, "..", "scripts", "compile_sweep.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not ptxas.available(), reason="needs nvJitLink to assemble")
def test_the_sweep_builds_its_cases_and_reports_each(monkeypatch, capsys, tmp_path):
    isolate(monkeypatch, tmp_path)
    mod = sweep()
    assert mod.main(["fp8 attention D128 128x128 w8", "w4a16 M1 16x64x128 w4 split 8"]) == 0
    out = capsys.readouterr().out.splitlines()
    built = [x for x in out if x.startswith("ok ")]
    assert len(built) == 2 and out[-1] == "0 failed"
    assert "fp8_attention_kernel 255 regs" in built[0] and "w4a16_matmul_kernel" in built[1]


def test_a_launch_that_raises_is_a_failure(monkeypatch, capsys, tmp_path):
    """Anything but a refused (too big) config counts as a failure, and main says so."""
    isolate(monkeypatch, tmp_path)
    mod = sweep()

    def broken():
        raise ValueError("wgmma .e4m3 reads both operands K-major from shared memory")
    monkeypatch.setattr(mod, "cases", lambda: iter([("broken case", broken)]))
    assert mod.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED  broken case: ValueError" in out and out.rstrip().endswith("1 failed")


@pytest.mark.skipif(not ptxas.available(), reason="needs nvJitLink to assemble")
def test_every_case_builds_for_sm_90a(monkeypatch, capsys, tmp_path):
    """The whole sweep (about a minute): every example at its benchmark and autotuner configs
    builds for sm_90a, or is refused cleanly as too big.  Session 21's computed-B wgmma broke
    three float8 attention tiles' build for a session before anyone launched them."""
    isolate(monkeypatch, tmp_path)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # (spill warnings: the sweep lists the spills)
        assert sweep().main([]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "0 failed" and sum(x.startswith("ok ") for x in out) >= 100


@pytest.mark.skipif(not ptxas.available(), reason="needs nvJitLink to assemble")
def test_the_sm_80_cases_build(monkeypatch, capsys, tmp_path):
    """A part of the sweep for sm_80 (mma.sync and cp.async everywhere): bfloat16 GEMM tiles
    (the ones past sm_80's shared memory are refused cleanly), causal D128 attention, W4A16 at 16
    rows, decode, the attention backward at D64, split-K, MoE and the row kernels."""
    isolate(monkeypatch, tmp_path)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sweep().main(["--arch", "sm_80", "matmul bfloat16", "attention D128 causal", "w4a16 M16", "decode",
                             "backward D64", "split-K", "moe", "softmax", "layernorm", "rmsnorm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "0 failed" and sum(x.startswith("ok ") for x in out) >= 30
    assert any(x.startswith("refused matmul bfloat16 128x256x64") for x in out)


@pytest.mark.skipif(not ptxas.available(), reason="needs nvJitLink to assemble")
def test_the_paired_kernels_build_for_sm_90a(monkeypatch, capsys, tmp_path):
    """With TMA multicast and elected releases on (``--set``), the kernels they change build:
    fp8 blockwise with (N, K) weights and full attention paired; the sweep's attention backward
    (causal: each key block's loop starts at its diagonal) and float8 attention (no TMA loop) not."""
    from tilejit.passes import multicast, specialise_warps
    isolate(monkeypatch, tmp_path)
    monkeypatch.setattr(multicast, "MULTICAST", False)              # put back after --set
    monkeypatch.setattr(specialise_warps, "ELECT_RELEASES", False)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sweep().main(["--set", "tilejit.passes.multicast.MULTICAST=True",
                             "--set", "tilejit.passes.specialise_warps.ELECT_RELEASES=True",
                             "fp8 blockwise (N, K) 128x128x128", "attention D128 128x128 w8",
                             "backward D128"]) == 0
    assert multicast.MULTICAST and specialise_warps.ELECT_RELEASES
    out = capsys.readouterr().out.splitlines()
    built = [x for x in out if x.startswith("ok ")]
    assert out[-1] == "0 failed" and len(built) >= 3
    paired = {x.split(":")[0][2:].strip(): x.endswith(")") and " paired (" in x for x in built}
    assert paired.pop("attention D128 128x128 w8") and paired.pop("fp8 blockwise (N, K) 128x128x128 w8")
    assert len(paired) >= 4 and not any(paired.values())
