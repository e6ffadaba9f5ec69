"""The native re-launch path (runtime/native.py, runtime/native_launch.c) on a fake libcuda made
of C-callable Python functions: what it packs and launches, and that anything differing from the
launch it repeats sends the launch back to the Python path (False) with nothing launched."""
import ctypes
import struct
import sys
import types
from types import SimpleNamespace

import pytest

import tilejit as tj
from tilejit import dtypes
from tilejit.abi import ParamDesc, ParamKind
from tilejit.runtime import native
from tilejit.runtime.arrays import DeviceArray

if native.load() is None:
    pytest.skip(f"no native launch path here: {native.status()}", allow_module_level=True)

VOIDP = ctypes.c_void_p
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, VOIDP, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                          ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, VOIDP, VOIDP, VOIDP)
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, VOIDP, VOIDP, VOIDP, VOIDP)
GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(VOIDP))
SET = ctypes.CFUNCTYPE(ctypes.c_int, VOIDP)


class FakeDriver:
    """cuLaunchKernel, cuLaunchKernelEx, cuCtxGetCurrent and cuCtxSetCurrent as C function
    pointers; each launch records its geometry and its parameters' 8-byte slots."""

    def __init__(self, nparams, result=0):
        self.calls, self.current, self.result, self.nparams = [], None, result, nparams

        def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            self.calls.append(("launch", fn, (gx, gy, gz), (bx, by, bz), shared, stream, self._slots(params)))
            return self.result

        def launch_ex(config, fn, params, extra):
            c = ctypes.cast(config, ctypes.POINTER(ctypes.c_uint * 7)).contents
            stream = ctypes.cast(config + 32, ctypes.POINTER(VOIDP)).contents.value
            attrs = ctypes.cast(config + 40, ctypes.POINTER(VOIDP)).contents.value
            count = ctypes.cast(config + 48, ctypes.POINTER(ctypes.c_uint)).contents.value
            attribute = ctypes.cast(attrs, ctypes.POINTER(ctypes.c_int * 3)).contents
            self.calls.append(("launch_ex", fn, tuple(c[0:3]), tuple(c[3:6]), c[6], stream, self._slots(params),
                               count, attribute[0], attribute[2]))
            return self.result

        def get(ref):
            ref[0] = self.current
            return 0

        def set_(context):
            self.calls.append(("set", context))
            self.current = context
            return 0
        self.functions = [LAUNCH(launch), LAUNCH_EX(launch_ex), GET(get), SET(set_)]
        self.addresses = tuple(ctypes.cast(f, VOIDP).value for f in self.functions)

    def _slots(self, params):
        pointers = ctypes.cast(params, ctypes.POINTER(VOIDP))
        return [ctypes.string_at(pointers[i], 8) for i in range(self.nparams)]

    @property
    def launches(self):
        return [c for c in self.calls if c[0] != "set"]


def _kernel(**kw):
    values = dict(function=0x1000, context=0x2000, shared_bytes=96, device=0, name="scale",
                  max_grid=(2**31 - 1, 65535, 65535), max_threads=1024, dependent_launch=False)
    values.update(kw)
    return SimpleNamespace(**values)


class FakeTensor:
    """What the native path reads of a torch tensor."""

    def __init__(self, ptr=0x10000, shape=(4, 8), strides=(8, 1), dtype="float32", device=0):
        self.ptr, self.shape, self._strides, self.dtype, self.device = ptr, shape, strides, dtype, device

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return self.device


@pytest.fixture
def fake_torch(monkeypatch):
    streams = []

    def raw_stream(device):
        streams.append(device)
        return 0x5500 + device
    module = types.ModuleType("torch")
    module.Tensor = FakeTensor
    module._C = SimpleNamespace(_cuda_getCurrentRawStream=raw_stream)
    monkeypatch.setitem(sys.modules, "torch", module)
    return streams


ENV_KEYS = (b"TILEJIT_X",)
SWITCHES = SimpleNamespace(generation=0)
def _p(kind, arg, axis=None, dtype=dtypes.uint64):
    return ParamDesc(kind, arg, axis, dtype)


