"""``runtime.libcuda``: libcuda's C functions through ctypes, checked on the CPU against a fake
library that records what each call received (ctypes objects by value) and answers like the
driver; its enum values against cuda-python's; and ``runtime.driver``/``runtime.launch`` taking
it when ``driver.lib()`` gives one.  Under ``-m gpu`` the real library runs the whole path."""
import ctypes
import struct

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.runtime import driver, launch, libcuda, tensormap
from tilejit.runtime.libcuda import Libcuda


def _value(a):
    if isinstance(a, ctypes._SimpleCData):
        return a.value
    if isinstance(a, ctypes.Array):
        return list(a)
    return a


class FakeLib:
    """The driver functions Libcuda calls: outputs written through their byref, calls recorded."""

    def __init__(self, attributes=None, fail=None):
        self.calls, self.attributes, self.fail = [], attributes or {}, fail or {}

    def __getattr__(self, name):
        if name.startswith("cu"):
            def call(*args):
                self.calls.append((name, args))
                if name in self.fail:
                    return self.fail[name]
                return getattr(self, "_" + name, lambda *a: 0)(*args)
            return call
        raise AttributeError(name)

    @staticmethod
    def _out(ref, value):
        ref._obj.value = value

    def _cuDeviceGet(self, ref, ordinal):
        self._out(ref, 100 + ordinal)
        return 0

    def _cuDeviceGetCount(self, ref):
        self._out(ref, 2)
        return 0

    def _cuDeviceGetAttribute(self, ref, attribute, device):
        self._out(ref, self.attributes.get(attribute, attribute * 10))
        return 0

    def _cuDeviceGetName(self, buf, size, device):
        buf.value = b"Fake H200"
        return 0

    def _cuDriverGetVersion(self, ref):
        self._out(ref, 13000)
        return 0

    def _cuGetErrorName(self, status, ref):
        self._out(ref, b"CUDA_ERROR_INVALID_VALUE")
        return 0

    def _cuGetErrorString(self, status, ref):
        self._out(ref, b"invalid argument")
        return 0


