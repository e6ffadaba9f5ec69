"""The ``uniform_masks`` pass: IR text in -> text out for recognised and unrecognised masks, then
NumPy equivalence of masked kernels (attention included) on the interpret and emulate backends,
with masks that are sometimes, never and always all true."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit import ir
from tilejit.backends import interpret
from tilejit.examples import attention
from tilejit.ir import ConstAttrs, TileOp
from tilejit.passes import pipeline
from tilejit.passes.uniform_masks import uniform_masks
from tilejit.specs import ArraySpec, ScalarSpec

I32, F32, BOOL = D.int32, D.float32, D.bool_
LOC = ir.Loc("masks.py", 7)


# ------------------------------------------------------------------------------ IR text level
def masked_function(make_cond) -> ir.Function:
    """``where(make_cond(b, start, limit), 1.0, 0.0)`` (the pass does not need the result used)."""
    start, limit = ir.Value(ir.scalar(I32)), ir.Value(ir.scalar(I32))
    fn = ir.Function("f", ir.Block([start, limit], []), ["start", "limit"])
    b = ir.Builder(fn.body, LOC)
    cond = make_cond(b, start, limit)
    tile = ir.TileType(cond.type.shape, F32)
    one = b.create(TileOp.CONSTANT, [], [tile], ConstAttrs(1.0)).result
    zero = b.create(TileOp.CONSTANT, [], [tile], ConstAttrs(0.0)).result
    b.create(TileOp.WHERE, [cond, one, zero], [tile])
    return fn


def cols(b, start, n=16, base=0):
    """``start + arange(base, base + n)``."""
    t = ir.TileType((n,), I32)
    iota = b.create(TileOp.ARANGE, [], [t], ConstAttrs(base)).result
    return b.create(TileOp.ADD, [b.create(TileOp.SPLAT, [start], [t]).result, iota], [t]).result


def compare(b, op, x, y):
    return b.create(op, [x, y], [ir.TileType(x.type.shape, BOOL)]).result


def splat(b, s, shape):
    return b.create(TileOp.SPLAT, [s], [ir.TileType(shape, s.type.dtype)]).result


def ragged_cond(b, start, limit):                              # start + arange(16) < limit
    return compare(b, TileOp.LT, cols(b, start), splat(b, limit, (16,)))


def test_ragged_mask_becomes_a_bound_check():
    fn = uniform_masks(masked_function(ragged_cond))
    assert ir.print_function(fn) == """\
