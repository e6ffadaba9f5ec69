"""Integers of 16 bits or fewer convert to floats through float32's bits (``codegen.base``,
``MAGIC_INT_TO_FLOAT``): ``2**23 + u`` as bits, minus ``2**23`` (signed values offset by
``2**15`` first), exact, with no ``cvt`` (an eighth of the FP32 rate on sm_80/sm_90).  Every
value of every such type gives NumPy's result when the LLVM runs on the host, and the PTX of a
dequantising cast holds no int-to-float ``cvt``."""
import re

import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.codegen import base
from tilejit.codegen.host import host_eval
from tilejit.ir import TileOp


@pytest.mark.parametrize("src", [D.uint8, D.int8, D.uint16, D.int16, D.bool_], ids=lambda d: d.name)
@pytest.mark.parametrize("dst", [D.float32, D.float64], ids=lambda d: d.name)
def test_every_small_integer_converts_exactly(src, dst):
    if src.is_bool:
        x = np.array([False, True, True, False])
    else:
        info = np.iinfo(src.np)
        x = np.arange(info.min, info.max + 1).astype(src.np)
    got = host_eval(TileOp.CAST, [src], x, out=dst)
    np.testing.assert_array_equal(got, x.astype(dst.np))


@tj.kernel
def dequant(q, s, out, B: tj.constexpr):
    v = tj.load(q, (0,), (B,))
    tj.store(out, (0,), (v.to(tj.float32) * tj.load(s, (0,), (B,))).to(tj.bfloat16))


@pytest.mark.parametrize("magic", [True, False])
def test_a_dequantising_cast_has_no_int_to_float_cvt(monkeypatch, magic):
    from tilejit.backends.cuda import build
    monkeypatch.setattr(base, "MAGIC_INT_TO_FLOAT", magic)
    specs, consts, _ = dequant.specialise(dequant.bind(
        (np.zeros(256, np.uint8), np.zeros(256, np.float32), np.zeros(256, tj.bfloat16.np)), {"B": 256}))
    ptx = build(dequant.tile_ir(specs, consts), 4, "sm_90a")["ptx"]
    assert bool(re.search(r"cvt\.rn\.f32\.u(8|16|32)", ptx)) != magic
    assert bool(re.search(r"or\.b32\s+%r\d+, %r\d+, 1258291200;", ptx)) == magic      # 0x4B000000: 2**23