def test_the_enum_values_are_cuda_pythons():
    cu = pytest.importorskip("cuda.bindings.driver")
    A, F, J = cu.CUdevice_attribute, cu.CUfunction_attribute, cu.CUjit_option
    assert libcuda.DEV_MAX_THREADS_PER_BLOCK == int(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    assert libcuda.DEV_MAX_GRID_DIM == tuple(int(getattr(A, f"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{x}")) for x in "XYZ")
    assert libcuda.DEV_MAX_SHARED_MEMORY_PER_BLOCK == int(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
    assert libcuda.DEV_MULTIPROCESSOR_COUNT == int(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    assert libcuda.DEV_COMPUTE_CAPABILITY == (int(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                              int(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    assert libcuda.DEV_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN == int(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    assert (libcuda.FUNC_MAX_THREADS_PER_BLOCK, libcuda.FUNC_SHARED_SIZE_BYTES, libcuda.FUNC_NUM_REGS,
            libcuda.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES) == tuple(int(getattr(F, f"CU_FUNC_ATTRIBUTE_{n}")) for n in (
                "MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "NUM_REGS", "MAX_DYNAMIC_SHARED_SIZE_BYTES"))
    assert (libcuda.JIT_INFO_LOG_BUFFER, libcuda.JIT_INFO_LOG_BUFFER_SIZE_BYTES, libcuda.JIT_ERROR_LOG_BUFFER,
            libcuda.JIT_ERROR_LOG_BUFFER_SIZE_BYTES, libcuda.JIT_LOG_VERBOSE) == tuple(
                int(getattr(J, f"CU_JIT_{n}")) for n in ("INFO_LOG_BUFFER", "INFO_LOG_BUFFER_SIZE_BYTES",
                                                        "ERROR_LOG_BUFFER", "ERROR_LOG_BUFFER_SIZE_BYTES",
                                                        "LOG_VERBOSE"))


def test_device_properties_come_from_the_attributes(monkeypatch):
    fake = FakeLib({75: 9, 76: 0, 16: 132, 1: 1024, 8: 49152, 97: 232448, 5: 2**31 - 1, 6: 65535, 7: 65535})
    monkeypatch.setattr(driver, "lib", lambda: Libcuda(fake))
    monkeypatch.setattr(driver, "available", lambda: True)
    props = driver.device_properties.__wrapped__(1)
    assert props == driver.DeviceProperties("Fake H200", (9, 0), 132, 1024, 49152, 232448, (2**31 - 1, 65535, 65535), 13000)
    assert props.target == "sm_90a"
    assert ("cuDeviceGet", 1) in [(n, _value(a[1])) for n, a in fake.calls if n == "cuDeviceGet"]
    assert all(_value(a[2]) == 101 for n, a in fake.calls if n == "cuDeviceGetAttribute")   # device 1's handle


def test_a_failing_call_names_the_function_and_the_drivers_words():
    c = Libcuda(FakeLib(fail={"cuCtxGetDevice": 1}))
    with pytest.raises(tj.DeviceError, match=r"cuCtxGetDevice failed: CUDA_ERROR_INVALID_VALUE \(invalid argument\)"):
        c.current_device()


def test_pointers_and_sizes_go_as_64_bit_values():
    fake = FakeLib()
    c = Libcuda(fake)
    c.set_current(0x7F00_0000_1234)
    c.occupancy(0x7F00_0000_5678, 256, 3 << 32)
    (_, set_args), (_, occ_args) = fake.calls
    assert isinstance(set_args[0], ctypes.c_void_p) and set_args[0].value == 0x7F00_0000_1234
    assert isinstance(occ_args[1], ctypes.c_void_p) and occ_args[1].value == 0x7F00_0000_5678
    assert occ_args[2] == 256 and isinstance(occ_args[3], ctypes.c_size_t) and occ_args[3].value == 3 << 32


def test_the_tensor_map_is_encoded_aligned_with_the_arguments_innermost_first():
    fake = FakeLib()
    seen = {}

    def encode(out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob):
        seen.update(at=out.value, dtype=dtype, rank=rank, address=address.value, dims=list(dims),
                    strides=list(strides)[:rank - 1], box=list(box), element=list(element_strides),
                    rest=(interleave, swizzle, l2, oob))
        ctypes.memmove(out.value, struct.pack("<16Q", *range(1, 17)), 128)
        return 0
    fake._cuTensorMapEncodeTiled = encode
    args = tensormap.tiled_args(0x10_0000_0000, (300, 64), (64, 1), D.bfloat16, (128, 64), 128)
    raw = Libcuda(fake).encode_tiled(args)
    assert seen["at"] % 64 == 0
    assert seen == dict(at=seen["at"], dtype=9, rank=2, address=0x10_0000_0000, dims=[64, 300], strides=[128],
                        box=[64, 128], element=[1, 1], rest=(0, 3, tensormap.L2_PROMOTION_256B, 0))
    assert struct.unpack("<16Q", raw) == tuple(range(1, 17))


def test_a_module_that_fails_to_load_reports_the_jit_log(monkeypatch):
    fake = FakeLib()

    def load(module, image, n, options, values):
        assert n == 5 and list(options) == [libcuda.JIT_ERROR_LOG_BUFFER, libcuda.JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                                             libcuda.JIT_INFO_LOG_BUFFER, libcuda.JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                             libcuda.JIT_LOG_VERBOSE]
        assert values[1] == values[3] == launch.JIT_LOG_BYTES and values[4] == 1
        assert image.value.startswith(b".version")           # PTX, NUL-terminated
        ctypes.memmove(values[0], b"ptxas fatal: bad PTX\0", 21)
        return 218                                            # CUDA_ERROR_INVALID_PTX
    fake._cuModuleLoadDataEx = load
    monkeypatch.setattr(driver, "lib", lambda: Libcuda(fake))
    with pytest.raises(tj.DeviceError, match=r"(?s)cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_VALUE.*driver JIT log:\nptxas fatal: bad PTX"):
        launch._load_module(b".version 8.4\n", "k")


def test_loading_through_libcuda_opts_into_dynamic_shared_memory(monkeypatch):
    fake = FakeLib({97: 232448, 8: 49152, 5: 1 << 20, 6: 1 << 16, 7: 1 << 16})

    def load(module, image, n, options, values):
        module._obj.value = 0xABC0
        return 0

    def get_function(ref, module, name):
        assert module.value == 0xABC0 and name.value == b"kern"
        ref._obj.value = 0xF00
        return 0

    def attribute(ref, which, function):
        ref._obj.value = {libcuda.FUNC_SHARED_SIZE_BYTES: 1024, libcuda.FUNC_MAX_THREADS_PER_BLOCK: 256,
                          libcuda.FUNC_NUM_REGS: 128}[which]
        return 0
    fake._cuModuleLoadDataEx, fake._cuModuleGetFunction, fake._cuFuncGetAttribute = load, get_function, attribute
    fake._cuDevicePrimaryCtxRetain = lambda ref, device: FakeLib._out(ref, 0xC7C7) or 0
    monkeypatch.setattr(driver, "lib", lambda: Libcuda(fake))
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver, "device_properties", driver.device_properties.__wrapped__)
    kernel = launch.load(b"\x7fELF....", "kern", 100_000, 0)
    assert (kernel.function, kernel.module, kernel.context) == (0xF00, 0xABC0, 0xC7C7)
    assert (kernel.max_threads, kernel.num_regs) == (256, 128)
    opt_in = [a for n, a in fake.calls if n == "cuFuncSetAttribute"]
    assert [(_value(f), w, v) for f, w, v in opt_in] == [(0xF00, libcuda.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100_000)]


def test_the_binding_setting_picks_the_driver_library(monkeypatch):
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cuda-python")
    driver.lib.cache_clear()
    try:
        assert driver.lib() is None
        monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "ctypes")
        driver.lib.cache_clear()
        assert driver.lib() is Libcuda.open()           # None where libcuda.so.1 cannot be opened
        monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cffi")
        driver.lib.cache_clear()
        with pytest.raises(tj.LaunchError, match="TILEJIT_LAUNCH_BINDING"):
            driver.lib()
    finally:
        monkeypatch.undo()
        driver.lib.cache_clear()


@pytest.mark.gpu
def test_a_cache_hit_on_torch_tensors_imports_no_cuda_python(tmp_path):
    """A new process, TILEJIT_LAUNCH_BINDING=ctypes: a launch from the cache on torch tensors
    runs (checked against torch) without importing cuda.bindings."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    script = (
        "import sys, torch, tilejit as tj\n"
        "@tj.kernel\n"
        "def add(x, y, o, B: tj.constexpr):\n"
        "    i = tj.program_id(0) * B\n"
        "    tj.store(o, (i,), tj.load(x, (i,), (B,)) + tj.load(y, (i,), (B,)))\n"
        "x = torch.rand(5000, device='cuda'); y = torch.rand(5000, device='cuda'); o = torch.empty_like(x)\n"
        "add[(tj.cdiv(5000, 1024),)](x, y, o, B=1024)\n"
        "torch.cuda.synchronize()\n"
        "assert torch.equal(o, x + y)\n"
        "print('cuda.bindings' in sys.modules and 'cuda.bindings.driver' in sys.modules)\n")
    env = {**__import__("os").environ, "TILEJIT_LAUNCH_BINDING": "ctypes", "TILEJIT_CACHE_DIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    hit = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout.strip().splitlines()[-1] == "False"


def test_without_a_driver_library_no_gpu_is_found_without_importing_cuda_python():
    """On a machine with no libcuda (CI, a laptop), choosing the default backend asks
    ``driver.available()``, which must not import cuda-python (40-50 ms) to learn there is none."""
    import subprocess
    import sys
    if Libcuda.open() is not None:
        pytest.skip("this machine has libcuda")
    out = subprocess.run([sys.executable, "-c", "import sys\nfrom tilejit.runtime import driver\n"
                          "print(driver.available(), 'cuda.bindings.driver' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_wrong_binding_setting_is_named_not_taken_for_a_missing_gpu(monkeypatch):
    """With a driver library present, TILEJIT_LAUNCH_BINDING=cffi is a LaunchError naming the
    variable, not "no CUDA device is available"."""
    monkeypatch.setattr(Libcuda, "open", classmethod(lambda cls: Libcuda(FakeLib())))
    monkeypatch.setenv("TILEJIT_LAUNCH_BINDING", "cffi")
    driver.lib.cache_clear()
    driver.available.cache_clear()
    try:
        with pytest.raises(tj.LaunchError, match="TILEJIT_LAUNCH_BINDING must be 'ctypes' or 'cuda-python'"):
            driver.available()
    finally:
        monkeypatch.undo()
        driver.lib.cache_clear()
        driver.available.cache_clear()
