"""``@tj.autotune`` on the CPU: the choice follows injected times, pruning (hook, compile
failures, resources through the cuda compiler), key semantics, on-disk results across
processes, corrupt results, ``TILEJIT_AUTOTUNE=0``, untimed CPU backends, inputs restored,
progress lines."""
import io
import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import tilejit as tj
from tilejit.autotune.tuner import Limits, resource_problem
from tilejit.errors import LaunchError

CONFIGS = [tj.Config(BLOCK=32, num_warps=1), tj.Config(BLOCK=64, num_warps=2), tj.Config(BLOCK=128, num_warps=4)]


@tj.kernel
def add_one(x, y, n, BLOCK: tj.constexpr, WIDTH: tj.constexpr = 0):
    i = tj.program_id(0) * BLOCK
    t = tj.load(x, (i,), (BLOCK,)) + 1
    if WIDTH:                                   # a config with WIDTH != BLOCK does not compile
        t = t + tj.zeros((WIDTH,), tj.float32)
    tj.store(y, (i,), t)


def grid(meta):
    return (tj.cdiv(meta["x"].shape[0], meta["BLOCK"]),)


class FakeTimer:
    """Times by config from a table; runs each config once so its effect can be checked."""

    def __init__(self, times):
        self.times, self.timed = times, []

    def __call__(self, fn, *, setup, warmup, rep, config):
        setup()
        fn()
        self.timed.append(config)
        return self.times[config]


@pytest.fixture(autouse=True)
def cpu_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEJIT_AUTOTUNE", raising=False)


def tuned(times=None, configs=CONFIGS, key=("n",), **options):
    timer = FakeTimer(times or {c: float(i + 1) for i, c in enumerate(configs)})
    return tj.autotune(configs=configs, key=list(key), timer=timer, **options)(add_one), timer


def inputs(n=100, dtype=np.float32):
    x = np.arange(n, dtype=dtype)
    return x, np.zeros_like(x)


def results_files(tmp_path):
    folder = tmp_path / "cache" / "autotune"
    return sorted(folder.iterdir()) if folder.exists() else []


# ------------------------------------------------------------------------------------- choosing
def test_picks_the_fastest_by_the_injected_times_then_reuses_it():
    times = {CONFIGS[0]: 3.0, CONFIGS[1]: 0.5, CONFIGS[2]: 2.0}
    kernel, timer = tuned(times)
    x, y = inputs()
    kernel[grid](x, y, 100)
    assert kernel.best_config == CONFIGS[1]
    assert kernel.timings == times and list(kernel.timings) == CONFIGS
    assert timer.timed == CONFIGS
    np.testing.assert_array_equal(y, x + 1)
    kernel[grid](x, y, 100)
    assert timer.timed == CONFIGS                # the same key: no second tuning


def test_key_is_scalar_values_array_shapes_and_every_dtype():
    kernel, timer = tuned(key=("n", "x"))
    x, y = inputs(100)
    kernel[grid](x, y, 100)
    kernel[grid](x + 5, y, 100)                  # same shape, other values: same key
    assert len(timer.timed) == 3
    kernel[grid](x, y, 7)                        # scalar n keys on its value
    assert len(timer.timed) == 6
    kernel[grid](*inputs(64), 7)                 # array x keys on its shape
    assert len(timer.timed) == 9
    kernel[grid](*inputs(64, np.float16), 7)     # dtypes always count, even of arrays not in key
    assert len(timer.timed) == 12
    kernel[grid](*inputs(64, np.float16), 7, WIDTH=0)    # a constexpr passed at launch counts too
    assert len(timer.timed) == 15
    only_n, timer = tuned(key=("n",))
    only_n[grid](*inputs(100), 5)
    only_n[grid](*inputs(64), 5)                 # x is not in the key: its shape does not count
    assert len(timer.timed) == 3


# -------------------------------------------------------------------------------------- pruning
def test_prune_hook_and_compile_failures_drop_configs_with_one_line_reasons():
    failing = tj.Config(BLOCK=32, WIDTH=16, num_warps=1)
    seen = []

    def prune(configs, named):
        seen.append(sorted(named))
        return [c for c in configs if c.constexprs["BLOCK"] != 128]
    kernel, timer = tuned(configs=CONFIGS + [failing], prune=prune)
    x, y = inputs()
    kernel[grid](x, y, 100)
    assert seen == [["n", "x", "y"]]         # the arguments, not the configs' constexprs
    assert timer.timed == CONFIGS[:2]
    reasons = kernel.timings
    assert reasons[CONFIGS[2]] == "removed by the prune hook"
    assert reasons[failing].startswith("does not compile:") and "\n" not in reasons[failing]
    assert kernel.best_config == CONFIGS[0]
    np.testing.assert_array_equal(y, x + 1)


