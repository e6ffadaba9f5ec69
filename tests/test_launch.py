"""The launch path: argument binding, specialisation, grid checks, backend selection and the
errors users see (raised before anything runs, naming the kernel, no tilejit frames)."""
import os
import traceback

import numpy as np
import pytest

import tilejit as tj
from tilejit import backends, cli, dtypes
from tilejit.kernel import classify_argument, normalise_grid
from tilejit.specs import ArraySpec, ScalarSpec

PACKAGE_DIR = os.path.dirname(os.path.abspath(tj.__file__))
EXAMPLES = os.path.join(os.path.dirname(PACKAGE_DIR), "examples")


@tj.kernel
def fill(out, value, BLOCK: tj.constexpr = 8):
    i = tj.program_id(0) * BLOCK
    tj.store(out, (i,), tj.full((BLOCK,), value, out.dtype))


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")


def launch_error(launch, *match):
    """Run ``launch``; assert it raises a LaunchError naming ``fill`` and pointing at the launch
    line (the last traceback frame), and that the output array was not touched."""
    out = np.zeros(16, np.float32)
    with pytest.raises(tj.LaunchError) as info:
        launch(out)
    text = str(info.value)
    assert "'fill'" in text
    for m in match:
        assert m in text, text
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.filename == __file__ and "lambda out: fill" in last.line, last
    assert f"test_launch.py:{last.lineno}:" in text and "^" in text
    assert not out.any()
    return text


def test_launch_runs_and_binds_keywords_and_defaults():
    out = np.zeros(20, np.float32)
    fill[3](out, 2.5)
    assert (out == 2.5).all()
    fill[(2,)](value=1, out=out, BLOCK=4)
    assert (out[:8] == 1).all() and (out[8:] == 2.5).all()


@pytest.mark.parametrize("launch, match", [
    (lambda out: fill[1](out), ["missing argument 'value'"]),
    (lambda out: fill[1](out, 1.0, 8, 9), ["takes 3 positional arguments", "4 were given"]),
    (lambda out: fill[1](out, 1.0, BLOK=8), ["unexpected argument 'BLOK'", "did you mean 'BLOCK'"]),
    (lambda out: fill[1](out, 1.0, out=out), ["'out' was given twice"]),
    (lambda out: fill[1]([0.0] * 16, 1.0), ["argument 'out' must be an array or a scalar, got list"]),
    (lambda out: fill[1](out, "1.0"), ["argument 'value' must be an array or a scalar, got str"]),
    (lambda out: fill[1](out, 1.0, BLOCK=np.zeros(2)), ["constexpr parameter 'BLOCK'", "ndarray"]),
    (lambda out: fill[1](np.zeros(16, np.complex64), 1.0), ["dtype complex64", "not support"]),
    (lambda out: fill[1](out, 2**70), ["does not fit in int64"]),
    (lambda out: fill[1](out, 1.0, num_warps=3), ["num_warps"]),
    (lambda out: fill(out, 1.0), ["fill[grid]"]),
])
def test_bad_arguments_are_launch_errors(launch, match):
    launch_error(launch, *match)


@pytest.mark.parametrize("grid", [0, -1, (), (1, 2, 3, 4), 1.5, "2", (2, 0), (True,), [1, None],
                                  (2**31,), (1, 65536), lambda args: 0])
def test_bad_grids_are_launch_errors(grid):
    text = launch_error(lambda out: fill[grid](out, 1.0), "grid")
    assert "between 1 and" in text or "1 to 3 positive ints" in text


def test_grid_forms_and_callable_sees_all_arguments():
    assert normalise_grid(5) == (5, 1, 1)
    assert normalise_grid((2, np.int64(3))) == (2, 3, 1)
    assert normalise_grid([1, 2, 3]) == (1, 2, 3)
    seen = {}
    out = np.zeros(12, np.float32)

    def grid(args):
        seen.update(args)
        return (tj.cdiv(args["out"].shape[0], args["BLOCK"]),)
    fill[grid](out, 3.0, BLOCK=4)
    assert set(seen) == {"out", "value", "BLOCK"} and seen["BLOCK"] == 4
    assert (out == 3).all()


