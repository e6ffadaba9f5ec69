"""CPU unit tests of the CUDA runtime: status checking, argument packing by ParamDesc (with a
fake launch function), launch geometry checks, array normalisation, and behaviour without a GPU."""
import ctypes
import struct
import threading

import numpy as np
import pytest

import tilejit as tj
from tilejit.errors import DeviceError, LaunchError
from tilejit.runtime import arrays, driver, launch, packing
from tilejit.runtime.arrays import DeviceArray, KernelArray, as_kernel_array
from tilejit.runtime.launch import LoadedKernel, select_device
from tilejit.simt import ParamDesc

from conftest import HAVE_GPU

no_gpu = pytest.mark.skipif(HAVE_GPU, reason="checks the behaviour without a GPU")


# --- driver --------------------------------------------------------------------------------------
def test_check_unwraps_values_and_names_the_failing_call():
    cu = driver.cuda()
    ok, bad = cu.CUresult.CUDA_SUCCESS, cu.CUresult.CUDA_ERROR_INVALID_VALUE
    assert driver.check((ok,), "cuInit") is None
    assert driver.check((ok, 7), "cuDeviceGetCount") == 7
    assert driver.check((ok, 1, 2), "cuFoo") == (1, 2)
    assert driver.check(ok, "cuBar") is None
    with pytest.raises(DeviceError, match=r"cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE"):
        driver.check((bad, None), "cuMemAlloc")
    with pytest.raises(DeviceError, match="cuCtxSynchronize failed"):
        driver.check(bad, "cuCtxSynchronize")


@no_gpu
def test_without_a_gpu_nothing_crashes_and_errors_are_clear(monkeypatch):
    assert driver.available() is False
    with pytest.raises(LaunchError, match="no CUDA device"):
        driver.require()
    monkeypatch.delenv("TILEJIT_BACKEND", raising=False)     # kernels run on the CPU: host arrays
    assert isinstance(tj.empty((4,), tj.float32), np.ndarray)
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")            # the GPU asked for: a clear error
    with pytest.raises(LaunchError, match="no CUDA device"):
        tj.empty((4,), tj.float32)
    with pytest.raises(LaunchError, match="no CUDA device"):
        tj.to_device(np.zeros(4, np.float32))
    with pytest.raises(LaunchError, match="no CUDA device"):
        launch.load(b".version 8.0", "k", 0, 0)
    with pytest.raises(LaunchError, match="no CUDA device"):
        driver.device_properties(0)


# --- packing -------------------------------------------------------------------------------------
def P(kind, arg, axis=None, dtype=tj.int32):
    return ParamDesc(kind, arg, axis, dtype)


def read_params(address: int, sizes) -> list[bytes]:
    """The bytes each kernelParams pointer points at (what the driver would copy)."""
    pointers = (ctypes.c_void_p * len(sizes)).from_address(address)
    return [ctypes.string_at(p, n) for p, n in zip(pointers, sizes)]


def test_param_formats_follow_the_paramdesc_contract():
    assert packing.param_format(P("ptr", 0, dtype=tj.float16)) == "Q"
    assert packing.param_format(P("dim", 0, 1)) == "i"
    assert packing.param_format(P("stride", 0, 1, tj.int32)) == "i"
    assert packing.param_format(P("stride", 0, 1, tj.int64)) == "q"
    expected = {tj.bool_: "?", tj.int8: "b", tj.int16: "h", tj.int32: "i", tj.int64: "q",
                tj.uint8: "B", tj.uint16: "H", tj.uint32: "I", tj.uint64: "Q", tj.float16: "e", tj.float32: "f",
                tj.bfloat16: "H", tj.float8e4m3: "B", tj.float8e5m2: "B"}
    for dtype, fmt in expected.items():
        assert packing.param_format(P("scalar", 0, dtype=dtype)) == fmt
        assert struct.calcsize(fmt) == dtype.itemsize
    with pytest.raises(ValueError):
        packing.param_format(P("texture", 0))


