"""The re-launch fast path: a launch that repeats a seen specialisation skips binding, the
specialisation rules and the compile cache, and anything that changes the specialisation
(alignment, contiguity, dtype, scalar width, constexprs, num_warps) goes down the full path."""
import importlib

import pytest

import tilejit as tj
from tilejit import backends, dtypes
from tilejit.runtime.arrays import KernelArray

kernel_module = importlib.import_module("tilejit.kernel")


class FakeDeviceArray:
    def __init__(self, ptr=4096, shape=(8, 8), strides=(8, 1), dtype=dtypes.float32, device=0):
        self.view = KernelArray(ptr, shape, strides, dtype, device, stream=7)


class RecordingBackend:
    """Compiles nothing, records which path each launch took."""
    target = "fake"

    def __init__(self):
        self.compiled, self.slow, self.fast = [], [], []

    def compile(self, tile_fn, options):
        self.compiled.append(tile_fn.meta["specs"])
        return len(self.compiled)

    def launch(self, artifact, grid, args, stream):
        self.slow.append((artifact, grid))

    def fast_launcher(self, artifact):
        return lambda grid, views, stream: self.fast.append((artifact, grid, views[0].stream))


@tj.kernel
def scale(x, y, n, BLOCK: tj.constexpr):
    t = tj.load(x, (tj.program_id(0), 0), (1, BLOCK))
    tj.store(y, (tj.program_id(0), 0), t * n)


@pytest.fixture
def backend(monkeypatch):
    fake = RecordingBackend()
    monkeypatch.setitem(backends.PROVIDERS, "fake", ())
    backends.register("fake", fake)
    monkeypatch.setenv("TILEJIT_BACKEND", "fake")
    monkeypatch.setattr(kernel_module, "_fast_device_view",
                        lambda v: v.view if isinstance(v, FakeDeviceArray) else None)
    scale._cache.clear()
    scale._fast.clear()
    yield fake
    backends._registry.pop("fake", None)


def _classify(name, value):
    if isinstance(value, FakeDeviceArray):
        v = value.view
        return kernel_module._array_spec(name, v.dtype, v.shape, tuple(s * v.dtype.itemsize for s in v.strides), v.ptr), v
    return _original_classify(name, value)


_original_classify = kernel_module.classify_argument


@pytest.fixture(autouse=True)
def classify(monkeypatch):
    monkeypatch.setattr(kernel_module, "classify_argument", _classify)


def test_second_launch_takes_the_fast_path(backend):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    scale[(8,)](x, y, 3, BLOCK=8)
    scale[lambda meta: (meta["BLOCK"],)](x, y, 5, BLOCK=8)
    assert len(backend.slow) == 1 and len(backend.compiled) == 1
    assert [(a, g, s) for a, g, s in backend.fast] == [(1, (8, 1, 1), 7), (1, (8, 1, 1), 7)]


@pytest.mark.parametrize("change", [
    dict(x=FakeDeviceArray(ptr=4100)),                       # not 16-byte aligned
    dict(x=FakeDeviceArray(strides=(16, 2))),                # inner stride not 1
    dict(x=FakeDeviceArray(dtype=dtypes.float16)),           # another dtype
    dict(n=2**40),                                           # an int64 scalar
    dict(BLOCK=16),                                          # another constexpr
    dict(num_warps=8),
])
def test_a_changed_specialisation_takes_the_full_path(backend, change):
    base = dict(x=FakeDeviceArray(), y=FakeDeviceArray(ptr=8192), n=3, BLOCK=8, num_warps=4)
    scale[(8,)](base["x"], base["y"], base["n"], BLOCK=base["BLOCK"], num_warps=4)
    args = {**base, **change}
    scale[(8,)](args["x"], args["y"], args["n"], BLOCK=args["BLOCK"], num_warps=args["num_warps"])
    assert len(backend.slow) == 2 and backend.fast == []


def test_bad_grid_on_the_fast_path_is_still_a_launch_error(backend):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    with pytest.raises(tj.LaunchError, match="grid"):
        scale[(0,)](x, y, 3, BLOCK=8)
    assert backend.fast == []


@pytest.mark.parametrize("option, value", [("fast_math", 0), ("debug", None), ("num_stages", 0)])
def test_bad_launch_options_on_the_fast_path_are_still_launch_errors(backend, option, value):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    with pytest.raises(tj.LaunchError, match=option):
        scale[(8,)](x, y, 3, BLOCK=8, **{option: value})
    assert backend.fast == []


@pytest.mark.parametrize("grid", [(8.0,), (True,), (8, 0)])
def test_a_grid_equal_to_a_cached_one_but_not_ints_is_refused(backend, grid):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    scale[(1,)](x, y, 3, BLOCK=8)
    with pytest.raises(tj.LaunchError, match="grid"):
        scale[grid](x, y, 3, BLOCK=8)


@tj.kernel
def pick(x, y, WHICH: tj.constexpr):
    tj.store(y, (0, 0), tj.load(x, (0, 0), (1, 8)) * len(WHICH))


