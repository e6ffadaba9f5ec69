"""TMA descriptors on the host: the encoding arguments, the rules that send an array to the
loop without TMA, and the packing of a 128-byte map parameter (the driver call is a GPU test)."""
import ctypes
import struct

import pytest

import tilejit as tj
from tilejit.runtime import packing, tensormap
from tilejit.runtime.arrays import KernelArray
from tilejit.simt import ParamDesc

from conftest import HAVE_GPU


def test_tiled_args_are_innermost_first_with_byte_strides():
    args = tensormap.tiled_args(0x1000, (300, 7, 64), (7 * 64, 64, 1), tj.bfloat16, (1, 64, 64), 128)
    assert args.rank == 3 and args.address == 0x1000
    assert args.dims == (64, 7, 300)
    assert args.strides == (128, 7 * 128)
    assert args.box == (64, 64, 1)
    assert args.swizzle == 3 and args.data_type == 9
    assert tensormap.tiled_args(0x1000, (8, 32), (32, 1), tj.float16, (8, 32), 64).swizzle == 2
    assert tensormap.tiled_args(0x1000, (8, 32), (32, 1), tj.float8e4m3, (8, 32), 32).data_type == 0


@pytest.mark.parametrize("ptr, shape, strides", [
    (0x1008, (64, 64), (64, 1)),          # base not 16-byte aligned
    (0x1000, (64, 64), (1, 64)),          # inner dim strided
    (0x1000, (64, 60), (60, 1)),          # 120-byte rows
    (0x1000, (64, 64), (-64, 1)),         # a negative stride
    (0x1000, (0, 64), (64, 1)),           # empty
])
def test_arrays_that_break_tma_rules_get_no_map(ptr, shape, strides):
    assert tensormap.tiled_args(ptr, shape, strides, tj.bfloat16, (64, 64), 128) is None
    array = KernelArray(ptr, shape, strides, tj.bfloat16, 0)
    desc = ParamDesc("tensor_map", 0, None, tj.bfloat16, (64, 64), 128)
    assert tensormap.encode(array, desc) == tensormap.ZEROS


def test_rank_mismatch_is_a_compiler_error():
    with pytest.raises(ValueError, match="rank 2 with a box of 3"):
        tensormap.tiled_args(0x1000, (64, 64), (64, 1), tj.bfloat16, (1, 64, 64), 128)


def test_a_map_parameter_is_64_byte_aligned_between_8_byte_slots(monkeypatch):
    monkeypatch.setattr(tensormap, "_encode_tiled", lambda args: bytes(range(128)))
    tensormap._cache.clear()
    x = KernelArray(0x7F00_0000_0000, (128, 64), (64, 1), tj.bfloat16, 0)
    params = [ParamDesc("ptr", 0, None, tj.bfloat16), ParamDesc("scalar", 1, None, tj.int32),
              ParamDesc("tensor_map", 0, None, tj.bfloat16, (64, 64), 128),
              ParamDesc("dim", 0, 0, tj.int32)]
    assert packing.slot_offsets([packing.param_format(p) for p in params]) == ([0, 8, 64, 192], 200)
    packer = packing.ArgPacker(params, kernel="k")
    pointers = (ctypes.c_void_p * 4).from_address(packer.pack([x, 5]))
    assert pointers[2] % 64 == 0 and pointers[2] - pointers[0] == 64
    assert ctypes.string_at(pointers[0], 8) == struct.pack("<Q", 0x7F00_0000_0000)
    assert ctypes.string_at(pointers[1], 4) == struct.pack("<i", 5)
    assert ctypes.string_at(pointers[2], 128) == bytes(range(128))
    assert ctypes.string_at(pointers[3], 4) == struct.pack("<i", 128)
    # a second launch of the same view reuses the map; another view gets its own
    calls = []
    monkeypatch.setattr(tensormap, "_encode_tiled", lambda args: calls.append(args) or bytes(128))
    packer.pack([x, 5])
    assert calls == []
    packer.pack([KernelArray(0x7F00_0000_1000, (128, 64), (64, 1), tj.bfloat16, 0), 5])
    assert len(calls) == 1 and calls[0].address == 0x7F00_0000_1000