PARAMS = [_p(ParamKind.PTR, 0), _p(ParamKind.DIM, 0, 1, dtypes.int32), _p(ParamKind.STRIDE, 0, 0, dtypes.int64),
          _p(ParamKind.PTR, 1), _p(ParamKind.SCALAR, 2, dtype=dtypes.int32),
          _p(ParamKind.SCALAR, 3, dtype=dtypes.float32)]


def _make(driver, args, params=PARAMS, grid=(3, 1, 1), kwargs=None, num_warps=4, environ=None,
          kernel=None, extent=None):
    environ = {b"TILEJIT_X": b"1"} if environ is None else environ
    return native.launcher(kernel or _kernel(), params, grid, 128, args, kwargs or {"BLOCK": 8},
                           num_warps, (environ, ENV_KEYS, tuple(environ.get(k) for k in ENV_KEYS)),
                           ((), (), SWITCHES, 0), () if extent is None else (extent,), functions=driver.addresses), environ


def _unpack(slots):
    return (struct.unpack("<Q", slots[0])[0], struct.unpack("<i", slots[1][:4])[0], struct.unpack("<q", slots[2])[0],
            struct.unpack("<Q", slots[3])[0], struct.unpack("<i", slots[4][:4])[0], struct.unpack("<f", slots[5][:4])[0])


def test_it_packs_and_launches_on_torchs_stream_and_sets_the_context_once(fake_torch):
    driver = FakeDriver(len(PARAMS))
    x, y = FakeTensor(), FakeTensor(ptr=0x20000)
    launcher, _ = _make(driver, (x, y, 7, 0.5))
    assert launcher is not None
    assert launcher((x, y, 7, 0.5), {"BLOCK": 8}, 4, None) is True
    x.ptr = 0x30000                                 # a new buffer of the same kind: packed anew
    assert launcher((x, y, -9, 2.25), {"BLOCK": 8}, 4, None) is True
    first, second = driver.launches
    assert first[:6] == ("launch", 0x1000, (3, 1, 1), (128, 1, 1), 96, 0x5500)
    assert _unpack(first[6]) == (0x10000, 8, 8, 0x20000, 7, 0.5)
    assert _unpack(second[6]) == (0x30000, 8, 8, 0x20000, -9, 2.25)
    assert [c for c in driver.calls if c[0] == "set"] == [("set", 0x2000)]
    assert fake_torch == [0, 0]


def test_a_given_stream_is_used_and_device_arrays_have_none(fake_torch):
    driver = FakeDriver(len(PARAMS))
    a = DeviceArray((4, 8), tj.float32, ptr=0x40000, device=0)
    b = DeviceArray((4, 8), tj.float32, ptr=0x50000, device=0)
    launcher, _ = _make(driver, (a, b, 1, 1.0))
    assert launcher((a, b, 1, 1.0), {"BLOCK": 8}, 4, None) is True
    assert launcher((a, b, 1, 1.0), {"BLOCK": 8}, 4, 0x77) is True
    assert [c[5] for c in driver.launches] == [None, 0x77]
    assert fake_torch == []


@pytest.mark.parametrize("change", ["dtype", "shape", "strides", "alignment", "device", "type", "int64",
                                    "float for int", "int for float", "float sign", "arity", "constexpr", "constexpr type",
                                    "constexpr added", "num_warps", "environment", "environment unset",
                                    "stream object"])
