"""GPU tests of the CUDA runtime with hand-written PTX kernels: loading (and the driver's JIT
log on bad PTX), launching through the ParamDesc packer on NumPy, DeviceArray, CuPy, torch and
DLPack inputs, streams, resource limits. Run with ``pytest -m gpu`` on a machine with a GPU."""
import time

import numpy as np
import pytest

import tilejit as tj
from tilejit.errors import DeviceError, LaunchError
from tilejit.runtime import driver, launch
from tilejit.runtime.arrays import DeviceArray, as_kernel_array
from tilejit.simt import ParamDesc

pytestmark = pytest.mark.gpu

# x[i] += 1.0 for i < n.  Parameters: ptr(x), dim(x, 0)
ADD_ONE_PTX = r"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry add_one(.param .u64 x_ptr, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [x_ptr];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.s32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
"""
ADD_ONE_PARAMS = [ParamDesc("ptr", 0, None, tj.float32), ParamDesc("dim", 0, 0, tj.int32)]

# out[i] = a * x[i * stride] for i < n.  Parameters: ptr(x), dim(x, 0), stride(x, 0) as i64,
# scalar a (f32), ptr(out): checks the i64 stride and f32 scalar packing.
SCALE_STRIDED_PTX = r"""
.version 7.0
.target sm_80
.address_size 64

.visible .entry scale_strided(.param .u64 x, .param .u32 n, .param .u64 stride,
                              .param .f32 a, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [x];
    ld.param.u32 %r1, [n];
    ld.param.u64 %rd2, [stride];
    ld.param.f32 %f1, [a];
    ld.param.u64 %rd3, [out];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvt.s64.s32 %rd4, %r5;
    mul.lo.s64 %rd5, %rd4, %rd2;
    shl.b64 %rd5, %rd5, 2;
    cvta.to.global.u64 %rd6, %rd1;
    add.s64 %rd6, %rd6, %rd5;
    ld.global.f32 %f2, [%rd6];
    mul.f32 %f3, %f2, %f1;
    shl.b64 %rd7, %rd4, 2;
    cvta.to.global.u64 %rd8, %rd3;
    add.s64 %rd8, %rd8, %rd7;
    st.global.f32 [%rd8], %f3;
DONE:
    ret;
}
"""
SCALE_STRIDED_PARAMS = [ParamDesc("ptr", 0, None, tj.float32), ParamDesc("dim", 0, 0, tj.int32),
                        ParamDesc("stride", 0, 0, tj.int64), ParamDesc("scalar", 1, None, tj.float32),
                        ParamDesc("ptr", 2, None, tj.float32)]

# 256 threads: thread t stores t at byte 256*t of dynamic shared memory (64 KiB in all, over the
# 48 KiB default), then out[t] = the word thread (t+1)%256 stored.  Parameters: ptr(out)
SMEM_ROTATE_PTX = r"""
.version 7.0
.target sm_80
.address_size 64

.extern .shared .align 16 .b8 smem[];

