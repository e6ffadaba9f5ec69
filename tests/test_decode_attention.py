"""Split-KV decode attention (``examples/decode_attention.py``): float64 NumPy equivalence over
GQA groups 1/2/4/8, windows of 1-16 query rows (causal inside the window), ragged cache lengths
and slice sizes (a last slice that is short, one slice for the whole cache), head dims 64 and
128, on interpret, emulate and the GPU (``-m gpu``)."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.examples import decode_attention as ex

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, heads, kv_heads, window, seq, dim, split", [
    (2, 8, 2, 1, 700, 64, 256),        # GQA 4, the last slice short
    (1, 8, 8, 1, 130, 64, 64),         # no grouping: 16 window rows padded per head
    (1, 16, 2, 4, 300, 128, 128),      # GQA 8, a 4-token window, D 128
    (2, 4, 2, 16, 95, 64, 1024),       # one slice for the whole cache, a 16-token window
    (1, 4, 1, 3, 17, 64, 64),          # a cache shorter than one key block
])
def test_decode_matches_float64(backend, monkeypatch, batch, heads, kv_heads, window, seq, dim, split):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v = ex.example_inputs(np.random.default_rng(seq + window), batch, heads, kv_heads, window, seq, dim)
    out = ex.run(q, k, v, split=split)
    assert not np.isnan(out.astype(np.float32)).any()
    tj.testing.assert_close(out, ex.reference(q, k, v), dtype=tj.bfloat16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, heads, kv_heads, window, seq, dim, split", [
    (2, 8, 2, 1, 700, 64, 256),        # GQA 4, the last slice short
    (1, 16, 2, 4, 300, 128, 128),      # GQA 8, a 4-token window, D 128
    (2, 4, 2, 16, 95, 64, 1024),       # one slice: the only slice merges
])
def test_one_launch_merges_in_the_last_slice_with_the_two_kernels_bits(backend, monkeypatch, batch, heads, kv_heads,
                                                                        window, seq, dim, split):
    """``fused``: the slice that counts last merges its heads, in slice order, so the output has
    the bits of the two-kernel path with the looping combine (the same merge, whoever finishes
    last; the gathering combine sums in another order: within bfloat16 rounding), and the counts
    are back at zero: the same buffers serve the next launch (the output poisoned before each)."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v = ex.example_inputs(np.random.default_rng(seq + window), batch, heads, kv_heads, window, seq, dim)
    want = ex.run(q, k, v, split=split, gather_combine=False)
    tj.testing.assert_close(ex.run(q, k, v, split=split), want, dtype=tj.bfloat16)
    count = ex.counts(q, kv_heads)
    for _ in range(2):
        out = np.full_like(q, np.nan)
        ex.run(q, k, v, split=split, out=out, fused=True, count=count)
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
        assert not count.any()
    seq_lens = np.array([seq, seq // 3], np.int32)[:batch]
    rng = np.random.default_rng(1)
    k_pages, v_pages, table = ex.to_pages(k, v, seq_lens, 32, rng)
    paged = ex.run_paged(q, k_pages, v_pages, table, seq_lens, split=split, fused=True)
    tj.testing.assert_close(paged, ex.reference_paged(q, k, v, seq_lens), dtype=tj.bfloat16)


def test_the_slices_cover_the_cache_once():
    for seq, split in ((700, 256), (256, 256), (1, 64), (8192, 1024), (65536, 4096)):
        ns = ex.splits_for(seq, split)
        assert (ns - 1) * split < seq <= ns * split


def test_the_decode_kernel_takes_the_tensor_cores():
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec, NoneSpec, ScalarSpec
    from tilejit import dtypes as D
    bf, f32 = ArraySpec(D.bfloat16, 4), ArraySpec(D.float32, 4)
    tile = ex.decode_split_kernel.tile_ir((bf, bf, bf, f32, ArraySpec(D.float32, 3), ScalarSpec(D.float32), NoneSpec(),
                                          NoneSpec()),
                                         {"GROUP": 4, "BL": 4, "BN": 64, "BD": 128, "SPLIT": 1024})
    fn = compile_to_simt(tile, num_warps=4)
    kinds = {o.op for o in fn.walk()}
    assert kinds & {SimtOp.MMA, SimtOp.WGMMA}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads, kv_heads, window, seq_lens, page, split", [
    (8, 2, 1, (700, 300), 64, 256),      # sequences of different lengths, the last page partial
    (16, 2, 4, (128, 65), 32, 64),       # GQA 8, a window of 4, a split of two pages
    (4, 4, 1, (17, 200), 16, 1024),      # one slice: every page of a sequence in one program
])
def test_paged_decode_matches_float64(backend, monkeypatch, heads, kv_heads, window, seq_lens, page, split):
    """A paged cache (pages shuffled in one pool, a block table per sequence) and per-sequence
    lengths: slices past a sequence's end see no key and drop out of the merge."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(page + window)
    seq_lens = np.array(seq_lens, np.int32)
    q, k, v = ex.example_inputs(rng, len(seq_lens), heads, kv_heads, window, int(seq_lens.max()), 64)
    k_pages, v_pages, table = ex.to_pages(k, v, seq_lens, page, rng)
    out = ex.run_paged(q, k_pages, v_pages, table, seq_lens, split=split)
    assert not np.isnan(out.astype(np.float32)).any()
    tj.testing.assert_close(out, ex.reference_paged(q, k, v, seq_lens), dtype=tj.bfloat16)


def test_both_decode_kernels_assemble_for_sm_90a_without_spills():
    from tilejit.codegen import ptxas
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    rng = np.random.default_rng(0)
    q, k, v = ex.example_inputs(rng, 2, 32, 8, 1, 512, 128)
    seq_lens = np.array([512, 300], np.int32)
    k_pages, v_pages, table = ex.to_pages(k, v, seq_lens, 64, rng)
    f32 = np.float32
    fused = (np.zeros_like(q), np.zeros(16, np.int32))
    cases = [(ex.decode_split_kernel, (q, k, v, np.zeros((2, 32, 1, 128), f32), np.zeros((2, 32, 1), f32), 0.1) + one,
              {"GROUP": 4, "BL": 4, "BN": 64, "BD": 128, "SPLIT": 1024}) for one in ((None, None), fused)]
    cases += [(ex.decode_paged_split_kernel, (q, k_pages, v_pages, table, seq_lens, np.zeros((2, 32, 1, 128), f32),
                                              np.zeros((2, 32, 1), f32), 0.1) + one,
               {"GROUP": 4, "BL": 4, "BD": 128, "PAGE": 64, "SPLIT": 1024}) for one in ((None, None), fused)]
    parts = (np.zeros((8, 32, 1, 128), f32), np.zeros((8, 32, 1), f32), np.zeros_like(q))     # 4 slices
    cases += [(ex.decode_combine_kernel, parts, {"BL": 1, "BD": 128}),
              (ex.decode_combine_gather_kernel, parts, {"NS": 4, "BL": 1, "BD": 128}),
              (ex.decode_combine_gather_kernel, parts, {"NS": 32, "BL": 1, "BD": 128})]
    cases += [(ex.decode_combine_gather_kernel, parts, {"NS": 4, "BL": 1, "BD": 128, "WAIT": True}),
              (ex.decode_combine_kernel, parts, {"BL": 1, "BD": 128, "WAIT": True})]
    cases += [(ex.decode_split_kernel, (q, k, v, np.zeros((2, 32, 1, 128), f32), np.zeros((2, 32, 1), f32), 0.1,
                                        None, None), {"GROUP": 4, "BL": 4, "BN": 64, "BD": 128, "SPLIT": 1024,
                                                      "RELEASE": True})]
    for kernel, args, consts in cases:
        specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
        art = kernel.compile(specs, consts, 4, "cuda").artifact
        assert art.spills == 0
        lines = art.ptx.splitlines()
        waits = [i for i, line in enumerate(lines) if "griddepcontrol.wait;" in line]
        assert art.dependent_launch is bool(consts.get("WAIT")) and len(waits) == int(bool(consts.get("WAIT")))
        if waits:       # the wait comes before the slices' first load
            assert waits[0] < min(i for i, line in enumerate(lines) if "ld.global" in line)
        assert ("griddepcontrol.launch_dependents;" in art.ptx) is bool(consts.get("RELEASE"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, heads, kv_heads, window, seq, dim, split", [
    (2, 8, 2, 1, 700, 64, 256),        # 3 slices: NS 4, one row past the last slice
    (1, 16, 2, 4, 300, 128, 128),      # a 4-token window, D 128
    (1, 4, 1, 3, 17, 64, 64),          # one slice
    (2, 4, 2, 16, 2060, 64, 128),      # 17 slices: NS 32; the last one unseen by the first window rows
])
def test_the_gathered_combine_matches_the_loop(backend, monkeypatch, batch, heads, kv_heads, window, seq, dim, split):
    """``gather_combine``: every slice's log-sum-exp and partial output read at once and weighted
    by exp(lse - max) gives the loop's merge within rounding, -inf slices and padding rows included."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v = ex.example_inputs(np.random.default_rng(seq + window + 7), batch, heads, kv_heads, window, seq, dim)
    out = ex.run(q, k, v, split=split, gather_combine=True)
    assert not np.isnan(out.astype(np.float32)).any()
    tj.testing.assert_close(out, ex.reference(q, k, v), dtype=tj.bfloat16)
    loop = ex.run(q, k, v, split=split)
    np.testing.assert_allclose(out.astype(np.float32), loop.astype(np.float32), rtol=2**-7, atol=2**-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("splits", [1, 3, 5])
@pytest.mark.parametrize("gather", [False, True])
def test_both_combines_merge_random_slices(backend, monkeypatch, splits, gather):
    """The second kernel on its own: random partial outputs and log-sum-exps around zero (so a
    padding slice read as 0 instead of -inf would weigh as much as a real one), slices that saw
    no key (-inf), one row no slice saw (zeros out), and buffers a row longer than the slices."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(splits + 10 * gather)
    batch, heads, window, dim = 2, 4, 2, 64
    part = rng.standard_normal((splits * batch, heads, window, dim)).astype(np.float32)
    lse = rng.uniform(-3, 1, (splits * batch, heads, window)).astype(np.float32)
    lse[rng.random(lse.shape) < 0.2] = -np.inf
    lse[splits * batch - 1, 0, 0] = 0.5                   # each row but one has a slice that saw a key
    lse[:, 1, 1] = -np.inf
    out = np.full((batch, heads, window, dim), np.nan, tj.bfloat16.np)
    # one row past the whole slices (a part of a slice, NaN): neither kernel may read it
    nan_row = lambda x: np.concatenate([x, np.full((1,) + x.shape[1:], np.nan, x.dtype)])     # noqa: E731
    ex.combine(nan_row(part), nan_row(lse), out, splits, window, dim, gather)
    lse_s = lse.reshape(splits, batch, heads, window).astype(np.float64)
    m = lse_s.max(axis=0)
    w = np.where(np.isneginf(lse_s), 0.0, np.exp(lse_s - np.where(np.isneginf(m), 0.0, m)))
    total = w.sum(axis=0)
    acc = (part.reshape(splits, batch, heads, window, dim).astype(np.float64) * w[..., None]).sum(axis=0)
    want = acc / np.where(total > 0, total, 1.0)[..., None]
    assert not np.isnan(out.astype(np.float32)).any() and not out[:, 1, 1].astype(np.float32).any()
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2**-7, atol=2**-8)


@tj.kernel
def paged_gemm(a, pages, table, c, log, BM: tj.constexpr, PAGE: tj.constexpr, BN: tj.constexpr, LOG: tj.constexpr):
    """c = a @ B, B's K rows in pages of PAGE rows picked through ``table``."""
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], PAGE):
        page = tj.sum(tj.load(table, (k // PAGE,), (1,)))
        acc = tj.dot(tj.load(a, (0, k), (BM, PAGE)), tj.load(pages, (page, 0, 0), (1, PAGE, BN)).reshape((PAGE, BN)), acc)
        if LOG:
            tj.store(log, (k // PAGE,), tj.full((1,), page, tj.int32))      # a store: nothing is read ahead
    tj.store(c, (0, 0), acc)


def test_a_block_whose_offset_comes_from_a_small_load_is_copied_ahead():
    """``ring_sources.offset_slice(small_loads=True)``: a page number read from a table in the
    loop (at most ``SMALL_LOAD`` elements, a body that writes no memory) may place a ringed
    copy, as ``a``'s block is; with a store in the body only ``a`` is ringed.  Either way the
    emulated result is the product of the pages in table order."""
    from tilejit.backends import emulate
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 96)).astype(tj.bfloat16.np)
    pages = rng.standard_normal((5, 32, 64)).astype(tj.bfloat16.np)
    table = np.array([3, 0, 4], np.int32)
    ref = a.astype(np.float64) @ np.concatenate([pages[p] for p in table]).astype(np.float64)
    copies = {}
    for log in (False, True):
        c, journal = np.zeros((16, 64), np.float32), np.zeros(3, np.int32)
        specs, consts, _ = paged_gemm.specialise(paged_gemm.bind((a, pages, table, c, journal),
                                                                 {"BM": 16, "PAGE": 32, "BN": 64, "LOG": log}))
        fn = compile_to_simt(paged_gemm.tile_ir(specs, consts), 4)
        copies[log] = {o.attrs.buffer for o in fn.walk() if o.op is SimtOp.CP_ASYNC}
        emulate.run(fn, (1,), [a, pages, table, c, journal])
        np.testing.assert_allclose(c, ref, rtol=1e-2, atol=1e-2)
        if log:
            np.testing.assert_array_equal(journal, table)
    assert len(copies[False]) == 2 and len(copies[True]) == 1          # a's ring and the pages' / a's only
