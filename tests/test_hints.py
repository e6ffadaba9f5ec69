"""Error hints for names a kernel author mistypes or borrows from NumPy: a misspelled ``tj.*``
name suggests the close ones, a NumPy function on a tile points to its ``tj`` twin."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.specs import ArraySpec

SPECS = (ArraySpec(tj.float32, 1),) * 2


def test_a_misspelled_tilejit_name_suggests_the_close_ones():
    @tj.kernel
    def k(x, y, B: tj.constexpr):
        tj.store(y, (0,), tj.exps(tj.load(x, (0,), (B,))))
    with pytest.raises(tj.CompileError, match=r"no attribute 'exps' \(did you mean tj\.exp"):
        k.tile_ir(SPECS, {"B": 16})


def test_a_numpy_function_on_a_tile_points_to_its_tj_twin():
    @tj.kernel
    def k(x, y, B: tj.constexpr):
        tj.store(y, (0,), np.exp(tj.load(x, (0,), (B,))))
    with pytest.raises(tj.CompileError, match=r"not supported in kernels: use tj\.exp, which works on tiles"):
        k.tile_ir(SPECS, {"B": 16})


def test_no_hint_without_a_close_name():
    @tj.kernel
    def k(x, y, B: tj.constexpr):
        tj.store(y, (0,), tj.qqqqqq(tj.load(x, (0,), (B,))))
    with pytest.raises(tj.CompileError) as err:
        k.tile_ir(SPECS, {"B": 16})
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_device_arrays_are_host_arrays_on_the_cpu_backends(backend, monkeypatch):
    """Code written for the GPU (``tj.to_device``, ``tj.empty``, ``.numpy()``) runs on the CPU."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)

    @tj.kernel
    def k(x, y, B: tj.constexpr):
        tj.store(y, (0,), tj.exp(tj.load(x, (0,), (B,))))
    x = tj.to_device(np.linspace(0, 1, 16, dtype=np.float32))
    y = tj.empty((16,), tj.float32)
    k[(1,)](x, y, B=16)
    got = y.numpy()
    assert type(got) is np.ndarray and got.dtype == np.float32
    np.testing.assert_allclose(got, np.exp(np.linspace(0, 1, 16, dtype=np.float32)), rtol=1e-6)
    z = tj.empty(3, tj.bfloat16)
    z.copy_from_host(np.array([1.0, 2.0, 3.0]))
    assert z.numpy().dtype == tj.bfloat16.np and list(z.numpy().astype(float)) == [1.0, 2.0, 3.0]
    with pytest.raises(tj.LaunchError, match="shape mismatch"):
        z.copy_from_host(np.ones(4))


def test_the_no_gpu_hint_does_not_ask_for_a_variable_already_set(monkeypatch):
    from tilejit.runtime import driver
    if driver.available():
        pytest.skip("a GPU is present")
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    with pytest.raises(tj.LaunchError, match=r"TILEJIT_BACKEND=cuda asks for the GPU: set it to emulate"):
        tj.empty((4,), tj.float32)
    monkeypatch.delenv("TILEJIT_BACKEND")
    with pytest.raises(tj.LaunchError, match=r"; set TILEJIT_BACKEND=emulate"):
        driver.require()