def test_packed_bytes_per_param_kind():
    x = KernelArray(0x7F00_1234_5600, (300, 7), (7, 1), tj.float32, 0)
    params = [P("ptr", 0, dtype=tj.float32), P("dim", 0, 0), P("dim", 0, 1),
              P("stride", 0, 0, tj.int64), P("stride", 0, 1, tj.int32),
              P("scalar", 1, dtype=tj.float32), P("scalar", 2, dtype=tj.bool_),
              P("scalar", 3, dtype=tj.bfloat16), P("scalar", 4, dtype=tj.int64),
              P("scalar", 5, dtype=tj.float16), P("scalar", 6, dtype=tj.uint8)]
    packer = packing.ArgPacker(params, kernel="k")
    got = read_params(packer.pack([x, 0.5, True, 1.5, -2**40, 0.25, 255]),
                      [8, 4, 4, 8, 4, 4, 1, 2, 8, 2, 1])
    assert got == [struct.pack("<Q", 0x7F00_1234_5600), struct.pack("<i", 300), struct.pack("<i", 7),
                   struct.pack("<q", 7), struct.pack("<i", 1), struct.pack("<f", 0.5), b"\x01",
                   np.array(1.5, tj.bfloat16.np).tobytes(), struct.pack("<q", -2**40),
                   np.float16(0.25).tobytes(), b"\xff"]
    # every parameter's bytes start at an 8-byte-aligned address
    pointers = (ctypes.c_void_p * len(params)).from_address(packer.pack([x, 0.5, True, 1.5, 0, 0, 0]))
    assert all(p % 8 == 0 for p in pointers)


def test_bad_values_raise_launch_errors_naming_the_argument():
    packer = packing.ArgPacker([P("ptr", 0), P("dim", 0, 0), P("scalar", 1, dtype=tj.int32)],
                               kernel="k")
    big = KernelArray(0x1000, (2**31,), (1,), tj.float32, 0)
    with pytest.raises(LaunchError, match=r"kernel 'k'.*argument 0: parameter dim\[axis 0\]"):
        packer.pack([big, 1])
    small = KernelArray(0x1000, (8,), (1,), tj.float32, 0)
    with pytest.raises(LaunchError, match="argument 1: parameter scalar .*2147483648"):
        packer.pack([small, 2**31])
    with pytest.raises(LaunchError, match="argument 1: parameter scalar .*1.5"):
        packer.pack([small, 1.5])
    with pytest.raises(LaunchError, match="argument 0: parameter ptr .*missing"):
        packer.pack([3, 1])
    with pytest.raises(LaunchError, match="argument 1: .*missing"):
        packer.pack([small])


def test_kernel_without_params_passes_null():
    assert packing.ArgPacker([]).pack([]) is None