@pytest.mark.parametrize("value, dtype", [
    (3, dtypes.int32), (2**31, dtypes.int64), (-2**31, dtypes.int32), (1.5, dtypes.float32),
    (True, dtypes.bool_), (np.float16(1), dtypes.float16), (np.int8(3), dtypes.int8),
    (np.uint32(3), dtypes.uint32), (np.float64(2.0), dtypes.float32), (np.bool_(False), dtypes.bool_),
])
def test_scalar_specs(value, dtype):
    spec, launch_value = classify_argument("x", value)
    assert spec == ScalarSpec(dtype, dtype.is_float)            # positive floats: ScalarSpec.positive
    assert np.asarray(launch_value).dtype == dtype.np


def test_array_specs_record_layout():
    a = np.zeros((8, 16), np.float32)
    assert classify_argument("a", a)[0] == ArraySpec(dtypes.float32, 2, True, True, False)
    assert classify_argument("a", a[:, ::2])[0].unit_inner_stride is False
    assert classify_argument("a", a[:, 1:])[0].aligned16 is False
    assert classify_argument("a", a[:, 4:])[0].aligned16 is True
    assert classify_argument("a", np.zeros((3, 5), np.float16))[0].aligned16 is False   # 10-byte rows
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (2**31,), (0,))
    assert classify_argument("a", big)[0].large is True


