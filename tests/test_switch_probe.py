"""benchmarks/switch_probe.py: module switches set before the probed script runs, and a cache
directory of the switches' own (the on-disk cache key does not see them), so an A/B never reads
the other side's kernels."""
import os
import runpy
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "benchmarks", "switch_probe.py")


def _probe():
    return runpy.run_path(PROBE, run_name="switch_probe")


def test_each_set_of_switches_has_its_own_cache_directory(tmp_path):
    cache_dir_for = _probe()["cache_dir_for"]
    a = cache_dir_for(["tilejit.passes.row_rings.DOT_LOOP_ROW_RINGS=True"], str(tmp_path))
    b = cache_dir_for(["tilejit.passes.row_rings.DOT_LOOP_ROW_RINGS=False"], str(tmp_path))
    assert a != b and os.path.dirname(a) == os.path.dirname(b) == str(tmp_path)
    # the same settings, spelled differently or in another order: the same directory
    two = ["tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=(640, 512)", "tilejit.codegen.nibbles.NIBBLE_PAIRS=True"]
    assert cache_dir_for(two, str(tmp_path)) == cache_dir_for(
        [two[1], "tilejit.passes.pipeline.DECODE_DOT_THREADS_PER_SM=(640,512)"], str(tmp_path))
    assert cache_dir_for([], str(tmp_path)) is None


def test_the_probed_script_sees_the_switch_and_the_cache_directory(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os\nfrom tilejit.passes import row_rings\n"
                      "print(row_rings.DOT_LOOP_ROW_RINGS, os.environ['TILEJIT_CACHE_DIR'])\n")
    env = dict(os.environ, PROBE_SCRIPT=str(script), TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    outs = []
    for value in ("True", "False"):
        run = subprocess.run([sys.executable, PROBE, f"tilejit.passes.row_rings.DOT_LOOP_ROW_RINGS={value}", "--"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        flag, cache = run.stdout.split()
        assert flag == value and cache.startswith(str(tmp_path / "cache") + os.sep)
        outs.append(cache)
    assert outs[0] != outs[1]
    bad = subprocess.run([sys.executable, PROBE, "tilejit.passes.row_rings.NO_SUCH_SWITCH=1", "--"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "has no NO_SUCH_SWITCH" in bad.stderr