def test_each_thread_packs_into_its_own_buffer():
    packer = packing.ArgPacker([P("scalar", 0, dtype=tj.int64)])
    all_packed = threading.Barrier(3)
    seen = {}

    def pack(value):
        address = packer.pack([value])
        all_packed.wait()           # every thread has packed before anyone reads back
        seen[value] = (address, read_params(address, [8])[0])
        all_packed.wait()           # keep the thread (and its buffer) alive until all have read
    threads = [threading.Thread(target=pack, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    pack(3)
    for t in threads:
        t.join()
    assert len({address for address, _ in seen.values()}) == 3
    assert {v: data for v, (_, data) in seen.items()} == {v: struct.pack("<q", v) for v in (1, 2, 3)}


# --- launch with an injected launch function -----------------------------------------------------
class Recorder:
    """A fake driver launch: records geometry, stream and the packed parameter bytes."""

    def __init__(self, sizes):
        self.sizes, self.calls = sizes, []

    def __call__(self, kernel, grid, block_threads, stream, address):
        values = read_params(address, self.sizes) if address else []
        self.calls.append((tuple(grid), block_threads, stream, values))


def fake_kernel(recorder, max_grid=(2**31 - 1, 65535, 65535), max_threads=1024, num_regs=32):
    return LoadedKernel(function=None, device=0, name="add_one", shared_bytes=0,
                        max_grid=max_grid, max_threads=max_threads, num_regs=num_regs,
                        launch_fn=recorder)


ADD_ONE_PARAMS = [P("ptr", 0, dtype=tj.float32), P("dim", 0, 0)]


def test_launch_packs_by_params_and_forwards_geometry_and_stream():
    rec = Recorder([8, 4])
    kernel = fake_kernel(rec)
    x = KernelArray(0xABC000, (1000,), (1,), tj.float32, 0)
    kernel.launch((4, 1, 1), 256, [x], ADD_ONE_PARAMS, stream=0x55)
    assert rec.calls == [((4, 1, 1), 256, 0x55,
                          [struct.pack("<Q", 0xABC000), struct.pack("<i", 1000)])]


def test_relaunch_reuses_the_packer():
    kernel = fake_kernel(Recorder([8, 4]))
    x = KernelArray(0xABC000, (1000,), (1,), tj.float32, 0)
    kernel.launch((1, 1, 1), 32, [x], ADD_ONE_PARAMS)
    first = kernel._last[1]
    kernel.launch((1, 1, 1), 32, [x], ADD_ONE_PARAMS)
    kernel.launch((1, 1, 1), 32, [x], list(ADD_ONE_PARAMS))    # equal list, new object
    assert kernel._last[1] is first


@pytest.mark.parametrize("grid", [(2**31, 1, 1), (1, 65536, 1), (1, 1, 70000)])
def test_grid_over_the_device_limit_is_refused_before_launch(grid):
    rec = Recorder([8, 4])
    x = KernelArray(0xABC000, (1000,), (1,), tj.float32, 0)
    with pytest.raises(LaunchError, match=r"kernel 'add_one'.*exceeds the device limit"):
        fake_kernel(rec).launch(grid, 128, [x], ADD_ONE_PARAMS)
    assert rec.calls == []


def test_too_many_threads_for_the_registers_is_refused():
    rec = Recorder([8, 4])
    x = KernelArray(0xABC000, (1000,), (1,), tj.float32, 0)
    kernel = fake_kernel(rec, max_threads=512, num_regs=128)
    with pytest.raises(LaunchError, match="128 registers per thread.*at most 512 threads"):
        kernel.launch((1, 1, 1), 1024, [x], ADD_ONE_PARAMS)
    for bad_grid in [(-1, 1, 1), (4, 1), (1, 1, 1, 1)]:
        with pytest.raises(LaunchError, match="grid must be 3 non-negative ints"):
            kernel.launch(bad_grid, 128, [x], ADD_ONE_PARAMS)
    assert rec.calls == []


def test_empty_grid_launches_nothing():
    rec = Recorder([8, 4])
    fake_kernel(rec).launch((0, 1, 1), 128, [KernelArray(0, (0,), (1,), tj.float32, 0)],
                            ADD_ONE_PARAMS)
    assert rec.calls == []


def test_select_device():
    assert select_device([None, None], lambda: 3) == 3
    assert select_device([1, None, 1], lambda: 0) == 1
    with pytest.raises(LaunchError, match=r"different devices \[0, 1\]"):
        select_device([0, 1], lambda: 0)


def test_launch_arrays_runs_on_the_device_and_stream_of_the_arrays(monkeypatch):
    monkeypatch.setattr(driver, "current_device", lambda: 0)
    monkeypatch.setattr(driver, "pointer_device", lambda ptr: 1)
    rec = Recorder([8, 4, 8, 4])
    devices = []

    def kernel_for_device(device):
        devices.append(device)
        return fake_kernel(rec)
    x = FakeInterfaceArray(0x1000, (10,), "<f4", stream=0x77)
    y = DeviceArray((10,), tj.float32, ptr=0x2000, device=1)
    params = ADD_ONE_PARAMS + [P("ptr", 1, dtype=tj.float32), P("dim", 1, 0)]
    launch.launch_arrays(kernel_for_device, (1, 1, 1), 32, [x, y], params)
    assert devices == [1]
    assert rec.calls[0][2] == 0x77              # the interface's stream
    assert rec.calls[0][3][0] == struct.pack("<Q", 0x1000)
    assert rec.calls[0][3][2] == struct.pack("<Q", 0x2000)
    z = DeviceArray((10,), tj.float32, ptr=0x3000, device=0)
    with pytest.raises(LaunchError, match="different devices"):
        launch.launch_arrays(kernel_for_device, (1, 1, 1), 32, [x, z], params)


def test_launch_arrays_shapes_the_grid_on_the_kernel_of_the_arrays_device(monkeypatch):
    # a persistent kernel's grid comes from the occupancy of the device the arrays live on,
    # not from the current device
    monkeypatch.setattr(driver, "current_device", lambda: 0)
    rec = Recorder([8, 4, 4])
    kernels = {d: fake_kernel(rec) for d in (0, 1)}
    seen = []

    def geometry(kernel, grid, views):
        seen.append(kernel)
        return (3, 1, 1), list(views) + [grid[0]]
    y = DeviceArray((10,), tj.float32, ptr=0x2000, device=1)
    launch.launch_arrays(kernels.__getitem__, (40, 1, 1), 32, [y], ADD_ONE_PARAMS + [P("scalar", 1, dtype=tj.int32)],
                         geometry=geometry)
    assert seen == [kernels[1]]
    assert rec.calls[0][0] == (3, 1, 1)
    assert rec.calls[0][3][-1] == struct.pack("<i", 40)


# --- arrays --------------------------------------------------------------------------------------
class FakeInterfaceArray:
    """An object exposing ``__cuda_array_interface__`` the way CuPy and numba do."""

    def __init__(self, ptr, shape, typestr, strides=None, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3, "stream": stream}


def test_cuda_array_interface_is_normalised(monkeypatch):
    monkeypatch.setattr(driver, "pointer_device", lambda ptr: 2)
    view = as_kernel_array(FakeInterfaceArray(0x1000, (4, 6), "<f2", strides=(24, 2), stream=5))
    assert (view.ptr, view.shape, view.strides, view.dtype, view.device, view.stream) == \
        (0x1000, (4, 6), (12, 1), tj.float16, 2, 5)
    contiguous = as_kernel_array(FakeInterfaceArray(0x1000, (4, 6), "<i4"))
    assert contiguous.strides == (6, 1) and contiguous.dtype == tj.int32
    with pytest.raises(LaunchError, match="not multiples of the item size"):
        as_kernel_array(FakeInterfaceArray(0x1000, (4,), "<f4", strides=(6,)))
    with pytest.raises(LaunchError, match="complex64 is not supported"):
        as_kernel_array(FakeInterfaceArray(0x1000, (4,), "<c8"))


def test_cuda_array_interface_in_host_memory_is_refused(monkeypatch):
    monkeypatch.setattr(driver, "pointer_device", lambda ptr: None)
    with pytest.raises(LaunchError, match="host memory"):
        as_kernel_array(FakeInterfaceArray(0x1000, (4,), "<f4"))


class FakeCudaDLPack:
    """Re-labels a NumPy array's DLPack export as CUDA memory, to test the capsule reader."""

    def __init__(self, array, device_type=2, device_id=1):
        self.array, self.device = array, (device_type, device_id)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint32, np.float16, np.bool_])