def test_new_shape_reuses_compilation_and_new_dtype_does_not():
    @tj.kernel
    def copy(x, y, BLOCK: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        tj.store(y, (i,), tj.load(x, (i,), (BLOCK,)))
    for n in (5, 17, 100):
        x = np.arange(n, dtype=np.float32)
        y = np.zeros_like(x)
        copy[tj.cdiv(n, 16)](x, y, BLOCK=16)
        np.testing.assert_array_equal(x, y)
    assert len(copy._cache) == 1
    copy[1](np.ones(4, np.int16), np.zeros(4, np.int16), BLOCK=16)
    copy[1](np.ones(4, np.int16), np.zeros(4, np.int16), BLOCK=8)
    assert len(copy._cache) == 3


def test_a_provider_that_fails_to_import_is_a_real_error(monkeypatch, tmp_path):
    """Only a missing provider module means "not here"; an ImportError inside one surfaces."""
    (tmp_path / "tj_broken_provider.py").write_text("import tj_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backends.PROVIDERS, "broken", ("tj_broken_provider",))
    with pytest.raises(ModuleNotFoundError, match="tj_no_such_dependency"):
        backends.get("broken")


def test_backend_selection(monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_BACKEND", "bogus")
    with pytest.raises(tj.LaunchError, match="not a backend"):
        backends.selected()
    monkeypatch.setitem(backends.PROVIDERS, "fake", ("tilejit.no_such_module",))
    with pytest.raises(tj.LaunchError, match="backend 'fake' has no provider here"):
        backends.get("fake")
    monkeypatch.delenv("TILEJIT_BACKEND")
    monkeypatch.setattr(backends, "_notice_printed", False)
    if backends._usable("cuda"):
        pytest.skip("a CUDA device is present")
    first, second = backends.selected(), backends.selected()
    assert first == second and first in ("emulate", "interpret")
    assert capsys.readouterr().err.count("no CUDA device") == 1


def test_inspect_gives_the_tile_ir_without_running():
    out = np.zeros(16, np.float32)
    found = fill.inspect(out, 1.0, BLOCK=16)
    assert found.tile_ir.startswith("func @fill(") and "store" in found.tile_ir
    assert "tile<16xfloat32>" in found.tile_ir
    assert not out.any()


def test_compile_error_points_at_the_kernel_line():
    @tj.kernel
    def bad(x):
        print(x)                                  # unsupported inside a kernel
    line = bad.fn.__code__.co_firstlineno + 2
    with pytest.raises(tj.CompileError) as info:
        bad[1](np.zeros(4, np.float32))
    assert "'bad'" in str(info.value)
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.lineno) == (__file__, line)


def test_cli_compile_prints_the_tile_stage(capsys):
    path = os.path.join(EXAMPLES, "softmax.py")
    rc = cli.main(["compile", f"{path}::softmax_kernel", "--sig", "f32[2], f32[2]", "--const", "BLOCK=64"])
    assert rc == 0 and "tile<1x64xfloat32>" in capsys.readouterr().out
    assert cli.main(["compile", f"{path}::softmax_kernel", "--sig", "f32[2]", "--const", "BLOCK=64"]) == 1
    assert "runtime parameters" in capsys.readouterr().err
    assert cli.main(["compile", f"{path}::softmax_kernel", "--sig", "f32[2], f32[2]"]) == 1
    assert "--const BLOCK=VALUE" in capsys.readouterr().err
    assert cli.parse_signature("bf16[3], int64, float8e4m3[1]") == [
        ArraySpec(dtypes.bfloat16, 3), ScalarSpec(dtypes.int64), ArraySpec(dtypes.float8e4m3, 1)]
    assert cli.parse_const("D=tj.float16") == ("D", dtypes.float16)
    assert cli.parse_const("CAUSAL=True") == ("CAUSAL", True)


def test_cli_compile_uses_the_launchs_warps_unless_told(capsys):
    """Without --num-warps the pass dumps show what a launch without num_warps compiles."""
    path = os.path.join(EXAMPLES, "softmax.py")
    base = ["compile", f"{path}::softmax_kernel", "--sig", "bf16[2], bf16[2]", "--const", "BLOCK=8192",
            "--emit", "insert_barriers"]
    assert cli.main(base) == 0 and "num_warps=8 " in capsys.readouterr().out
    assert cli.main(base + ["--num-warps", "4"]) == 0 and "num_warps=4 " in capsys.readouterr().out


def test_cli_compile_sets_compiler_switches(capsys, monkeypatch):
    """``--set MODULE.NAME=VALUE`` turns a switch before the compile: W4A16 at 64 rows carries its
    packed weights one iteration ahead (``prefetch_loads.WGMMA_DEQUANTISED``) unless it is off."""
    from tilejit.passes import prefetch_loads
    monkeypatch.setattr(prefetch_loads, "WGMMA_DEQUANTISED", True)       # restored after the test
    base = ["compile", f"{os.path.join(EXAMPLES, 'w4a16_gemm.py')}::w4a16_matmul_kernel",
            "--sig", "bf16[2],u8[4],bf16[2],bf16[2],bf16[2],f32[3],i32[1]", "--num-warps", "4",
            "--emit", "prefetch_loads"] + [a for c in ("BM=64", "BN=128", "BK=128", "GROUP=128", "TILED=True")
                                           for a in ("--const", c)]

    def carried() -> bool:                       # the K loop carries a tile of packed bytes
        loop = next(line for line in capsys.readouterr().out.splitlines() if " = for " in line)
        return "xuint8>" in loop.partition(" : ")[2]
    assert cli.main(base) == 0 and carried()
    assert cli.main(base + ["--set", "prefetch_loads.WGMMA_DEQUANTISED=False"]) == 0
    assert not carried() and prefetch_loads.WGMMA_DEQUANTISED is False
    assert cli.parse_switch("tilejit.passes.prefetch_loads.PREFETCH_AHEAD=2") == (
        "tilejit.passes.prefetch_loads.PREFETCH_AHEAD", 2)
    for bad, says in (("prefetch_loads.NOPE=1", "naming a compiler switch"), ("PREFETCH_AHEAD", "MODULE.NAME=VALUE"),
                      ("prefetch_loads.PREFETCH_AHEAD=two", "takes a int"),
                      ("prefetch_loads.WGMMA_DEQUANTISED=1", "takes a bool")):
        assert cli.main(base + ["--set", bad]) == 1 and says in capsys.readouterr().err


class HostDLPack:
    """A foreign host array that only speaks DLPack (like a CPU torch tensor)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class FakeCudaArray:
    """Claims to be GPU memory but points at host memory."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "version": 3,
                                         "data": (array.ctypes.data, False), "strides": None}


def test_host_dlpack_arrays_are_used_in_place():
    out = np.zeros(8, np.float32)
    fill[1](HostDLPack(out), 4.0)
    assert (out == 4).all()
    assert classify_argument("x", HostDLPack(out))[0] == ArraySpec(dtypes.float32, 1)


def test_gpu_protocol_objects_are_checked_before_launch():
    if backends._usable("cuda"):
        pytest.skip("a CUDA device is present")
    launch_error(lambda out: fill[1](FakeCudaArray(out), 1.0), "argument 'out'")