func @f(%0: int32, %1: int32) {
  %2 = constant {value=1.0} : tile<16xfloat32>
  %3 = constant {value=15} : int32
  %4 = add %0, %3 : int32
  %5 = lt %4, %1 : bool
  %6 = if %5 : tile<16xfloat32> {
    yield %2
  } {
    %7 = arange {value=0} : tile<16xint32>
    %8 = splat %0 : tile<16xint32>
    %9 = add %8, %7 : tile<16xint32>
    %10 = splat %1 : tile<16xint32>
    %11 = lt %9, %10 : tile<16xbool>
    %12 = constant {value=0.0} : tile<16xfloat32>
    %13 = where %11, %2, %12 : tile<16xfloat32>
    yield %13
  }
}"""
    assert {o.loc for o in fn.walk()} == {LOC}


def test_causal_mask_with_broadcasts_and_and():
    """``(cols[None, :] < limit) & (cols[None, :] <= rows[:, None])``, rows = limit + arange(8):
    two checks, ``start + 15 < limit`` and ``start + 15 <= limit`` (the row start)."""
    def cond(b, start, limit):
        c = cols(b, start)
        c2 = b.create(TileOp.RESHAPE, [c], [ir.TileType((1, 16), I32)]).result
        ragged = compare(b, TileOp.LT, c2, splat(b, limit, (1, 16)))
        rows = b.create(TileOp.RESHAPE, [cols(b, limit, 8)], [ir.TileType((8, 1), I32)]).result
        wide = [b.create(TileOp.BROADCAST, [x], [ir.TileType((8, 16), x.type.dtype)]).result
                for x in (c2, rows)]
        causal = compare(b, TileOp.GE, wide[1], wide[0])           # rows >= cols: swapped form
        ragged = b.create(TileOp.BROADCAST, [ragged], [ir.TileType((8, 16), BOOL)]).result
        return b.create(TileOp.AND, [ragged, causal], [ir.TileType((8, 16), BOOL)]).result
    text = ir.print_function(uniform_masks(masked_function(cond)))
    head = text.split(" {\n", 1)[1].split(" = if ")[0]
    assert head == """\
  %2 = constant {value=1.0} : tile<8x16xfloat32>
  %3 = constant {value=15} : int32
  %4 = add %0, %3 : int32
  %5 = lt %4, %1 : bool
  %6 = le %4, %1 : bool
  %7 = and %5, %6 : bool
  %8"""
    assert "arange" not in head                                    # the mask moved to the slow path


def unchanged(make_cond) -> bool:
    before = ir.print_function(masked_function(make_cond))
    return ir.print_function(uniform_masks(masked_function(make_cond))) == before


def test_unrecognised_masks_are_left_alone():
    def modulo(b, start, limit):                                  # (start + arange) % limit < 3
        c = cols(b, start)
        m = b.create(TileOp.MOD, [c, splat(b, limit, (16,))], [c.type]).result
        return compare(b, TileOp.LT, m, splat(b, b.create(TileOp.CONSTANT, [], [ir.scalar(I32)],
                                                          ConstAttrs(3)).result, (16,)))

    def not_equal(b, start, limit):                               # NE is not a range comparison
        return compare(b, TileOp.NE, cols(b, start), splat(b, limit, (16,)))

    def unsigned(b, start, limit):                                # uint32 ranges may wrap
        t = ir.TileType((16,), D.uint32)
        x = b.create(TileOp.CAST, [cols(b, start)], [t]).result
        return compare(b, TileOp.LT, x, b.create(TileOp.CAST, [splat(b, limit, (16,))], [t]).result)

    def or_(b, start, limit):
        x, y = ragged_cond(b, start, limit), ragged_cond(b, limit, start)
        return b.create(TileOp.OR, [x, y], [x.type]).result

    for make_cond in (modulo, not_equal, unsigned, or_):
        assert unchanged(make_cond), make_cond.__name__


def test_static_masks():
    """``arange(16) + 4 < 20`` is always all true (the WHERE goes); ``arange(16) < 15`` never
    is (the WHERE stays)."""
    def always(b, start, limit):
        four = b.create(TileOp.CONSTANT, [], [ir.scalar(I32)], ConstAttrs(4)).result
        twenty = b.create(TileOp.CONSTANT, [], [ir.TileType((16,), I32)], ConstAttrs(20)).result
        return compare(b, TileOp.LT, cols(b, four), twenty)

    def never(b, start, limit):
        fifteen = b.create(TileOp.CONSTANT, [], [ir.TileType((16,), I32)], ConstAttrs(15)).result
        iota = b.create(TileOp.ARANGE, [], [ir.TileType((16,), I32)], ConstAttrs(0)).result
        return compare(b, TileOp.LT, iota, fifteen)

    fn = masked_function(always)
    where = fn.body.ops[-1]
    user = ir.Builder(fn.body, LOC).create(TileOp.NEG, [where.result], [where.result.type])
    uniform_masks(fn)
    assert [o.op for o in fn.walk()] == [TileOp.CONSTANT, TileOp.NEG]  # 0.0 and the mask went
    assert user.operands == [fn.body.ops[0].result] and fn.body.ops[0].attrs.value == 1.0
    assert unchanged(never)


def test_subtraction_cancels_common_terms():
    """``(start + arange) - start < 16`` is statically all true: ``start`` cancels."""
    def cond(b, start, limit):
        c = cols(b, start)
        diff = b.create(TileOp.SUB, [c, splat(b, start, (16,))], [c.type]).result
        sixteen = b.create(TileOp.CONSTANT, [], [c.type], ConstAttrs(16)).result
        return compare(b, TileOp.LT, diff, sixteen)
    fn = uniform_masks(masked_function(cond))
    assert not [o for o in fn.walk() if o.op in (TileOp.WHERE, TileOp.IF)]


# ------------------------------------------------------------------------ kernels against NumPy
@pytest.fixture(autouse=True)
def emulate(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")


def tile_stages(fn: ir.Function) -> ir.Function:
    """``fn`` after the pipeline's tile stages up to ``uniform_masks`` (what lowering sees)."""
    fn = pipeline.clone_function(fn)
    for stage in pipeline.PIPELINE:
        fn = stage.run(fn, pipeline.Options())
        if stage.name == "uniform_masks":
            return fn
    raise AssertionError("uniform_masks is not in the pipeline")