def test_dlpack_capsule_is_read_without_copying(dtype):
    base = np.zeros((6, 8), dtype)
    view_of = base[1:, ::2]         # offset and non-unit strides
    view = as_kernel_array(FakeCudaDLPack(view_of))
    assert view.ptr == view_of.ctypes.data
    assert view.shape == (5, 4) and view.strides == (8, 2)
    assert view.dtype == tj.dtypes.from_numpy(dtype) and view.device == 1
    assert view.stream == 1         # the legacy default stream, as promised to the producer


def test_dlpack_host_memory_and_unknown_objects_are_refused():
    with pytest.raises(LaunchError, match="host memory"):
        as_kernel_array(FakeCudaDLPack(np.zeros(3, np.float32), device_type=1))
    with pytest.raises(LaunchError, match="cannot pass a list as an array argument"):
        as_kernel_array([1.0, 2.0])


def test_device_array_view_of_foreign_memory():
    a = DeviceArray((4, 3), "float32", ptr=0x10000, device=0, owner="keepalive")
    assert (a.shape, a.strides, a.size, a.nbytes, a.ndim, len(a)) == ((4, 3), (3, 1), 12, 48, 2, 4)
    assert a.dtype == tj.float32 and a.device == 0 and a.ptr == 0x10000
    assert a.__cuda_array_interface__ == {"shape": (4, 3), "typestr": "<f4", "version": 3,
                                          "data": (0x10000, False), "strides": None,
                                          "stream": None}
    t = DeviceArray((3, 4), tj.bfloat16, strides=(1, 3), ptr=0x10000, device=0)
    assert t.__cuda_array_interface__["strides"] == (2, 6)
    view = as_kernel_array(t)
    assert (view.ptr, view.shape, view.strides, view.dtype, view.device) == \
        (0x10000, (3, 4), (1, 3), tj.bfloat16, 0)
    with pytest.raises(LaunchError, match="bad strides"):
        DeviceArray((3,), tj.float32, strides=(-1,), ptr=0x10000, device=0)
    with pytest.raises(LaunchError, match="complex128 is not supported"):
        DeviceArray((3,), np.complex128, ptr=0x10000, device=0)