def test_an_unhashable_constexpr_takes_the_full_path_every_time(backend):
    """A list constexpr (compiled as a tuple) makes the fast path's key unhashable: each launch
    is bound again, and compiles once."""
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    pick._cache.clear()
    pick._fast.clear()
    for _ in range(3):
        pick[(1,)](x, y, WHICH=[1, 2])
    assert len(backend.slow) == 3 and len(backend.compiled) == 1
    assert backend.fast == [] and pick._fast == {}


GAIN = 2.0


@tj.kernel
def gain(x, y, BLOCK: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (0,), (BLOCK,)) * GAIN)


def test_rebinding_a_global_the_kernel_reads_recompiles(monkeypatch):
    """Compiled code folds globals in; the in-memory caches must not serve the old value."""
    import numpy as np
    global GAIN
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    gain[(1,)](x, y, BLOCK=4)
    assert (y == 2).all()
    GAIN = 5.0
    try:
        gain[(1,)](x, y, BLOCK=4)
        assert (y == 5).all()
    finally:
        GAIN = 2.0


class _RecordingEnviron(dict):
    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)


def test_every_switch_a_compile_reads_is_in_the_fast_paths_key(monkeypatch):
    """``SWITCH_ENV`` (the fast path's key) names every variable ``compile_switches`` reads: one
    left out (``TILEJIT_TMA_STORE`` once was) would re-launch the old code after a change."""
    seen = set()
    monkeypatch.setattr(kernel_module.os, "environ", _RecordingEnviron(seen))
    kernel_module.compile_switches()
    assert seen and seen <= set(kernel_module.SWITCH_ENV)


@pytest.mark.parametrize("name,value", [("TILEJIT_TMA_STORE", "0"), ("TILEJIT_WGMMA", "0"), ("TILEJIT_PERSIST", "always")])
def test_a_changed_switch_takes_the_full_path(backend, monkeypatch, name, value):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    monkeypatch.setenv(name, value)
    scale[(8,)](x, y, 3, BLOCK=8)
    assert len(backend.slow) == 2 and backend.fast == []


def test_the_environment_reader_sees_changes(monkeypatch):
    read = kernel_module._environ_reader(("TILEJIT_TEST_SWITCH", "TILEJIT_TEST_OTHER"))
    monkeypatch.delenv("TILEJIT_TEST_SWITCH", raising=False)
    before = read()
    monkeypatch.setenv("TILEJIT_TEST_SWITCH", "1")
    assert read() != before and read()[1] == before[1]
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    assert kernel_module.verify_switch()
    monkeypatch.setenv("TILEJIT_DEBUG", "0")
    assert not kernel_module.verify_switch()


def test_the_fast_paths_python_is_a_few_microseconds(backend):
    """The re-launch fast path's own Python (key, grid, dispatch; the launcher a no-op here):
    22 us on the build machine before the environment and array specs were read cheaply, 6.6
    after, 5.0 once the environment was read once a launch, launch functions were kept per grid
    and dtypes keyed by name. The bound leaves room for slower machines but fails at the old cost."""
    import time
    backend.fast_launcher = lambda artifact: (lambda grid, views, stream: None)
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    scale[(8,)](x, y, 3, BLOCK=8)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(2000):
            scale[(8,)](x, y, 3, BLOCK=8)
        best = min(best, (time.perf_counter() - start) / 2000)
    assert best < 15e-6, f"{best * 1e6:.1f} us per launch"


def test_an_int_grid_reuses_its_launch_function_and_a_callable_grid_does_not(backend):
    assert scale[(8,)] is scale[(8,)] and scale[8] is scale[8] and scale[(8,)] is not scale[(4,)]
    grid = lambda meta: (1,)            # noqa: E731
    assert scale[grid] is not scale[grid]
    assert scale[[8]] is not scale[[8]]          # a list is not kept (it could change)


def test_the_debug_switch_is_still_read_on_every_launch(backend, monkeypatch):
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    launch = scale[(8,)]
    launch(x, y, 3, BLOCK=8)
    launch(x, y, 3, BLOCK=8)
    monkeypatch.setenv("TILEJIT_DEBUG", "1")        # a debug compile: the full path again
    launch(x, y, 3, BLOCK=8)
    assert len(backend.slow) == 2 and len(backend.fast) == 1


def test_bool_and_numpy_scalars_take_the_fast_path(backend):
    """A bool or a NumPy scalar is specialised by its type alone, as the full path does: a new
    value re-launches fast, a new type compiles anew."""
    import numpy as np
    x, y = FakeDeviceArray(), FakeDeviceArray(ptr=8192)
    for n in (True, False, True, np.float32(2), np.float32(3), np.float16(2), 1):
        scale[(8,)](x, y, n, BLOCK=8)
    assert len(backend.compiled) == len(backend.slow) == 4       # bool, float32, float16, int
    assert len(backend.fast) == 3
    assert kernel_module._is_numpy_scalar(np.datetime64) is False and kernel_module._is_numpy_scalar(str) is False