def test_no_runnable_config_is_a_launch_error_naming_each_reason():
    kernel, _ = tuned(prune=lambda configs, named: [])
    with pytest.raises(LaunchError, match="no config of 'add_one' can run") as info:
        kernel[grid](*inputs(), 100)
    assert str(info.value).count("removed by the prune hook") == 3


def test_a_prune_hook_cannot_invent_configs():
    kernel, _ = tuned(prune=lambda configs, named: [tj.Config(BLOCK=16)])
    with pytest.raises(LaunchError, match="not one of the configs"):
        kernel[grid](*inputs(), 100)


@tj.kernel
def transpose(x, y, R: tj.constexpr, C: tj.constexpr):
    tj.store(y, (0, 0), tj.trans(tj.load(x, (0, 0), (R, C))))      # converts through shared memory


@tj.kernel
def column_sum(x, y, R: tj.constexpr, C: tj.constexpr):
    tj.store(y, (0,), tj.sum(tj.load(x, (0, 0), (R, C)), axis=0))


def test_cuda_compiler_drops_a_config_over_the_shared_memory_limit():
    small, huge = tj.Config(R=32, C=32, num_warps=4), tj.Config(R=256, C=256, num_warps=32)
    kernel = tj.autotune(configs=[small, huge], key=["x"])(transpose)
    x = np.zeros((8, 8), np.float32)
    kept, dropped = kernel.viable_configs(x, x.copy(), backend="cuda")      # no GPU needed
    assert kept == [small]
    assert "262144 bytes of shared memory" in dropped[huge] and "\n" not in dropped[huge]


def test_spilling_configs_are_dropped_only_when_another_config_does_not_spill():
    clean, spilling = tj.Config(R=64, C=64, num_warps=4), tj.Config(R=256, C=256, num_warps=32)
    x, y = np.zeros((8, 8), np.float32), np.zeros(8, np.float32)
    both = tj.autotune(configs=[clean, spilling], key=["x"])(column_sum)
    kept, dropped = both.viable_configs(x, y, backend="cuda")
    assert kept == [clean] and dropped[spilling].startswith("spills ")
    alone = tj.autotune(configs=[spilling], key=["x"])(column_sum)
    assert alone.viable_configs(x, y, backend="cuda") == ([spilling], {})


def test_resource_limits_per_cta():
    limits = Limits(shared_bytes=1000, registers=65536)
    art = types.SimpleNamespace(shared_bytes=1000, registers=64, spills=0)
    assert resource_problem(art, 32, limits) is None                      # 64 x 1024 fits exactly
    assert "65 registers x 1024 threads" in resource_problem(types.SimpleNamespace(registers=65), 32, limits)
    assert "1001 bytes of shared memory" in resource_problem(types.SimpleNamespace(shared_bytes=1001), 1, limits)
    assert resource_problem(types.SimpleNamespace(shared_bytes=10**9), 1, None) is None   # CPU backends


# ---------------------------------------------------------------------------------- persistence
SCRIPT = textwrap.dedent("""
    import numpy as np, tilejit as tj
    from tests.test_autotune import CONFIGS, FakeTimer, add_one, grid
    timer = FakeTimer({CONFIGS[0]: 2.0, CONFIGS[1]: 3.0, CONFIGS[2]: 1.0})
    kernel = tj.autotune(configs=CONFIGS, key=["n"], timer=timer)(add_one)
    x = np.arange(50, dtype=np.float32); y = np.zeros_like(x)
    kernel[grid](x, y, 50)
    assert (y == x + 1).all()
    print(len(timer.timed), kernel.best_config.label())
""")