def test_span_and_contiguous_strides():
    assert arrays.contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert arrays.span((2, 3), (3, 1)) == 6
    assert arrays.span((3, 4), (1, 3)) == 12
    assert arrays.span((2, 0), (1, 1)) == 0


def test_torch_cpu_tensor_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(LaunchError, match="on cpu was passed where GPU memory is needed"):
        as_kernel_array(torch.zeros(3))


# --- the whole GPU path on a fake driver ---------------------------------------------------------
class FakeDriver:
    """Enough of ``cuda.bindings.driver`` to run the runtime's plumbing on host memory: device
    pointers are host addresses and launching ``add_one`` runs it in NumPy on the packed
    parameters, so allocation, copies, loading, packing and copy-back are checked without a GPU."""

    def __init__(self):
        real = driver.cuda.__wrapped__()
        for name in ("CUresult", "CUjit_option", "CUfunction_attribute", "CUdevice_attribute"):
            setattr(self, name, getattr(real, name))
        self.ok = real.CUresult.CUDA_SUCCESS
        self.memory, self.launches, self.attributes_set, self.images = {}, [], [], []

    def cuDeviceGetCount(self):
        return self.ok, 1

    def cuDeviceGet(self, ordinal):
        return self.ok, ordinal

    def cuDevicePrimaryCtxRetain(self, device):
        return self.ok, f"context {device}"

    def cuCtxSetCurrent(self, ctx):
        return (self.ok,)

    def cuCtxSynchronize(self):
        return (self.ok,)

    def cuStreamSynchronize(self, stream):
        return (self.ok,)

    def cuMemAlloc(self, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(buf)] = buf
        return self.ok, ctypes.addressof(buf)

    def cuMemFree(self, ptr):
        self.memory.pop(ptr, None)
        return (self.ok,)

    def cuMemcpyHtoD(self, dst, src, nbytes, stream=None):
        ctypes.memmove(dst, src, nbytes)
        return (self.ok,)

    cuMemcpyDtoH = cuMemcpyHtoDAsync = cuMemcpyDtoHAsync = cuMemcpyHtoD

    def cuModuleLoadDataEx(self, image, count, options, values):
        assert count == len(options) == len(values)
        self.images.append(image)
        if b"syntax" in image:
            log = values[options.index(self.CUjit_option.CU_JIT_ERROR_LOG_BUFFER)]
            log[:40] = b"ptxas: line 3; error: syntax error\0".ljust(40, b"\0")
            return self.CUresult.CUDA_ERROR_INVALID_PTX, None
        return self.ok, "module"

    def cuModuleGetFunction(self, module, name):
        if name != b"add_one":
            return self.CUresult.CUDA_ERROR_NOT_FOUND, None
        return self.ok, "add_one function"

    def cuFuncGetAttribute(self, attribute, function):
        a = self.CUfunction_attribute
        return self.ok, {a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: 0, a.CU_FUNC_ATTRIBUTE_NUM_REGS: 20,
                         a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024}[attribute]

    def cuFuncSetAttribute(self, function, attribute, value):
        self.attributes_set.append((attribute, value))
        return (self.ok,)

    def cuModuleUnload(self, module):
        return (self.ok,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        ptr, n = (struct.unpack("<Q", read_params(params, [8, 4])[0])[0],
                  struct.unpack("<i", read_params(params, [8, 4])[1])[0])
        x = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
        x[:min(n, gx * bx)] += 1                 # what add_one does on the GPU
        self.launches.append(((gx, gy, gz), bx, shared, stream))
        return (self.ok,)


FAKE_PROPS = driver.DeviceProperties("Fake GPU", (9, 0), 132, 1024, 48 * 1024, 227 * 1024,
                                     (2**31 - 1, 65535, 65535), 12080)


@pytest.fixture
def fake_driver(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(driver, "cuda", lambda: fake)
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(driver, "device_properties", lambda device: FAKE_PROPS)
    monkeypatch.setattr(driver, "current_device", lambda: 0)
    monkeypatch.setattr(driver, "pointer_device", lambda ptr: 0)
    monkeypatch.setattr(driver, "_contexts", {})
    # everything through the fake cuda-python, never the machine's libcuda (the ctypes binding)
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cuda-python")
    monkeypatch.setattr(driver, "lib", lambda: None)
    monkeypatch.setattr(launch, "_driver_launch_impl", None)
    return fake


def test_fake_driver_device_array_round_trip(fake_driver):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    dev = tj.to_device(host)
    assert dev.ptr in fake_driver.memory and dev.device == 0
    np.testing.assert_array_equal(dev.numpy(), host)
    transposed = DeviceArray((4, 3), tj.float32, strides=(1, 4), ptr=dev.ptr, owner=dev)
    np.testing.assert_array_equal(transposed.numpy(), host.T)
    assert tj.empty((0,), tj.float32).numpy().shape == (0,)
    ptr = dev.ptr
    del dev, transposed
    import gc
    gc.collect()
    assert ptr not in fake_driver.memory        # freed when the last user went away


def test_fake_driver_load_and_launch_numpy_with_copy_back(fake_driver):
    kernel = launch.load(b".version 7.0\n.entry add_one()", "add_one", 0, 0)
    assert fake_driver.images[-1].endswith(b"\0")       # PTX text handed over NUL-terminated
    x = np.arange(1000, dtype=np.float32)
    base = np.zeros(2000, np.float32)
    launch.launch_arrays(lambda device: kernel, (8, 1, 1), 128, [x], ADD_ONE_PARAMS, writes=[0])
    launch.launch_arrays(lambda device: kernel, (8, 1, 1), 128, [base[::2]], ADD_ONE_PARAMS,
                         writes=[0])
    np.testing.assert_array_equal(x, np.arange(1000) + 1)
    np.testing.assert_array_equal(base[::2], 1)
    np.testing.assert_array_equal(base[1::2], 0)
    read_only = np.ones(10, np.float32)
    launch.launch_arrays(lambda device: kernel, (1, 1, 1), 128, [read_only], ADD_ONE_PARAMS)
    np.testing.assert_array_equal(read_only, 1)        # not in `writes`: not copied back
    assert fake_driver.launches[0] == ((8, 1, 1), 128, 0, 0)


def test_fake_driver_surfaces_the_jit_log_and_missing_names(fake_driver):
    with pytest.raises(DeviceError, match=r"(?s)CUDA_ERROR_INVALID_PTX.*driver JIT log:.*syntax error"):
        launch.load(b"syntax error here", "add_one", 0, 0)
    with pytest.raises(DeviceError, match=r"cuModuleGetFunction\('other'\) failed"):
        launch.load(b".version 7.0", "other", 0, 0)


def test_fake_driver_opts_into_large_shared_memory(fake_driver):
    launch.load(b"ptx", "add_one", 40 * 1024, 0)
    assert fake_driver.attributes_set == []
    launch.load(b"ptx", "add_one", 100 * 1024, 0)
    assert fake_driver.attributes_set == [
        (fake_driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 * 1024)]
    with pytest.raises(LaunchError, match="allows at most 232448"):
        launch.load(b"ptx", "add_one", 228 * 1024, 0)
    cubin = b"\x7fELF" + bytes(60)
    launch.load(cubin, "add_one", 0, 0)
    assert fake_driver.images[-1] == cubin              # binary images are passed unchanged


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.bool_, np.int64,
                                   "bfloat16", "float8_e5m2", "float8_e4m3fn"])