@tj.kernel
def masked_row_sum(x, out, first, limit, lower, BM: tj.constexpr, BN: tj.constexpr, FLIP: tj.constexpr):
    """Row sums of x over ``first <= col``, ``col < limit``, ``lower <= col`` and ``col <= row``,
    one BN block at a time from ``first`` (blocks need not be aligned to the rows), with the
    comparisons written the other way round when FLIP."""
    start_m = tj.program_id(0) * BM
    rows = start_m + tj.arange(0, BM)
    total = tj.zeros((BM,), tj.float32)
    for start_n in range(first, x.shape[1], BN):
        t = tj.load(x, (start_m, start_n), (BM, BN))
        cols = start_n + tj.arange(0, BN)
        if FLIP:
            keep = (limit > cols[None, :]) & (rows[:, None] >= cols[None, :]) & (cols[None, :] >= lower)
        else:
            keep = (cols[None, :] < limit) & (cols[None, :] <= rows[:, None]) & (lower <= cols[None, :])
        total = total + tj.sum(tj.where(keep, t, 0.0), axis=1)
    tj.store(out, (start_m,), total)


def row_sum_reference(x, first, limit, lower):
    r, c = np.arange(x.shape[0])[:, None], np.arange(x.shape[1])[None, :]
    keep = (c >= first) & (c < limit) & (c <= r) & (c >= lower)
    return np.where(keep, x, 0).sum(axis=1).astype(np.float32)


ROW_SUM_SPECS = (ArraySpec(F32, 2, True, False, False), ArraySpec(F32, 1, True, False, False),
                 ScalarSpec(I32), ScalarSpec(I32), ScalarSpec(I32))
# (first, limit, lower): ragged limit one past / at a block's last column (23, 24); the causal
# bound one past a block (first 2: block 10..17 against row 16) and exactly on it (first 1);
# masks always all true off the diagonal (1000) and never all true (-1; lower 1000)
CASES = [(0, 23, 0), (0, 24, 0), (2, 40, 0), (1, 40, 9), (3, 17, 5), (0, 1000, 0), (0, -1, 0),
         (0, 1000, 1000)]


def row_sum_inputs(seed):
    """Nonzero small integers: any element kept or dropped by mistake changes an exact sum."""
    return np.random.default_rng(seed).integers(1, 4, (48, 48)).astype(np.float32)


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("first, limit, lower", CASES)
def test_row_sum_interpreted_after_the_pass(flip, first, limit, lower):
    x = row_sum_inputs(1)
    fn = tile_stages(masked_row_sum.tile_ir(ROW_SUM_SPECS, {"BM": 16, "BN": 8, "FLIP": flip}))
    assert [o for o in fn.walk() if o.op is TileOp.IF]
    out = np.zeros(48, np.float32)
    interpret.run(fn, (3,), [x, out, np.int32(first), np.int32(limit), np.int32(lower)])
    np.testing.assert_array_equal(out, row_sum_reference(x, first, limit, lower))


@pytest.mark.parametrize("first, limit, lower", CASES[:3] + CASES[-3:-1])
def test_row_sum_on_the_emulator(first, limit, lower):
    x = row_sum_inputs(2)
    out = np.zeros(48, np.float32)
    masked_row_sum[(3,)](x, out, first, limit, lower, BM=16, BN=8, FLIP=False, num_warps=1)
    np.testing.assert_array_equal(out, row_sum_reference(x, first, limit, lower))


ATTENTION_SPECS = (ArraySpec(D.float16, 4, True, False, False),) * 4 + (ScalarSpec(F32),)


def attention_inputs(seq=200):
    return attention.example_inputs(np.random.default_rng(0), batch=1, heads=2, kv_heads=1,
                                    seq=seq, dim=16)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_interpreted_after_the_pass(causal):
    q, k, v = attention_inputs()
    consts = {"BM": 16, "BN": 16, "BD": 16, "CAUSAL": causal}
    fn = tile_stages(attention.attention_kernel.tile_ir(ATTENTION_SPECS, consts))
    guards = [o for o in fn.walk() if o.op is TileOp.IF]
    assert len(guards) == 1 and [o for o in guards[0].regions[1].ops if o.op is TileOp.WHERE]
    out = np.zeros_like(q)
    interpret.run(fn, (tj.cdiv(200, 16), 2), [q, k, v, out, np.float32(0.25)])
    tj.testing.assert_close(out, attention.reference(q, k, v, causal))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_on_the_emulator(causal):
    q, k, v = attention_inputs()
    out = attention.run(q, k, v, causal, BM=16, BN=16)
    tj.testing.assert_close(out, attention.reference(q, k, v, causal))


def test_attention_simt_branches_on_the_bound_check():
    """The guard survives lowering as a SIMT IF (the WHERE's select only in its else-branch)."""
    tile = attention.attention_kernel.tile_ir(ATTENTION_SPECS, {"BM": 16, "BN": 16, "BD": 16, "CAUSAL": True})
    stages = {}
    pipeline.compile_to_simt(tile, num_warps=1, dump=lambda name, text: stages.setdefault(name, text))
    assert stages["uniform_masks"].count(" = if ") == 1
    assert stages["lower_to_simt"].count(" = if ") >= 1