def test_anything_that_differs_takes_the_python_path_and_launches_nothing(fake_torch, change):
    driver = FakeDriver(len(PARAMS))
    x, y = FakeTensor(), FakeTensor(ptr=0x20000)
    launcher, environ = _make(driver, (x, y, 7, 0.5))
    args, kwargs, num_warps, stream = [x, y, 7, 0.5], {"BLOCK": 8}, 4, None
    if change in ("dtype", "shape", "strides", "alignment", "device"):
        field = {"dtype": ("dtype", "float16"), "shape": ("shape", (4, 16)), "strides": ("_strides", (1, 4)),
                 "alignment": ("ptr", 0x10008), "device": ("device", 1)}[change]
        args[0] = FakeTensor()
        setattr(args[0], *field)
    elif change == "type":
        args[1] = DeviceArray((4, 8), tj.float32, ptr=0x20000, device=0)
    elif change == "int64":
        args[2] = 2**40
    elif change == "float for int":
        args[2] = 7.0
    elif change == "int for float":
        args[3] = 1
    elif change == "float sign":                  # floats are specialised on > 0 (ScalarSpec.positive)
        args[3] = -0.5
    elif change == "arity":
        args.append(None)
    elif change.startswith("constexpr"):
        kwargs = {"constexpr": {"BLOCK": 16}, "constexpr type": {"BLOCK": 8.0},
                  "constexpr added": {"BLOCK": 8, "EVEN": True}}[change]
    elif change == "num_warps":
        num_warps = None
    elif change == "environment":
        environ[b"TILEJIT_X"] = b"0"
    elif change == "environment unset":
        del environ[b"TILEJIT_X"]
    elif change == "stream object":
        stream = SimpleNamespace(cuda_stream=5)
    assert launcher(tuple(args), kwargs, num_warps, stream) is False
    assert driver.launches == []


def test_an_unset_switch_stays_unset(fake_torch):
    driver = FakeDriver(len(PARAMS))
    x = FakeTensor()
    launcher, environ = _make(driver, (x, x, 1, 1.0), environ={})
    assert launcher((x, x, 1, 1.0), {"BLOCK": 8}, 4, None) is True
    environ[b"TILEJIT_X"] = b"1"
    assert launcher((x, x, 1, 1.0), {"BLOCK": 8}, 4, None) is False


def test_none_arguments_and_packed_programs(fake_torch):
    """A None argument is compiled in (no parameter); the extent of grid axis 0 follows the
    arguments of a kernel packing several programs to a CTA."""
    driver = FakeDriver(3)
    x = FakeTensor()
    params = [_p(ParamKind.PTR, 0), _p(ParamKind.SCALAR, 1, dtype=dtypes.int64),
              _p(ParamKind.SCALAR, 2, dtype=dtypes.int32)]
    launcher, _ = _make(driver, (x, None, 2**40), params=params, grid=(5, 2, 1), extent=19)
    assert launcher((x, None, 2**40 + 1), {"BLOCK": 8}, 4, None) is True
    assert launcher((x, x, 2**40 + 1), {"BLOCK": 8}, 4, None) is False
    (call,) = driver.launches
    assert call[2] == (5, 2, 1)
    assert struct.unpack("<Q", call[6][0])[0] == 0x10000
    assert struct.unpack("<q", call[6][1])[0] == 2**40 + 1
    assert struct.unpack("<i", call[6][2][:4])[0] == 19


def test_a_dependent_kernel_is_launched_with_programmatic_serialization(fake_torch):
    driver = FakeDriver(len(PARAMS))
    x = FakeTensor()
    launcher, _ = _make(driver, (x, x, 1, 1.0), kernel=_kernel(dependent_launch=True))
    assert launcher((x, x, 1, 1.0), {"BLOCK": 8}, 4, 0x99) is True
    (call,) = driver.launches
    assert call[:6] == ("launch_ex", 0x1000, (3, 1, 1), (128, 1, 1), 96, 0x99)
    from tilejit.runtime.launch import PROGRAMMATIC_STREAM_SERIALIZATION      # native_launch.c's too
    assert call[7:] == (1, PROGRAMMATIC_STREAM_SERIALIZATION, 1)


def test_a_driver_error_names_the_call_and_the_kernel(fake_torch, monkeypatch):
    from tilejit.runtime import libcuda
    monkeypatch.setattr(libcuda.Libcuda, "open", classmethod(lambda cls: None))
    driver = FakeDriver(len(PARAMS), result=1)
    x = FakeTensor()
    launcher, _ = _make(driver, (x, x, 1, 1.0))
    with pytest.raises(tj.DeviceError, match=r"cuLaunchKernel failed: CUresult 1") as err:
        launcher((x, x, 1, 1.0), {"BLOCK": 8}, 4, None)
    assert "scale" in str(err.value)