def test_gather_strided_reads_every_dtype_at_its_strides(dtype):
    # DeviceArray.numpy() copies device memory back through this: ml_dtypes' float8_e5m2 made
    # NumPy's as_strided fail ('<f1' not understood), and every fp8 output on the GPU with it
    dt = np.dtype(getattr(__import__("ml_dtypes"), dtype)) if isinstance(dtype, str) else np.dtype(dtype)
    flat = (np.arange(40) % 5 + 1).astype(np.float32).astype(dt)
    got = arrays.gather_strided(flat, (3, 4), (10, 2))
    want = flat.reshape(4, 10)[:3, ::2][:, :4]
    assert got.dtype == dt and got.flags.c_contiguous
    assert np.array_equal(got.view(f"u{dt.itemsize}"), want.view(f"u{dt.itemsize}"))


# --- the ctypes binding to libcuda (runtime.launch.LibcudaLaunch), on a fake library ------------
def _fake_libcuda(launch_result=0, set_result=0):
    """libcuda's three launch functions, recording their arguments (c_void_p by value), and its
    two error-naming functions (answering as the driver does for CUDA_ERROR_INVALID_VALUE)."""
    import ctypes
    from types import SimpleNamespace
    calls, state = [], {"current": None}

    def record(name, impl):
        def call(*args):
            calls.append((name, tuple(a.value if isinstance(a, ctypes.c_void_p) else a for a in args)))
            return impl(*args)
        return call

    def get_current(ref):
        ref._obj.value = state["current"]
        return 0

    def set_current(context):
        state["current"] = context.value if isinstance(context, ctypes.c_void_p) else context
        return set_result

    def error_text(words):
        def answer(status, ref):
            if status != 1:
                return 1                        # CUDA_ERROR_INVALID_VALUE: an unknown status
            ref._obj.value = words
            return 0
        return answer
    lib = SimpleNamespace(cuLaunchKernel=record("launch", lambda *a: launch_result),
                          cuCtxGetCurrent=record("get", get_current), cuCtxSetCurrent=record("set", set_current),
                          cuGetErrorName=error_text(b"CUDA_ERROR_INVALID_VALUE"),
                          cuGetErrorString=error_text(b"invalid argument"))
    return lib, calls


