"""``tj.load(..., mask=)`` and ``tj.store(..., mask=)``: a bool tile that broadcasts to the tile,
combined with the array's edges.  Masked-off loads read ``other``; masked-off stores write
nothing (the old values stay, also in the vector groups a mask splits).  Property tests against
NumPy on every backend, the PTX, the IR text, and the errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tilejit as tj
from tilejit import codegen, ir
from tilejit import dtypes as D
from tilejit.passes.pipeline import compile_to_simt
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, compile_source

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def masked_rows(x, y, lo, hi, BM: tj.constexpr, BN: tj.constexpr):
    """Rows of the block read only columns in [lo, r + lo) (others: -1), and the store skips every
    column whose index is a multiple of 3 and every row past hi."""
    m = tj.program_id(0) * BM
    rows = m + tj.arange(0, BM)[:, None]
    cols = tj.arange(0, BN)[None, :]
    t = tj.load(x, (m, 0), (BM, BN), other=-1.0, mask=(cols >= lo) & (cols < rows + lo))
    tj.store(y, (m, 0), t * 2 + 1, mask=(cols % 3 != 0) & (rows < hi))


def expected(x, y0, lo, hi):
    r, c = np.indices(x.shape)
    t = np.where((c >= lo) & (c < r + lo), x, -1.0) * 2 + 1
    return np.where((c % 3 != 0) & (r < hi), t, y0)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 40), n=st.integers(1, 40), lo=st.integers(0, 5), hi=st.integers(0, 45),
       bm=st.sampled_from([8, 16]), dtype=st.sampled_from([np.float32, np.float16]))
def test_masked_loads_and_stores_match_numpy(backend, monkeypatch, m, n, lo, hi, bm, dtype):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(m * 100 + n)
    x = rng.standard_normal((m, n)).astype(dtype)
    y = rng.standard_normal((m, n)).astype(dtype)      # what the masked-off stores must leave
    want = expected(x.astype(np.float64), y.astype(np.float64), lo, hi)
    masked_rows[(tj.cdiv(m, bm),)](x, y, lo, hi, BM=bm, BN=tj.next_power_of_2(max(n, 2)))
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-3 if dtype == np.float16 else 1e-6)


@tj.kernel
def scalar_masks(x, y, FLAG: tj.constexpr, BLOCK: tj.constexpr):
    t = tj.load(x, (0,), (BLOCK,), other=5, mask=FLAG)
    tj.store(y, (0,), t, mask=tj.program_id(0) == 0)        # a scalar mask broadcasts


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("flag", [True, False])
def test_scalar_and_constant_masks_broadcast(backend, flag, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.arange(1, 9, dtype=np.int32)
    y = np.zeros(8, np.int32)
    scalar_masks[(3,)](x, y, FLAG=flag, BLOCK=8)
    np.testing.assert_array_equal(y, x if flag else np.full(8, 5))


def test_a_masked_store_is_one_op_in_the_ir_and_its_text_reads_back():
    from tilejit.specs import ScalarSpec
    fn = masked_rows.tile_ir((ArraySpec(D.float32, 2, True, True, False),) * 2 + (ScalarSpec(D.int32),) * 2,
                             {"BM": 16, "BN": 32})
    stores = [o for o in fn.walk() if o.op is ir.TileOp.STORE]
    assert len(stores) == 1 and stores[0].attrs.masked and ir.store_mask(stores[0]).type.dtype == D.bool_
    text = ir.print_function(fn)
    assert "masked=True" in text
    assert ir.print_function(ir.parse_function(text)) == text
    simt_fn = compile_to_simt(fn, num_warps=4)
    ptx = codegen.compile_ptx(simt_fn, "sm_90a")
    assert "st.global" in ptx
    assemble_or_skip(ptx, "sm_90a")


@pytest.mark.parametrize("body, message", [
    ("tj.store(y, (0, 0), t, mask=t)", "mask must be a bool tile"),
    ("tj.store(y, (0, 0), t, mask=1)", "mask must be a bool tile"),
    ("tj.store(y, (0, 0), t, mask=(tj.arange(0, 8) > 2)[None, :])", "does not broadcast"),
    ("tj.store(y, (0, 0), tj.load(x, (0, 0), (4, 4), mask=tj.arange(0, 8) > 2))", "does not broadcast"),
])
def test_bad_masks_are_errors_at_the_users_line(body, message):
    src = "def k(x, y, B: tj.constexpr):\n    t = tj.load(x, (0, 0), (B, B))\n    " + body + "\n"
    with pytest.raises(tj.CompileError, match=message) as err:
        compile_source(src, [ArraySpec(D.float32, 2)] * 2, {"B": 4}, "mask_kernel.py")
    assert err.value.loc is not None and err.value.loc.line == 3


def test_the_verifier_wants_a_bool_mask_of_the_tiles_shape():
    from tilejit import verifier
    fn = masked_rows.tile_ir((ArraySpec(D.float32, 2, True, True, False),) * 2
                             + (tj.specs.ScalarSpec(D.int32),) * 2, {"BM": 16, "BN": 32})
    store = next(o for o in fn.walk() if o.op is ir.TileOp.STORE)
    verifier.verify(fn)
    store.operands[-1] = ir.stored_tile(store)          # a float tile where the mask goes
    with pytest.raises(verifier.VerifyError, match="bool tile of the stored tile's shape"):
        verifier.verify(fn)