def test_results_persist_across_processes(tmp_path):
    env = {**os.environ, "TILEJIT_CACHE_DIR": str(tmp_path / "cache"), "TILEJIT_BACKEND": "interpret"}
    env.pop("CI", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[0].stdout.split() == ["3", "BLOCK=128", "num_warps=4"]
    assert runs[1].stdout.split() == ["0", "BLOCK=128", "num_warps=4"]      # read back, not timed
    assert len(results_files(tmp_path)) == 1


@pytest.mark.parametrize("damage", ["truncate", "edit", "garbage"])
def test_a_corrupt_results_file_is_ignored_with_a_warning_and_retuned(tmp_path, damage):
    times = {CONFIGS[0]: 3.0, CONFIGS[1]: 0.5, CONFIGS[2]: 2.0}
    first, _ = tuned(times)
    first[grid](*inputs(), 100)
    path, = results_files(tmp_path)
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "edit":
        record = json.loads(text)
        record["body"]["best"] = 2
        path.write_text(json.dumps(record))
    else:
        path.write_bytes(b"\x00\xff not json")
    second, timer = tuned(times)
    with pytest.warns(UserWarning, match="corrupt autotune results"):
        second[grid](*inputs(), 100)
    assert timer.timed == CONFIGS and second.best_config == CONFIGS[1]
    third, timer = tuned(times)
    third[grid](*inputs(), 100)                                  # rewritten: valid again
    assert timer.timed == [] and third.best_config == CONFIGS[1]


def test_autotune_off_uses_the_cached_config_else_the_first_untimed(monkeypatch):
    monkeypatch.setenv("TILEJIT_AUTOTUNE", "0")
    kernel, timer = tuned(prune=lambda configs, named: configs[1:])
    x, y = inputs()
    kernel[grid](x, y, 100)
    assert timer.timed == [] and kernel.best_config == CONFIGS[1] and kernel.timings == {}
    np.testing.assert_array_equal(y, x + 1)
    monkeypatch.delenv("TILEJIT_AUTOTUNE")
    tuned({CONFIGS[0]: 3.0, CONFIGS[1]: 2.0, CONFIGS[2]: 1.0})[0][grid](x, y, 100)    # writes the file
    monkeypatch.setenv("TILEJIT_AUTOTUNE", "0")
    kernel, timer = tuned()
    kernel[grid](x, y, 100)
    assert timer.timed == [] and kernel.best_config == CONFIGS[2]


def test_cpu_backends_run_untimed_with_the_cached_or_first_config(tmp_path, monkeypatch):
    for backend in ("interpret", "emulate"):
        monkeypatch.setenv("TILEJIT_BACKEND", backend)
        kernel = tj.autotune(configs=CONFIGS[::-1], key=["n"])(add_one)     # no timer injected
        x, y = inputs(40)
        kernel[grid](x, y, 40)
        assert kernel.best_config == CONFIGS[2] and kernel.timings == {}
        np.testing.assert_array_equal(y, x + 1)
    assert results_files(tmp_path) == []
    tuned({CONFIGS[0]: 3.0, CONFIGS[1]: 1.0, CONFIGS[2]: 2.0}, configs=CONFIGS[::-1])[0][grid](*inputs(40), 40)
    kernel = tj.autotune(configs=CONFIGS[::-1], key=["n"])(add_one)
    kernel[grid](*inputs(40), 40)
    assert kernel.best_config == CONFIGS[1]                        # the emulate result on file


# ----------------------------------------------------------------------- kernels writing inputs
@tj.kernel
def accumulate(x, total, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    tj.store(x, (i,), tj.load(x, (i,), (BLOCK,)) * 2)             # overwrites its input
    tj.store(total, (i,), tj.load(total, (i,), (BLOCK,)) + 1)


def test_restore_and_reset_arrays_around_each_timed_run():
    seen = []

    def timer(fn, *, setup, warmup, rep, config):
        for _ in range(2):
            setup()
            seen.append((x.copy(), total.copy()))
            fn()
        return float(config.constexprs["BLOCK"])
    configs = [tj.Config(BLOCK=16), tj.Config(BLOCK=32)]
    kernel = tj.autotune(configs=configs, key=["x"], restore=["x"], reset=["total"], timer=timer)(accumulate)
    x, total = np.arange(64, dtype=np.float32), np.full(64, 7, np.float32)
    kernel[lambda meta: (64 // meta["BLOCK"],)](x, total)
    for before_x, before_total in seen:
        np.testing.assert_array_equal(before_x, np.arange(64))    # restored before every run
        assert not before_total.any()                             # zeroed before every run
    np.testing.assert_array_equal(x, np.arange(64) * 2)           # the real launch ran once
    np.testing.assert_array_equal(total, np.full(64, 8))


# --------------------------------------------------------------------------- progress and errors
class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_and_quiet_in_ci(monkeypatch):
    failing = tj.Config(BLOCK=32, WIDTH=16, num_warps=1)
    monkeypatch.delenv("CI", raising=False)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    kernel, _ = tuned({CONFIGS[0]: 2.0, CONFIGS[1]: 1.0, CONFIGS[2]: 3.0}, configs=CONFIGS + [failing])
    kernel[grid](*inputs(), 100)
    text = terminal.getvalue()
    assert "config 1/3 (2 left) BLOCK=32 num_warps=1" in text
    assert "config 3/3 (0 left) BLOCK=128 num_warps=4; best 1.0000 ms (BLOCK=64 num_warps=2)" in text
    assert "BLOCK=64 num_warps=2 at 1.0000 ms (3 timed, 1 dropped)" in text
    assert "dropped BLOCK=32 WIDTH=16 num_warps=1: does not compile" in text
    monkeypatch.setenv("CI", "1")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    tuned()[0][grid](*inputs(), 100)
    assert terminal.getvalue() == ""


def test_launch_and_decoration_mistakes():
    kernel, _ = tuned()
    with pytest.raises(LaunchError, match="'num_warps' is chosen by tj.autotune"):
        kernel[grid](*inputs(), 100, num_warps=4)
    with pytest.raises(LaunchError, match="'BLOCK' is chosen by tj.autotune"):
        kernel[grid](*inputs(), 100, BLOCK=64)
    with pytest.raises(LaunchError, match="missing argument 'n'") as info:
        kernel[grid](*inputs())
    assert info.value.loc.file == __file__                      # points at the user's launch
    kernel[grid](*inputs(), 100)
    with pytest.raises(LaunchError, match="grid dimension 0 is 0") as info:
        kernel[(0,)](*inputs(), 100)                            # a key seen before: the kernel's check
    assert info.value.loc.file == __file__ and info.traceback[-1].path.name == "test_autotune.py"
    with pytest.raises(LaunchError, match="did you mean 'n'"):
        tj.autotune(configs=CONFIGS, key=["nn"])(add_one)
    with pytest.raises(LaunchError, match="not a tj.constexpr"):
        tj.autotune(configs=[tj.Config(n=3)], key=["n"])(add_one)
    with pytest.raises(LaunchError, match="num_warps"):
        tj.Config(num_warps=3)
    with pytest.raises(LaunchError, match="goes above @tj.kernel"):
        tj.autotune(configs=CONFIGS, key=["n"])(lambda x: x)


def test_a_config_space_is_the_product_of_its_options_in_order():
    space = tj.Config.space(BM=[64, 128], BK=32, num_stages=[2, 3, 4])
    assert len(space) == 6 and space[0] == tj.Config(BM=64, BK=32, num_stages=2)
    assert space[1] == tj.Config(BM=64, BK=32, num_stages=3) and space[-1] == tj.Config(BM=128, BK=32, num_stages=4)
    assert all(c.num_warps == 4 for c in space)
    wg = tj.Config.space(BM=[64, 128], num_warps=[4, 8], where=lambda BM, num_warps: BM == 16 * num_warps)
    assert wg == [tj.Config(BM=64, num_warps=4), tj.Config(BM=128, num_warps=8)]
    assert tj.Config.space(SHAPE=(2, 3)) == [tj.Config(SHAPE=(2, 3))]          # a tuple is one value
    assert tj.Config.space(BM=[64, 64]) == [tj.Config(BM=64)]                   # duplicates once


def test_a_bad_config_space_says_what_is_wrong():
    with pytest.raises(TypeError, match="'BM' has no choices"):
        tj.Config.space(BM=[])
    with pytest.raises(TypeError, match="no combination"):
        tj.Config.space(BM=[64], where=lambda BM: False)
    with pytest.raises(tj.LaunchError, match="num_warps"):
        tj.Config.space(num_warps=[4, 3])


def test_fast_math_is_a_config_field_and_a_launch_option_of_a_tuned_kernel(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    fast, plain = tj.Config(BLOCK=8, fast_math=True), tj.Config(BLOCK=8)
    assert fast != plain and "fast_math=True" in fast.label() and fast.launch_options({})["fast_math"] is True
    assert "fast_math" not in plain.launch_options({})
    x = np.arange(16, dtype=np.float32)
    for configs, launch_options in (([fast], {}), ([plain], {"fast_math": True})):
        kernel = tj.autotune(configs=configs, key=["x"])(add_one)
        out = np.zeros_like(x)
        kernel[(2,)](x, out, 16, **launch_options)
        np.testing.assert_array_equal(out, x + 1)
    with pytest.raises(tj.LaunchError, match="fast_math"):
        tj.Config(fast_math="yes")