def test_the_ctypes_binding_makes_the_context_current_only_when_another_is():
    from types import SimpleNamespace
    from tilejit.runtime.launch import LibcudaLaunch
    lib, calls = _fake_libcuda()
    kernel = SimpleNamespace(function=0x1000, context=0x2000, shared_bytes=64, name="k")
    launch = LibcudaLaunch(lib)
    launch(kernel, (3, 2, 1), 128, 0x55, 0x7000)
    launch(kernel, (4, 1, 1), 256, None, 0x7000)
    assert [c[0] for c in calls] == ["get", "set", "launch", "get", "launch"]
    assert calls[1][1] == (0x2000,)
    assert calls[2][1] == (0x1000, 3, 2, 1, 128, 1, 1, 64, 0x55, 0x7000, None)
    assert calls[4][1] == (0x1000, 4, 1, 1, 256, 1, 1, 64, None, 0x7000, None)     # the legacy stream


@pytest.mark.parametrize("failing", ["cuLaunchKernel", "cuCtxSetCurrent"])
def test_the_ctypes_binding_names_the_driver_error_from_libcuda(failing):
    from types import SimpleNamespace
    from tilejit.runtime.launch import LibcudaLaunch
    lib, calls = _fake_libcuda(**{"launch_result" if failing == "cuLaunchKernel" else "set_result": 1})
    kernel = SimpleNamespace(function=0x1000, context=0x2000, shared_bytes=0, name="add_one")
    with pytest.raises(tj.DeviceError, match=rf"{failing} failed: CUDA_ERROR_INVALID_VALUE \(invalid argument\)") as err:
        LibcudaLaunch(lib)(kernel, (1, 1, 1), 32, None, 0x7000)
    assert "add_one" in str(err.value)
    assert ("launch" in [c[0] for c in calls]) is (failing == "cuLaunchKernel")    # nothing launched after a failed set