@pytest.mark.parametrize("why", ["tensor map", "narrow scalar", "dim too wide", "grid too large", "unknown arg",
                                 "no cuLaunchKernelEx"])
def test_what_it_cannot_pack_it_does_not_take(fake_torch, why):
    driver = FakeDriver(len(PARAMS))
    x = FakeTensor()
    args, params, grid, kernel = (x, x, 1, 1.0), list(PARAMS), (3, 1, 1), _kernel()
    if why == "tensor map":
        params[0] = _p(ParamKind.TENSOR_MAP, 0)                # with no views to describe it
    elif why == "narrow scalar":
        params[4] = _p(ParamKind.SCALAR, 2, dtype=dtypes.int16)
    elif why == "dim too wide":
        x = FakeTensor(shape=(4, 2**31), strides=(2**31, 1))
        args = (x, x, 1, 1.0)
    elif why == "grid too large":
        grid = (1, 70000, 1)
    elif why == "unknown arg":
        args = (x, x, 1, 1.0 + 0j)
    elif why == "no cuLaunchKernelEx":
        kernel = _kernel(dependent_launch=True)
        driver.addresses = driver.addresses[:1] + (0,) + driver.addresses[2:]
    assert _make(driver, args, params=params, grid=grid, kernel=kernel)[0] is None


# --- through kernel[grid](...): the third launch of a specialisation is native ---------------
@tj.kernel
def axpy(x, y, out, a, n, BLOCK: tj.constexpr):
    start = tj.program_id(0) * BLOCK
    tj.store(out, (start,), tj.load(x, (start,), (BLOCK,)) * a + tj.load(y, (start,), (BLOCK,)) + n)


@pytest.fixture
def launches(monkeypatch):
    """The cuda backend with its loaded kernel, the Python path's driver call and the native
    path's driver all fakes: (python-path launches, native driver)."""
    from tilejit.backends.cuda import CudaArtifact
    from tilejit.runtime import launch
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    loaded = {}

    def kernel_for_device(art, device):
        if device not in loaded:
            k = launch.LoadedKernel(0x1000 + device, device, art.name, art.shared_bytes, (2**31 - 1, 65535, 65535), 1024)
            k.context = 0x2000
            loaded[device] = k
        return loaded[device]
    monkeypatch.setattr(CudaArtifact, "kernel_for_device", kernel_for_device)
    python_path = []

    def driver_launch(kernel, grid, threads, stream, params):
        count = len(kernel._last[1].params)
        pointers = ctypes.cast(params, ctypes.POINTER(VOIDP))
        python_path.append((grid, threads, stream, [ctypes.string_at(pointers[i], 8) for i in range(count)]))
    monkeypatch.setattr(launch, "_driver_launch_impl", driver_launch)
    driver = FakeDriver(0)
    monkeypatch.setattr(native, "driver_functions", lambda: driver.addresses)
    axpy._cache.clear()
    axpy._fast.clear()
    axpy._launchers.clear()
    yield python_path, driver
    axpy._cache.clear()
    axpy._fast.clear()
    axpy._launchers.clear()


def _device_arrays(n, at=0x100000):
    return [DeviceArray((n,), tj.float32, ptr=at + 0x10000 * i, device=0) for i in range(3)]


def test_the_native_path_packs_what_the_python_path_packs(launches):
    python_path, driver = launches
    x, y, out = _device_arrays(1000)
    axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    driver.nparams = len(python_path[0][3])
    for a in (2.5, 2.5, 0.75):
        axpy[(8,)](x, y, out, a, 1000, BLOCK=128)
    assert len(python_path) == 2                 # the full path, then the Python re-launch path
    assert len(driver.launches) == 2
    (grid, threads, stream, slots), (first, second) = python_path[1], driver.launches
    assert first[1:6] == (0x1000, grid, (threads, 1, 1), 0, stream)
    assert first[6] == slots                     # every parameter's bytes alike
    assert second[6] != slots and second[6][:3] == slots[:3]     # a = 0.75 packed anew


