"""Loads, stores and atomics at per-row indices: an offset may be a 1-D integer tile (row i of
that dim comes from its i-th index) instead of a scalar.  Indices outside the array read
``other`` and are not written; when a scatter sends two elements to one place, one of them wins;
atomics at repeated indices all apply.  Checked against NumPy on interpret and emulate (cuda under
``-m gpu``), plus the IR text, the PTX and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip, body_error

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def embedding_bag(table, ids, out, D: tj.constexpr, B: tj.constexpr):
    """out[p] = sum of the table rows ids[p*B : p*B+B] (ids past the table read 0)."""
    p = tj.program_id(0)
    rows = tj.load(ids, (p * B,), (B,), other=-1)
    t = tj.load(table, (rows, 0), (B, D))
    tj.store(out, (p, 0), tj.sum(t, axis=0)[None, :])


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_bag_gathers_rows(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 24)).astype(np.float32)
    ids = rng.integers(-3, 56, 61).astype(np.int32)            # some outside the table; a ragged bag
    out = np.full((8, 24), np.nan, np.float32)
    embedding_bag[(8,)](table, ids, out, D=32, B=8)
    padded = np.concatenate([ids, np.full(3, -1, np.int32)]).reshape(8, 8)
    ok = (padded >= 0) & (padded < 50)
    want = np.where(ok[:, :, None], table[np.clip(padded, 0, 49)], 0).sum(axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@tj.kernel
def histogram(x, counts, B: tj.constexpr):
    p = tj.program_id(0)
    v = tj.load(x, (p * B,), (B,), other=-1)
    tj.atomic_add(counts, (v,), tj.full((B,), 1, tj.int32), mask=v >= 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_histogram_counts_repeated_indices(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.random.default_rng(1).integers(0, 12, 1000).astype(np.int32)
    counts = np.zeros(10, np.int32)                            # 10 and 11 fall outside: not counted
    histogram[(tj.cdiv(1000, 128),)](x, counts, B=128)
    np.testing.assert_array_equal(counts, np.bincount(x, minlength=12)[:10])


@tj.kernel
def permute_rows(src, dst, perm, D: tj.constexpr, B: tj.constexpr):
    p = tj.program_id(0)
    rows = tj.load(perm, (p * B,), (B,))
    tj.store(dst, (rows, 0), tj.load(src, (p * B, 0), (B, D)), mask=(rows % 3 != 0)[:, None])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_masked_scatter_of_rows(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(2)
    perm = rng.permutation(40).astype(np.int32)
    src = rng.standard_normal((40, 8)).astype(np.float32)
    dst = np.full_like(src, -7)
    permute_rows[(5,)](src, dst, perm, D=8, B=8)
    want = np.full_like(src, -7)
    keep = perm % 3 != 0
    want[perm[keep]] = src[keep]
    np.testing.assert_array_equal(dst, want)


@tj.kernel
def gather_columns(x, cols, y, R: tj.constexpr, C: tj.constexpr):
    """Both dims: rows p*R.. as a block, columns from an index tile (the contiguous dim)."""
    p = tj.program_id(0)
    c = tj.load(cols, (0,), (C,))
    r = tj.arange(0, R) + p * R
    tj.store(y, (p * R, 0), tj.load(x, (r, c), (R, C), other=5) * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gathered_columns_and_an_index_tile_for_every_dim(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 30)).astype(np.float32)
    cols = np.array([29, 0, 3, 31, 3, -1, 7, 12], np.int32)    # repeats and two outside
    y = np.zeros((24, 8), np.float32)
    gather_columns[(3,)](x, cols, y, R=8, C=8)
    padded = np.concatenate([x, np.full((4, 30), np.nan, np.float32)])
    ok = (cols >= 0) & (cols < 30)
    want = np.where(ok[None, :], padded[:, np.clip(cols, 0, 29)], 5) * 2
    want[20:] = 10                                             # rows past x read other
    np.testing.assert_array_equal(y, want.astype(np.float32))


@tj.kernel
def paged_rows(pages, table, out, N: tj.constexpr, D: tj.constexpr):
    """A loop over a page table: each step gathers N rows (a paged KV cache's reads)."""
    p = tj.program_id(0)
    acc = tj.zeros((N, D), tj.float32)
    for step in range(3):
        rows = tj.load(table, (p * 3 + step, 0), (1, N)).reshape((N,))
        acc += tj.load(pages, (rows, 0), (N, D)).to(tj.float32)
    tj.store(out, (p * N, 0), acc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gathers_inside_a_loop_are_not_pipelined_but_right(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(4)
    pages = rng.standard_normal((64, 16)).astype(np.float16)
    table = rng.integers(0, 64, (6, 4)).astype(np.int32)
    out = np.zeros((8, 16), np.float32)
    paged_rows[(2,)](pages, table, out, N=4, D=16)
    want = pages.astype(np.float32)[table].reshape(2, 3, 4, 16).sum(axis=1).reshape(8, 16)
    np.testing.assert_allclose(out, want, rtol=1e-3)


@pytest.mark.parametrize("body, message", [
    ("tj.store(y, (tj.arange(0, 8), 0), t)", "index tile for dim 0 has shape \\(8,\\); .*\\(4,\\)"),
    ("tj.store(y, (t, 0), t)", "offsets must be integer scalars or 1-D integer tiles"),
    ("tj.store(y, (i2d, 0), t)", "offsets must be integer scalars or 1-D integer tiles"),
])
def test_bad_index_tiles_are_errors_at_the_users_line(body, message):
    body_error(body, message, [ArraySpec(tj.float32, 2)] * 2, {"B": 4}, line=4,
               head="    t = tj.load(x, (0, 0), (B, B))\n    i2d = tj.zeros((B, B), tj.int32)\n")


def test_the_ir_text_of_a_gather_round_trips_and_the_ptx_assembles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    specs = [ArraySpec(tj.float32, 2), ArraySpec(tj.int32, 1), ArraySpec(tj.float32, 2)]
    fn = embedding_bag.tile_ir(specs, {"D": 32, "B": 8})
    text = ir.print_function(fn)
    assert ir.print_function(ir.parse_function(text)) == text
    args = (np.zeros((50, 24), np.float32), np.zeros(61, np.int32), np.zeros((8, 24), np.float32))
    s, consts, _ = embedding_bag.specialise(embedding_bag.bind(args, {"D": 32, "B": 8}))
    ptx = embedding_bag.compile(s, consts, 4, "cuda").artifact.ptx
    assert "ld.global" in ptx
    assemble_or_skip(ptx, "sm_90a")