def test_the_launch_binding_is_checked_and_falls_back_to_cuda_python(monkeypatch):
    from tilejit.runtime import launch
    monkeypatch.setattr(launch, "_driver_launch_impl", None)
    monkeypatch.setattr(launch.LibcudaLaunch, "open", classmethod(lambda cls: None))     # no libcuda here
    assert launch.use_binding("ctypes") == "cuda-python"
    assert launch._driver_launch_impl is launch._cuda_python_launch
    with pytest.raises(tj.LaunchError, match="TILEJIT_LAUNCH_BINDING"):
        launch.use_binding("cffi")


def test_the_ctypes_binding_hands_values_ctypes_would_mangle_to_cuda_python(monkeypatch):
    """Without argtypes ctypes would pass a NumPy integer wrongly (or refuse it): such a launch
    goes through cuda-python, and libcuda's cuLaunchKernel is not called."""
    from types import SimpleNamespace
    from tilejit.runtime import launch as launch_module
    lib, calls = _fake_libcuda()
    taken = []
    monkeypatch.setattr(launch_module, "_cuda_python_launch", lambda *a: taken.append(a[1]))
    kernel = SimpleNamespace(function=0x1000, context=0x2000, shared_bytes=0, name="k")
    launch_module.LibcudaLaunch(lib)(kernel, (np.int64(2), 1, 1), 32, None, 0x7000)
    launch_module.LibcudaLaunch(lib)(kernel, (2, 1, 1), np.int32(32), None, 0x7000)
    assert taken == [(np.int64(2), 1, 1), (2, 1, 1)]
    assert "launch" not in [c[0] for c in calls]


def _artifact_loading(monkeypatch, refuse):
    """A CudaArtifact with a cubin and PTX, and the images ``launch.load`` was given (it raises
    DeviceError for those in ``refuse``)."""
    from tilejit.backends.cuda import CudaArtifact
    tried = []

    def fake_load(image, name, shared, device):
        tried.append(bytes(image))
        if bytes(image) in refuse:
            raise DeviceError(f"cuModuleLoadDataEx failed: refused {bytes(image)[:5]!r}", kernel=name)
        return ("loaded", bytes(image))
    monkeypatch.setattr(launch, "load", fake_load)
    art = CudaArtifact("k", [], (0,), 4, 0, ".version 8.4", b"\x7fELFcubin", "", "", 64, 0)
    return art, tried


def test_a_cubin_the_driver_refuses_falls_back_to_the_ptx(monkeypatch):
    """A cubin made by a toolkit's ptxas newer than the driver: the driver JIT-compiles the PTX
    instead, once a device, and a good cubin is loaded alone."""
    art, tried = _artifact_loading(monkeypatch, refuse={b"\x7fELFcubin"})
    assert art.kernel_for_device(0) == ("loaded", b".version 8.4")
    assert art.kernel_for_device(0) == ("loaded", b".version 8.4")
    assert tried == [b"\x7fELFcubin", b".version 8.4"]
    art, tried = _artifact_loading(monkeypatch, refuse=set())
    assert art.kernel_for_device(1) == ("loaded", b"\x7fELFcubin") and tried == [b"\x7fELFcubin"]


def test_when_both_images_are_refused_the_error_gives_both_reasons(monkeypatch):
    art, tried = _artifact_loading(monkeypatch, refuse={b"\x7fELFcubin", b".version 8.4"})
    with pytest.raises(DeviceError) as info:
        art.kernel_for_device(0)
    assert "in kernel 'k'" in str(info.value) and "refused b'.vers'" in str(info.value)
    assert "(the cubin was refused first: cuModuleLoadDataEx failed: refused b'\\x7fELF" in str(info.value)
    assert tried == [b"\x7fELFcubin", b".version 8.4"] and not art.loaded