.visible .entry smem_rotate(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, smem;
    shl.b32 %r3, %r1, 8;
    add.u32 %r4, %r2, %r3;
    st.shared.u32 [%r4], %r1;
    bar.sync 0;
    add.u32 %r5, %r1, 1;
    and.b32 %r5, %r5, 255;
    shl.b32 %r6, %r5, 8;
    add.u32 %r6, %r2, %r6;
    ld.shared.u32 %r7, [%r6];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    ret;
}
"""

BLOCK = 128


def grid_for(n: int):
    return (max(1, -(-n // BLOCK)), 1, 1)


@pytest.fixture(scope="module")
def add_one():
    return launch.load(ADD_ONE_PTX.encode(), "add_one", 0, 0)


def launch_add_one(kernel, x, **kwargs):
    n = x.shape[0]
    launch.launch_arrays(lambda device: kernel, grid_for(n), BLOCK, [x], ADD_ONE_PARAMS,
                         writes=[0], **kwargs)


# --- driver --------------------------------------------------------------------------------------
def test_device_properties_and_context():
    assert driver.available()
    props = driver.device_properties(0)
    assert props.compute_capability >= (8, 0), props
    assert props.sm_count > 0 and props.max_threads_per_block == 1024
    assert props.max_grid[0] == 2**31 - 1 and props.max_grid[1] == 65535
    assert props.max_shared_per_block_optin >= props.max_shared_per_block >= 48 * 1024
    assert props.driver_version >= 12000
    assert props.target.startswith("sm_")
    assert driver.context(0) is driver.context(0)       # retained once
    assert driver.current_device() == 0 or driver.device_count() > 1


def test_pointer_device():
    a = tj.empty((16,), tj.float32)
    assert driver.pointer_device(a.ptr) == a.device == 0
    host = np.zeros(4).ctypes.data
    try:        # unknown to the driver (LaunchError), or known host memory with HMM (None)
        assert driver.pointer_device(host) is None
    except LaunchError as e:
        assert "not CUDA memory" in str(e)


# --- arrays --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, tj.bfloat16.np, np.bool_])
def test_device_array_round_trip(dtype):
    host = (np.arange(1000) % 7).astype(dtype)
    dev = tj.to_device(host)
    assert dev.shape == (1000,) and dev.dtype == tj.dtypes.from_numpy(dtype)
    np.testing.assert_array_equal(dev.numpy(), host)


def test_device_array_strided_view_numpy():
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    dev = tj.to_device(host)
    transposed = DeviceArray((6, 4), tj.float32, strides=(1, 6), ptr=dev.ptr, owner=dev)
    np.testing.assert_array_equal(transposed.numpy(), host.T)
    assert tj.empty((0, 3), tj.float32).numpy().shape == (0, 3)


# --- launches ------------------------------------------------------------------------------------
def test_numpy_input_is_copied_in_and_back(add_one):
    x = np.linspace(-3, 3, 1000, dtype=np.float32)     # 1000: not a multiple of the block
    expected = x + 1
    launch_add_one(add_one, x)
    np.testing.assert_array_equal(x, expected)


def test_non_contiguous_numpy_input_is_written_back_in_place(add_one):
    base = np.zeros(2000, np.float32)
    launch_add_one(add_one, base[::2])
    np.testing.assert_array_equal(base[::2], 1)
    np.testing.assert_array_equal(base[1::2], 0)


def test_device_array_launch_with_the_packer(add_one):
    x = np.arange(5000, dtype=np.float32)
    dev = tj.to_device(x)
    view = as_kernel_array(dev)
    add_one.launch(grid_for(5000), BLOCK, [view], ADD_ONE_PARAMS)
    add_one.launch(grid_for(5000), BLOCK, [view], ADD_ONE_PARAMS)      # the cached packer
    np.testing.assert_array_equal(dev.numpy(), x + 2)


def test_int64_stride_and_float_scalar_parameters():
    kernel = launch.load(SCALE_STRIDED_PTX.encode(), "scale_strided", 0, 0)
    x = np.arange(3000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    # a strided view: every third element of x
    x_dev = tj.to_device(x)
    strided = DeviceArray((1000,), tj.float32, strides=(3,), ptr=x_dev.ptr, owner=x_dev)
    launch.launch_arrays(lambda device: kernel, grid_for(1000), BLOCK, [strided, 2.5, out],
                         SCALE_STRIDED_PARAMS, writes=[2])
    np.testing.assert_array_equal(out, x[::3] * 2.5)


def test_cupy_input(add_one):
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(3000, dtype=cupy.float32)
    launch_add_one(add_one, x)
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(3000, dtype=np.float32) + 1)


def test_cupy_reads_a_device_array_without_copy():
    cupy = pytest.importorskip("cupy")
    dev = tj.to_device(np.arange(10, dtype=np.float32))
    view = cupy.asarray(dev)
    assert view.data.ptr == dev.ptr
    np.testing.assert_array_equal(cupy.asnumpy(view), np.arange(10))


def test_torch_input(add_one):
    torch = pytest.importorskip("torch")
    x = torch.arange(3000, dtype=torch.float32, device="cuda")
    launch_add_one(add_one, x)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.cpu().numpy(), np.arange(3000, dtype=np.float32) + 1)


def test_torch_reads_a_device_array_without_copy():
    torch = pytest.importorskip("torch")
    dev = tj.to_device(np.arange(10, dtype=np.float32))
    view = torch.as_tensor(dev, device="cuda")
    assert view.data_ptr() == dev.ptr
    np.testing.assert_array_equal(view.cpu().numpy(), np.arange(10))


def test_launch_runs_on_torchs_current_non_default_stream(add_one, monkeypatch):
    """Work queued before us on a side stream must be ordered before our kernel: a long sleep
    then a fill on the stream; if we launched on another stream we would read the old values."""
    torch = pytest.importorskip("torch")
    streams = []
    real_launch = add_one._launch_fn

    def recording_launch(kernel, grid, block, stream, params):
        streams.append(stream)
        real_launch(kernel, grid, block, stream, params)
    monkeypatch.setattr(add_one, "_launch_fn", recording_launch)
    x = torch.zeros(1 << 20, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)       # ~tens of ms of GPU time on the side stream
        x.fill_(5.0)
        launch_add_one(add_one, x)
    assert streams == [side.cuda_stream] and side.cuda_stream != 0
    side.synchronize()
    assert torch.all(x == 6.0).item()


def test_generic_dlpack_input(add_one):
    torch = pytest.importorskip("torch")

    class OnlyDLPack:                       # hides torch's type so the DLPack path is taken
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    wrapped = OnlyDLPack(x)
    assert as_kernel_array(wrapped).ptr == x.data_ptr()
    launch.launch_arrays(lambda device: add_one, grid_for(1000), BLOCK, [wrapped],
                         ADD_ONE_PARAMS)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.cpu().numpy(), np.arange(1000, dtype=np.float32) + 1)


def test_cubin_from_nvjitlink_loads(add_one):
    from tilejit.codegen.ptxas import assemble
    cubin = assemble(ADD_ONE_PTX, driver.device_properties(0).target).cubin
    kernel = launch.load(cubin, "add_one", 0, 0)
    x = np.zeros(300, np.float32)
    launch_add_one(kernel, x)
    np.testing.assert_array_equal(x, 1)


def test_threads_launching_the_same_kernel_at_once(add_one):
    """Each thread packs into its own parameter buffer: no launch may see another's pointer."""
    import threading
    arrays = [tj.to_device(np.zeros(4096, np.float32)) for _ in range(4)]
    errors = []

    def work(dev):
        try:
            view = as_kernel_array(dev)
            for _ in range(50):
                add_one.launch(grid_for(4096), BLOCK, [view], ADD_ONE_PARAMS)
        except Exception as e:      # surfaced below: an exception in a thread is otherwise lost
            errors.append(e)
    threads = [threading.Thread(target=work, args=(a,)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for a in arrays:
        np.testing.assert_array_equal(a.numpy(), 50)


# --- limits and errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("grid", [(2**31, 1, 1), (1, 65536, 1), (1, 1, 65536)])
def test_grid_over_the_limit_raises_before_launch(add_one, grid):
    x = tj.to_device(np.zeros(4, np.float32))
    with pytest.raises(LaunchError, match="exceeds the device limit"):
        add_one.launch(grid, BLOCK, [as_kernel_array(x)], ADD_ONE_PARAMS)
    np.testing.assert_array_equal(x.numpy(), 0)


def test_too_many_threads_raise_before_launch(add_one):
    x = as_kernel_array(tj.to_device(np.zeros(4, np.float32)))
    with pytest.raises(LaunchError, match="threads per block"):
        add_one.launch((1, 1, 1), 2048, [x], ADD_ONE_PARAMS)


def test_ptx_syntax_error_surfaces_the_driver_log():
    broken = ADD_ONE_PTX.replace("add.f32 %f2, %f1, 0f3F800000;", "add.f32 %f2, %f1 0f3F800000")
    with pytest.raises(DeviceError) as info:
        launch.load(broken.encode(), "add_one", 0, 0)
    message = str(info.value)
    assert "cuModuleLoadDataEx failed" in message and "CUDA_ERROR_INVALID_PTX" in message
    assert "driver JIT log" in message and "error" in message.split("driver JIT log", 1)[1], message


def test_unknown_kernel_name_names_the_call():
    with pytest.raises(DeviceError, match="cuModuleGetFunction\\('nope'\\).*CUDA_ERROR_NOT_FOUND"):
        launch.load(ADD_ONE_PTX.encode(), "nope", 0, 0)


def test_dynamic_shared_memory_over_48k_is_opted_into():
    kernel = launch.load(SMEM_ROTATE_PTX.encode(), "smem_rotate", 64 * 1024, 0)
    out = np.zeros(256, np.uint32)
    launch.launch_arrays(lambda device: kernel, (1, 1, 1), 256, [out],
                         [ParamDesc("ptr", 0, None, tj.uint32)], writes=[0])
    np.testing.assert_array_equal(out, (np.arange(256) + 1) % 256)


def test_shared_memory_over_the_device_limit_is_refused():
    limit = driver.device_properties(0).max_shared_per_block_optin
    with pytest.raises(LaunchError, match="shared memory"):
        launch.load(SMEM_ROTATE_PTX.encode(), "smem_rotate", limit + 1, 0)


# --- overhead ------------------------------------------------------------------------------------
def test_python_launch_overhead_is_below_tritons(add_one):
    """Median host time of one launch through LoadedKernel.launch on a tiny grid, against the
    raw cuLaunchKernel call measured in the same run. Target: below Triton's 12.4 us."""
    x = as_kernel_array(tj.to_device(np.zeros(128, np.float32)))
    args = [x]
    cu = driver.cuda()
    packed = add_one._packer_for(ADD_ONE_PARAMS).pack(args)

    def per_call(fn, repeats=2000):
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            samples.append((time.perf_counter() - start) / repeats)
            driver.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        return sorted(samples)[2] * 1e6
    raw = per_call(lambda: cu.cuLaunchKernel(add_one.function, 1, 1, 1, 128, 1, 1, 0, 0, packed, 0))
    ours = per_call(lambda: add_one.launch((1, 1, 1), 128, args, ADD_ONE_PARAMS))
    print(f"\nlaunch overhead: tilejit {ours:.2f} us, raw cuLaunchKernel {raw:.2f} us")
    assert ours < 12.4, f"tilejit launch {ours:.2f} us (raw cuLaunchKernel {raw:.2f} us)"