def test_driver_arguments_take_the_bindings_sized_integers():
    cuda = pytest.importorskip("cuda.bindings.driver")
    args = tensormap.tiled_args(1 << 20, (300, 64), (64, 1), tj.bfloat16, (128, 64), 128)
    got = tensormap.driver_args(cuda, args)
    assert [int(x) for x in got[3]] == [64, 300] and [int(x) for x in got[4]] == [128]
    assert [int(x) for x in got[5]] == [64, 128] and [int(x) for x in got[6]] == [1, 1]
    assert isinstance(got[3][0], cuda.cuuint64_t) and isinstance(got[5][0], cuda.cuuint32_t)
    assert int(got[8]) == 3 and int(got[0]) == 9


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="needs the CUDA driver")
def test_driver_encodes_a_map():
    from tilejit.runtime import driver
    driver.activate(0)
    args = tensormap.tiled_args(1 << 20, (4096, 4096), (4096, 1), tj.bfloat16, (128, 64), 128)
    raw = tensormap._encode_tiled(args)
    assert len(raw) == 128 and raw != bytes(128)


def test_the_limits_of_what_a_map_can_describe():
    bf = tj.bfloat16
    args = tensormap.tiled_args
    assert args(0x1000, (2,) * 5, (16, 16, 16, 8, 1), bf, (1,) * 5, 0).rank == 5
    with pytest.raises(ValueError, match="rank 6"):
        args(0x1000, (2,) * 6, (32, 16, 16, 16, 8, 1), bf, (1,) * 6, 0)
    with pytest.raises(ValueError, match="rank 0"):
        args(0x1000, (), (), bf, (), 0)
    assert args(0x1000, (8, 1), (8, 5), bf, (8, 1), 0) is not None      # an inner dim of 1: any stride
    assert args(0x1000, (8, 2), (8, 2), bf, (8, 2), 0) is None           # else it must be 1
    assert args(0x1000, (2**31 - 1, 8), (8, 1), bf, (8, 8), 0) is not None
    assert args(0x1000, (2**31, 8), (8, 1), bf, (8, 8), 0) is None
    assert args(0x1000, (8, 8), (8, 1), bf, (8, 8), 0).strides == (16,)   # 16 bytes: the least
    assert args(0x1000, (8, 8), ((2**40 - 16) // 2, 1), bf, (8, 8), 0) is not None
    assert args(0x1000, (8, 8), (2**39, 1), bf, (8, 8), 0) is None       # 2**40 bytes
    assert args(0x1010, (8, 8), (8, 1), bf, (8, 8), 0) is not None       # 16-byte aligned is enough
    assert args(0x1000, (64,), (1,), bf, (64,), 0).dims == (64,)           # rank 1
    with pytest.raises(ValueError, match="rank 2 with a box of 1"):
        args(0x1000, (8, 8), (8, 1), bf, (8,), 0)
    assert args(0x1000, (8, 8), (0, 1), bf, (8, 8), 0) is None           # a broadcast (stride 0) dim
    assert args(0x1000, (8, 8), (2**40, 1), bf, (8, 8), 0) is None       # 2**41 bytes
    assert args(0x1000, (2**32, 8), (8, 1), bf, (8, 8), 0) is None
    assert args(0x1000, (8, 8), (8, -1), bf, (8, 8), 0) is None          # the inner dim reversed
    assert args(0x1000, (8, 2, 4), (8, 4, 2), bf, (8, 2, 4), 0) is None  # rank 3, inner stride 2


def test_data_type_codes_are_the_drivers():
    cuda = pytest.importorskip("cuda.bindings.driver")
    names = {"uint8": "UINT8", "int8": "UINT8", "bool": "UINT8", "float8e4m3": "UINT8", "float8e5m2": "UINT8",
             "uint16": "UINT16", "int16": "UINT16",
             "uint32": "UINT32", "int32": "INT32", "uint64": "UINT64", "int64": "INT64", "float16": "FLOAT16",
             "float32": "FLOAT32", "float64": "FLOAT64", "bfloat16": "BFLOAT16"}
    for dtype, name in names.items():
        want = int(getattr(cuda.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}"))
        assert tensormap._DATA_TYPE[dtype] == want, dtype
    for span, name in ((0, "NONE"), (32, "32B"), (64, "64B"), (128, "128B")):
        assert tensormap._SWIZZLE[span] == int(getattr(cuda.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{name}"))


class _FakeDriver:
    """``cuTensorMapEncodeTiled`` answering ``status`` and a map whose 16 words count up."""

    def __init__(self, cuda, status=0):
        self.cuda, self.status, self.calls = cuda, status, []

    def __getattr__(self, name):
        return getattr(self.cuda, name)

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)
        opaque = type("Map", (), {"opaque": list(range(1, 17))})()
        return (self.status, opaque if self.status == 0 else None)


def test_a_map_is_the_drivers_16_words_and_a_refusal_is_a_launch_error(monkeypatch):
    cuda = pytest.importorskip("cuda.bindings.driver")
    from tilejit.errors import LaunchError
    from tilejit.runtime import driver
    args = tensormap.tiled_args(1 << 20, (64, 64), (64, 1), tj.bfloat16, (64, 64), 128)
    fake = _FakeDriver(cuda)
    monkeypatch.setattr(driver, "lib", lambda: None)       # the fake cuda-python, never the machine's libcuda
    monkeypatch.setattr(driver, "cuda", lambda: fake)
    assert tensormap._encode_tiled(args) == struct.pack("<16Q", *range(1, 17))
    assert [int(x) for x in fake.calls[0][3]] == [64, 64]
    monkeypatch.setattr(driver, "cuda", lambda: _FakeDriver(cuda, status=cuda.CUresult.CUDA_ERROR_INVALID_VALUE))
    with pytest.raises(LaunchError, match="cuTensorMapEncodeTiled failed: CUDA_ERROR_INVALID_VALUE"):
        tensormap._encode_tiled(args)


def test_the_map_cache_keeps_the_newest_views(monkeypatch):
    calls = []
    monkeypatch.setattr(tensormap, "_encode_tiled", lambda args: calls.append(args.address) or bytes(128))
    monkeypatch.setattr(tensormap, "CACHE_SIZE", 2)
    tensormap._cache.clear()
    desc = ParamDesc("tensor_map", 0, None, tj.bfloat16, (64, 64), 128)
    views = [KernelArray(0x10000 * (i + 1), (64, 64), (64, 1), tj.bfloat16, 0) for i in range(3)]
    for v in views + [views[2], views[0]]:
        tensormap.encode(v, desc)
    assert calls == [0x10000, 0x20000, 0x30000, 0x10000]     # the first view was evicted by the third
    assert len(tensormap._cache) == 2


def test_a_binding_that_refuses_an_argument_is_a_launch_error_naming_the_map(monkeypatch):
    from tilejit.errors import LaunchError

    def refuse(args):
        raise TypeError("Cannot convert int to cuuint32_t")
    monkeypatch.setattr(tensormap, "_encode_tiled", refuse)
    tensormap._cache.clear()
    view = KernelArray(0x40000, (64, 64), (64, 1), tj.bfloat16, 0)
    with pytest.raises(LaunchError, match=r"cannot build the TMA descriptor TiledArgs\(.*TypeError: Cannot convert"):
        tensormap.encode(view, ParamDesc("tensor_map", 0, None, tj.bfloat16, (64, 64), 128))