def test_a_changed_specialisation_or_switch_goes_back_to_python(launches, monkeypatch):
    python_path, driver = launches
    x, y, out = _device_arrays(1000)
    for _ in range(3):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (2, 1)
    x2 = DeviceArray((1000,), tj.float32, ptr=0x200004, device=0)     # not 16-byte aligned
    axpy[(8,)](x2, y, out, 2.5, 1000, BLOCK=128)
    assert len(python_path) == 3                 # compiled anew: another specialisation
    axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=64)
    assert (len(python_path), len(driver.launches)) == (4, 1)
    axpy[(8,)](x, y, out, -2.5, 1000, BLOCK=128)             # a float's sign is specialised on
    assert (len(python_path), len(driver.launches)) == (5, 1)
    monkeypatch.setenv("TILEJIT_DEBUG", "1")
    axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (6, 1)
    monkeypatch.delenv("TILEJIT_DEBUG")
    axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (6, 2)


OFFSET = 1.0


@tj.kernel
def shifted(x, out, BLOCK: tj.constexpr):
    start = tj.program_id(0) * BLOCK
    tj.store(out, (start,), tj.load(x, (start,), (BLOCK,)) + OFFSET)


def test_a_rebound_global_the_kernel_reads_drops_the_native_launcher(launches, monkeypatch):
    python_path, driver = launches
    x, out, _ = _device_arrays(256)
    shifted._cache.clear()
    shifted._fast.clear()
    for _ in range(3):
        shifted[(2,)](x, out, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (2, 1)
    monkeypatch.setitem(globals(), "OFFSET", 2.0)
    shifted[(2,)](x, out, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (3, 1)       # compiled anew, by the full path


def _fresh_native(monkeypatch, tmp_path):
    for name in ("_module", "_why_not", "_building"):
        monkeypatch.setattr(native, name, None)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("case", ["no compiler", "switched off", "shared folder", "built"])
def test_the_module_is_built_once_or_is_off_with_a_reason(monkeypatch, tmp_path, case):
    import os
    _fresh_native(monkeypatch, tmp_path)
    if case == "no compiler":
        monkeypatch.setenv("CC", "false")
        assert native.load() is None and native.status().startswith("off: RuntimeError: the C compiler failed")
    elif case == "switched off":
        monkeypatch.setenv("TILEJIT_NATIVE_LAUNCH", "0")
        assert native.load() is None and native.status() == "off: TILEJIT_NATIVE_LAUNCH=0"
    elif case == "shared folder":
        os.makedirs(tmp_path / "native")
        os.chmod(tmp_path / "native", 0o777)
        assert native.load() is None and "not this user's alone" in native.status()
    else:
        assert native.load() is not None and native.status() == "on"
        (built,) = os.listdir(tmp_path / "native")
        monkeypatch.setattr(native, "_module", None)
        monkeypatch.setattr(native, "_building", None)
        monkeypatch.setattr(native.subprocess, "run", None)      # a second process finds it built
        assert native.load() is not None and os.listdir(tmp_path / "native") == [built]


# --- on the GPU ----------------------------------------------------------------------------------
@tj.kernel
def bump(x, amount, BLOCK: tj.constexpr):
    offs = tj.program_id(0) * BLOCK
    tj.store(x, (offs,), tj.load(x, (offs,), (BLOCK,)) + amount)


@pytest.fixture
def python_launches(monkeypatch):
    """How many launches took a Python path (the full path or the Python re-launch path)."""
    from tilejit.runtime import launch
    counted, original = [], launch.LoadedKernel.launch

    def counting(self, *args, **kwargs):
        counted.append(self.name)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(launch.LoadedKernel, "launch", counting)
    return counted


@pytest.mark.gpu
def test_native_launches_run_on_torchs_current_stream_and_in_a_cuda_graph(python_launches):
    torch = pytest.importorskip("torch")
    assert native.status() == "on"
    x = torch.ones(4096, device="cuda")
    for _ in range(10):
        bump[(4,)](x, 0.5, BLOCK=1024)
    assert len(python_launches) == 2                     # the other eight were native
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                        # queued behind a long kernel on this stream
        torch.cuda._sleep(10_000_000)
        for _ in range(10):
            bump[(4,)](x, 1.0, BLOCK=1024)
    torch.cuda.current_stream().wait_stream(side)
    assert float(x.min()) == float(x.max()) == 16.0
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):                        # capture needs the capturing stream
        for _ in range(3):
            bump[(4,)](x, 2.0, BLOCK=1024)
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    assert float(x.min()) == float(x.max()) == 28.0
    assert len(python_launches) == 2


@pytest.mark.gpu
def test_native_launches_of_device_arrays_and_a_new_shape():
    import numpy as np
    x = tj.to_device(np.zeros(2048, np.float32))
    for _ in range(6):
        bump[(2,)](x, 1.5, BLOCK=1024)
    assert np.all(x.numpy() == 9.0)
    y = tj.to_device(np.zeros(3072, np.float32))       # another shape: the Python path, then native again
    for _ in range(4):
        bump[(3,)](y, -1.0, BLOCK=1024)
    assert np.all(y.numpy() == -4.0)


def test_inside_launches_skipped_nothing_is_launched_and_grids_must_be_ints(launches):
    from tilejit.kernel import launches_skipped
    python_path, driver = launches
    x, y, out = _device_arrays(1000)
    for _ in range(3):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (2, 1)
    with launches_skipped():
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    axpy[8](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (3, 1)      # the int grid: a launcher of its own
    for grid in [(8.0,), (True,), (8, 1.0), (8, 1, 1.0)]:
        with pytest.raises(tj.LaunchError, match="grid must be an int or a tuple"):
            axpy[grid](x, y, out, 2.5, 1000, BLOCK=128)


def test_a_launch_never_waits_for_the_build(monkeypatch, tmp_path, fake_torch):
    """The first launcher asked for while the module is not built starts the build in a thread
    and is refused (the launch takes the Python path); once built, launchers are made."""
    import time
    _fresh_native(monkeypatch, tmp_path)
    monkeypatch.setenv("CC", "sh -c 'sleep 1; exec cc \"$@\"' cc")
    driver, x = FakeDriver(len(PARAMS)), FakeTensor()
    start = time.perf_counter()
    assert _make(driver, (x, x, 1, 1.0))[0] is None and not native.settled()
    assert time.perf_counter() - start < 0.5
    assert native.status() == "on" and native.settled()          # status() waits for it
    assert _make(driver, (x, x, 1, 1.0))[0] is not None


def test_launches_while_it_builds_do_not_use_up_the_tries(launches, monkeypatch, tmp_path):
    from tilejit.kernel import NATIVE_TRIES
    python_path, driver = launches
    _fresh_native(monkeypatch, tmp_path)
    monkeypatch.setenv("CC", "sh -c 'sleep 1; exec cc \"$@\"' cc")
    x, y, out = _device_arrays(1000)
    for _ in range(NATIVE_TRIES + 4):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert driver.launches == [] and not native.settled()
    assert native.status() == "on"
    for _ in range(2):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (NATIVE_TRIES + 5, 1)


def test_kernel_grid_becomes_the_c_front_which_falls_back_on_python(launches):
    python_path, driver = launches
    x, y, out = _device_arrays(1000)
    launch = axpy[(8,)]
    for _ in range(2):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    front = axpy[(8,)]
    assert type(front).__name__ == "Front" and front.python is launch
    front(x, y, out, 2.5, 1000, BLOCK=128)
    front(x, y, out, 2.5, 1000, BLOCK=128, num_warps=None, stream=None)
    launch(x, y, out, 2.5, 1000, BLOCK=128)                    # the function held from before
    assert (len(python_path), len(driver.launches)) == (2, 3)
    front(x, y, out, 2.5, 1000, BLOCK=128, num_stages=2)      # an option only Python knows
    assert (len(python_path), len(driver.launches)) == (3, 3)
    front(x, y, out, 2.5, 1000, BLOCK=64)                     # another specialisation
    assert (len(python_path), len(driver.launches)) == (4, 3)
    axpy._fast.clear()                                         # dropped fast paths end it
    front(x, y, out, 2.5, 1000, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (5, 3)


def test_a_driver_error_through_the_front_names_the_users_line(launches, monkeypatch):
    from tilejit.runtime import libcuda
    monkeypatch.setattr(libcuda.Libcuda, "open", classmethod(lambda cls: None))
    python_path, driver = launches
    x, y, out = _device_arrays(1000)
    for _ in range(2):
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    driver.result = 700                                        # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(tj.DeviceError, match="cuLaunchKernel failed: CUresult 700") as err:
        axpy[(8,)](x, y, out, 2.5, 1000, BLOCK=128)
    assert "test_native_launch.py" in str(err.value) and "axpy" in str(err.value)


def test_a_tensor_map_is_encoded_again_only_for_a_new_pointer(fake_torch, monkeypatch):
    from tilejit.runtime import tensormap
    from tilejit.runtime.arrays import KernelArray
    encoded = []

    def encode(array, desc):
        encoded.append((array.ptr, array.shape, array.strides, array.dtype, desc.box))
        return array.ptr.to_bytes(8, "little") * 16
    monkeypatch.setattr(tensormap, "encode", encode)
    box = ParamDesc(ParamKind.TENSOR_MAP, 0, None, dtypes.float32, box=(2, 8), swizzle=0)
    params = [box, _p(ParamKind.DIM, 0, 0, dtypes.int32), _p(ParamKind.SCALAR, 1, dtype=dtypes.int32)]
    driver = FakeDriver(3)
    x = FakeTensor()
    views = [KernelArray(x.ptr, x.shape, x._strides, dtypes.float32, 0), 5]
    launcher = native.launcher(_kernel(), params, (2, 1, 1), 128, (x, 5), {}, None, ({}, (), ()),
                               ((), (), SWITCHES, 0), (), views, functions=driver.addresses)
    for ptr in (0x10000, 0x10000, 0x20000):
        x.ptr = ptr
        assert launcher((x, 5), {}, None, None) is True
    assert [e[0] for e in encoded] == [0x10000, 0x20000]
    assert encoded[0][1:] == ((4, 8), (8, 1), dtypes.float32, (2, 8))
    assert [c[6][1:] for c in driver.launches] == [[struct.pack("<q", 4), struct.pack("<q", 5)]] * 3
    assert [c[6][0] for c in driver.launches] == [p.to_bytes(8, "little") for p in (0x10000, 0x10000, 0x20000)]


def test_launch_geometry_extents_follow_the_arguments(fake_torch):
    driver = FakeDriver(2)
    x = FakeTensor()
    params = [_p(ParamKind.PTR, 0), _p(ParamKind.SCALAR, 1, dtype=dtypes.int64)]
    launcher, _ = _make(driver, (x,), params=params, extent=3 * 2**33)
    assert launcher((x,), {"BLOCK": 8}, 4, None) is True
    assert struct.unpack("<q", driver.launches[0][6][1])[0] == 3 * 2**33
    params[1] = _p(ParamKind.SCALAR, 1, dtype=dtypes.int32)
    assert _make(driver, (x,), params=params, extent=3 * 2**33)[0] is None     # does not fit
    assert _make(driver, (x,), params=params, extent=None)[0] is None          # no such argument


@pytest.mark.gpu
def test_a_tma_gemm_relaunched_natively_on_new_buffers(python_launches):
    """The wgmma GEMM reads A and B through TMA maps: native launches re-encode a map only for
    a new pointer, and every product is right."""
    torch = pytest.importorskip("torch")
    from tilejit.examples import matmul
    kernel = matmul.matmul_kernel.kernel
    gen = torch.Generator(device="cuda").manual_seed(3)
    inputs = [(torch.randn(256, 512, device="cuda", generator=gen).bfloat16(),
               torch.randn(512, 384, device="cuda", generator=gen).bfloat16()) for _ in range(2)]
    outs = [torch.full((256, 384), float("nan"), device="cuda") for _ in range(2)]
    art = kernel.inspect(*inputs[0], outs[0], BM=128, BN=128, BK=64, num_warps=8)
    assert "tma" in " ".join(art.copy_engines or ())
    for i in range(8):
        (a, b), c = inputs[i % 2], outs[(i // 2) % 2]
        c.fill_(float("nan"))
        kernel[(2, 3)](a, b, c, BM=128, BN=128, BK=64, num_warps=8)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    assert len(python_launches) == 2


@tj.kernel
def negate_unless(x, out, keep, BLOCK: tj.constexpr):
    start = tj.program_id(0) * BLOCK
    t = tj.load(x, (start,), (BLOCK,))
    tj.store(out, (start,), tj.where(keep, t, -t))


def test_a_bool_argument_is_packed_as_the_python_path_packs_it(launches):
    python_path, driver = launches
    x, out, _ = _device_arrays(256)
    negate_unless._cache.clear()
    negate_unless._fast.clear()
    negate_unless[(2,)](x, out, True, BLOCK=128)
    driver.nparams = len(python_path[0][3])
    for keep in (True, False, True):
        negate_unless[(2,)](x, out, keep, BLOCK=128)
    assert (len(python_path), len(driver.launches)) == (2, 2)
    (_, _, _, slots), (off, on) = python_path[1], driver.launches
    assert on[6] == slots
    (differs,) = [i for i, (a, b) in enumerate(zip(on[6], off[6])) if a != b]     # the flag's slot alone
    assert (on[6][differs][0], off[6][differs][0]) == (1, 0)
    negate_unless[(2,)](x, out, 1, BLOCK=128)                  # an int: another specialisation
    assert len(python_path) == 3


@pytest.mark.gpu
def test_bool_and_numpy_scalar_arguments_relaunch_on_the_gpu(python_launches):
    import numpy as np
    torch = pytest.importorskip("torch")
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    out = torch.full_like(x, float("nan"))
    for keep in (True, False, True, False, False, True):
        negate_unless[(2,)](x, out, keep, BLOCK=128)
        torch.testing.assert_close(out, x if keep else -x)
    for amount in (np.float32(0.5), np.float32(-2.0), np.float32(3.0)):
        y = torch.zeros(2048, device="cuda")
        bump[(2,)](y, amount, BLOCK=1024)
        assert float(y.min()) == float(y.max()) == float(amount)
    # negate_unless: its full path, then its Python fast path; bump with NumPy scalars (no
    # native launcher takes them): its full path, then the Python fast path twice
    assert len(python_launches) == 5


def test_a_launch_from_inside_a_map_encoding_does_not_mix_its_values_in(fake_torch, monkeypatch):
    """Encoding a map runs Python, where another thread may launch through the same launcher:
    here the encoder itself launches once with other values.  Each launch must carry its own
    pointer, map and scalar."""
    from tilejit.runtime import tensormap
    from tilejit.runtime.arrays import KernelArray
    box = ParamDesc(ParamKind.TENSOR_MAP, 0, None, dtypes.float32, box=(2, 8), swizzle=0)
    params = [_p(ParamKind.PTR, 0), box, _p(ParamKind.SCALAR, 1, dtype=dtypes.int32)]
    driver = FakeDriver(3)
    x, other = FakeTensor(ptr=0x10000), FakeTensor(ptr=0x90000)
    views = [KernelArray(x.ptr, x.shape, x._strides, dtypes.float32, 0), 1]
    launcher = native.launcher(_kernel(), params, (2, 1, 1), 128, (x, 1), {}, None, ({}, (), ()),
                               ((), (), SWITCHES, 0), (), views, functions=driver.addresses)
    nested = []

    def encode(array, desc):
        if not nested:
            nested.append(True)
            assert launcher((other, 2), {}, None, None) is True
        return array.ptr.to_bytes(8, "little") * 16
    monkeypatch.setattr(tensormap, "encode", encode)
    assert launcher((x, 1), {}, None, None) is True
    got = [(struct.unpack("<Q", c[6][0])[0], struct.unpack("<Q", c[6][1])[0], c[6][2][0]) for c in driver.launches]
    assert got == [(0x90000, 0x90000, 2), (0x10000, 0x10000, 1)]
