"""``passes.lower_memory``: the alignment facts that allow 16-byte vector accesses
(``KnownMultiples``) and the index width of the element offsets, each read from IR text."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir, simt
from tilejit.passes import pipeline
from tilejit.passes.lower_memory import KnownMultiples


def multiples(body: str) -> dict[str, int]:
    """``%name -> multiple`` for every value defined in a function with ``body``."""
    fn = ir.parse_function("func @k(%0: int32) {\n" + body + "\n}")
    known = KnownMultiples(fn)
    names = ir.Printer()
    names.function(fn)
    return {names.name(r): known.of(r) for o in fn.walk() for r in o.results}


def test_constants():
    m = multiples("""  %1 = constant {value=12} : int32
  %2 = constant {value=-8} : int32
  %3 = constant {value=0} : int32
  %4 = constant {value=2.0} : float32""")
    assert m == {"%1": 12, "%2": 8, "%3": 1 << 30, "%4": 1}


def test_arithmetic_rules():
    """products multiply, sums and differences take the gcd, casts keep, shifts by a small
    constant multiply by 2**k; an unknown shift amount or value keeps what is known."""
    m = multiples("""  %1 = program_id {axis=0} : int32
  %2 = constant {value=4} : int32
  %3 = constant {value=6} : int32
  %4 = mul %2, %3 : int32
  %5 = mul %1, %3 : int32
  %6 = constant {value=18} : int32
  %7 = constant {value=12} : int32
  %8 = add %6, %7 : int32
  %9 = sub %6, %7 : int32
  %10 = cast %4 : int64
  %11 = constant {value=3} : int32
  %12 = shl %11, %2 : int32
  %13 = shl %11, %1 : int32
  %14 = constant {value=40} : int32
  %15 = shl %11, %14 : int32
  %16 = add %5, %1 : int32
  %17 = constant {value=0} : int32
  %18 = shl %3, %17 : int32
  %19 = constant {value=30} : int32
  %20 = shl %11, %19 : int32
  %21 = constant {value=-1} : int32
  %22 = shl %11, %21 : int32""")
    assert [m[f"%{i}"] for i in (1, 4, 5, 8, 9, 10, 12, 13, 15, 16, 18, 20, 22)] == [
        1, 24, 6, 6, 6, 24, 48, 3, 3, 1, 6, 3 << 30, 3]


def test_exact_divisions_keep_the_quotient_of_the_multiple():
    """``(p*x) // q`` and ``(p*x) >> k`` are multiples of ``p / q`` (``p / 2**k``) when that
    divides exactly (a packed 4-bit array's ``n // 2`` at ``n = pid * 64``: 32 bytes, so its
    loads stay 16-byte vectors); otherwise, or by a non-constant or non-positive divisor,
    nothing is known."""
    m = multiples("""  %1 = program_id {axis=0} : int32
  %2 = constant {value=64} : int32
  %3 = mul %1, %2 : int32
  %4 = constant {value=2} : int32
  %5 = floordiv %3, %4 : int32
  %6 = shr %3, %4 : int32
  %7 = constant {value=3} : int32
  %8 = floordiv %3, %7 : int32
  %9 = floordiv %3, %1 : int32
  %10 = constant {value=-2} : int32
  %11 = floordiv %3, %10 : int32
  %12 = constant {value=7} : int32
  %13 = shr %3, %12 : int32
  %14 = floordiv %3, %2 : int32""")
    assert [m[f"%{i}"] for i in (5, 6, 8, 9, 11, 13, 14)] == [32, 16, 1, 1, 1, 1, 1]


def test_a_loop_variable_is_a_multiple_of_the_gcd_of_its_start_and_step():
    """start 8, step 12: 4 (the bound, 96, plays no part)."""
    fn = ir.parse_function("""func @k(%0: int32) {
  %1 = constant {value=8} : int32
  %2 = constant {value=96} : int32
  %3 = constant {value=12} : int32
  for %1, %2, %3 {stages=0, unroll=False} {
    ^(%4: int32):
    yield
  }
}""")
    loop = next(o for o in fn.walk() if o.op is ir.TileOp.FOR)
    assert KnownMultiples(fn).of(loop.regions[0].args[0]) == 4


@tj.kernel
def copy_at(x, y, start, BLOCK: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (start,), (BLOCK,)))


@pytest.mark.parametrize("start,index_dtype", [(7, "int32"), (2**40, "int64")])
def test_an_int64_offset_makes_the_index_math_64_bit(start, index_dtype):
    """A 64-bit offset (a Python int past int32) computes element offsets in 64 bits, even on a
    small array: the offset alone can be past 2**31."""
    kernel = copy_at
    x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
    specs, consts, _ = kernel.specialise(kernel.bind((x, y, start), {"BLOCK": 64}))
    fn = pipeline.compile_to_simt(kernel.tile_ir(specs, consts), 2, "sm_90a")
    [load] = [o for o in fn.walk() if o.op is simt.SimtOp.LOAD_GLOBAL]
    assert str(load.operands[1].type.dtype) == index_dtype


@tj.kernel
def transpose_copy(x, y, BM: tj.constexpr, BN: tj.constexpr):
    tj.store(y, (0, 0), tj.trans(tj.load(x, (0, 0), (BM, BN))))


def store_vectors(kernel, args, consts, warps=4, target="sm_80") -> list[int]:
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    fn = pipeline.compile_to_simt(kernel.tile_ir(specs, consts), warps, target)
    return [o.attrs.vec for o in fn.walk() if o.op is simt.SimtOp.STORE_GLOBAL]


@pytest.mark.parametrize("out_dtype,vec", [(np.float32, 2), (tj.bfloat16.np, 8)])
def test_an_accumulator_is_stored_from_its_own_layout_only_when_its_sectors_are_whole(out_dtype, vec):
    """mma.sync accumulators hold 2 neighbours per lane: 8 bytes of float32 are stored as they
    are (vec 2); 4 bytes of bfloat16 go through shared memory into 16-byte stores (vec 8)."""
    from examples.matmul import matmul_kernel
    a, c = np.zeros((128, 128), tj.bfloat16.np), np.zeros((128, 128), out_dtype)
    assert store_vectors(matmul_kernel, (a, a, c), {"BM": 64, "BN": 64, "BK": 32}) == [vec]


def test_a_transposed_tile_is_stored_in_the_coalesced_layout():
    """``tj.trans`` leaves lanes running down the columns; the store takes the memory layout
    (16-byte vectors along the contiguous dim) rather than one element per lane."""
    x = np.zeros((64, 64), np.float32)
    assert store_vectors(transpose_copy, (x, x), {"BM": 64, "BN": 64}) == [4]


def store_shared_count(kernel, args, consts, warps=4) -> int:
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    fn = pipeline.compile_to_simt(kernel.tile_ir(specs, consts), warps, "sm_90a")
    return sum(o.op is simt.SimtOp.STORE_SHARED for o in fn.walk())


@tj.kernel
def transpose3(x, y, A: tj.constexpr, B: tj.constexpr, C: tj.constexpr):
    tj.store(y, (0, 0, 0), tj.trans(tj.load(x, (0, 0, 0), (A, B, C)), 0, 2, 1))


def test_the_store_layout_choice_on_other_shapes():
    """A non-square transpose and a rank-3 one go through the coalesced layout (16-byte
    vectors); a transposed row that becomes a (64, 1) column is stored as it is (no shared
    memory round trip for a last dim of 1), while a (64, 2) one is converted."""
    assert store_vectors(transpose_copy, (np.zeros((32, 64), np.float32), np.zeros((64, 32), np.float32)),
                         {"BM": 32, "BN": 64}) == [4]
    assert store_vectors(transpose3, (np.zeros((2, 32, 64), np.float32), np.zeros((2, 64, 32), np.float32)),
                         {"A": 2, "B": 32, "C": 64}) == [4]
    col = (np.zeros((1, 64), np.float32), np.zeros((64, 1), np.float32))
    assert store_shared_count(transpose_copy, col, {"BM": 1, "BN": 64}) == 0
    pair = (np.zeros((2, 64), np.float32), np.zeros((64, 2), np.float32))
    assert store_shared_count(transpose_copy, pair, {"BM": 2, "BN": 64}) > 0
    cols3 = (np.zeros((2, 1, 64), np.float32), np.zeros((2, 64, 1), np.float32))     # last dim 1 again
    assert store_shared_count(transpose3, cols3, {"A": 2, "B": 1, "C": 64}) == 0


@tj.kernel
def shifted_copy(x, y, start, BLOCK: tj.constexpr):
    tj.store(y, (0,), tj.load(x, (start,), (BLOCK,), other=-7.0))


def test_a_negative_offset_reads_other_before_the_array(monkeypatch):
    """Offset -1: element 0 of the block is before the array and reads ``other``; the lower
    bound of the edge mask is tested on emulate, which runs the lowered program."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x, y = np.arange(1, 9, dtype=np.float32), np.zeros(8, np.float32)
    shifted_copy[(1,)](x, y, -1, BLOCK=8)
    np.testing.assert_array_equal(y, [-7, 1, 2, 3, 4, 5, 6, 7])
