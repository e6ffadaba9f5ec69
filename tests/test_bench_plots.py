"""``benchmarks/bench_sweep.py``'s plot from measured rows (synthetic here: the plot, not the
GPU, is under test): one panel per row kernel and dtype, then GEMM by size and attention by
sequence length when given.  Needs matplotlib (the ``[bench]`` extra)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


def _rows():
    rows = [{"kernel": k, "dtype": "bfloat16", "cols": c, "vs_copy": 0.9, "torch_vs_copy": 0.5,
             "triton_vs_copy": 0.7} for k in ("softmax", "rmsnorm") for c in (1024, 4096)]
    gemm = [{"shape": f"{n}x{n}x{n}", "vs_cublas": 0.95, "triton": 600.0, "cublas": 760.0} for n in (1024, 4096)]
    attention = [{"seq": s, "causal": c, "vs_cudnn": 0.7, "flash": 350.0, "cudnn": 600.0}
                 for s in (1024, 4096) for c in (False, True)]
    return rows, gemm, attention


@pytest.mark.parametrize("extras, panels", [((), 2), (("gemm",), 3), (("gemm", "attention"), 4), (("attention",), 3)])
def test_the_sweep_plot_has_a_panel_per_measurement(tmp_path, extras, panels):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread
    import bench_sweep
    rows, gemm, attention = _rows()
    path = tmp_path / "sweep.png"
    bench_sweep.plot(rows, str(path), gemm if "gemm" in extras else (), attention if "attention" in extras else ())
    height, width = imread(str(path)).shape[:2]
    assert (width, height) == (400 * panels, 350)          # 4 x 3.5 inches a panel at 100 dpi
