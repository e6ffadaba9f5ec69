"""Layouts: every element covered exactly once per replica, vector widths, slices, permutes."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from tilejit.passes import layouts as L
from tilejit.passes.assign_layouts import memory_layout
from tilejit import dtypes as D
from tilejit.specs import ArraySpec

dims = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 5, 1024])
shapes = st.lists(dims, min_size=1, max_size=3).map(tuple).filter(lambda s: np.prod(s) <= 1 << 14)
warps = st.sampled_from([1, 2, 4, 8])
itemsizes = st.sampled_from([1, 2, 4, 8])


def holders(layout: L.Layout) -> np.ndarray:
    """How many (thread, register) slots hold each element, per element (row-major)."""
    table = layout.table()
    assert ((table >= 0) & (table < np.array(layout.shape))).all(), "coordinate out of the tile"
    ids = np.ravel_multi_index(np.moveaxis(table, -1, 0), layout.shape)
    return np.bincount(ids.ravel(), minlength=int(np.prod(layout.shape)))


def replicas(layout: L.Layout) -> int:
    return 2 ** (bin(layout.replica_bits("lane")).count("1") + bin(layout.replica_bits("warp")).count("1"))


def no_thread_holds_twice(layout: L.Layout) -> bool:
    ids = np.ravel_multi_index(np.moveaxis(layout.table(), -1, 0), layout.shape)
    return all(len(set(row)) == len(row) for row in ids)


@given(shapes, itemsizes, warps)
def test_blocked_covers_each_element_once_per_replica(shape, item, nw):
    layout = L.default_blocked(shape, item, nw)
    assert (holders(layout) == replicas(layout)).all()
    assert no_thread_holds_twice(layout)


@given(shapes, itemsizes, warps, st.data())
def test_slice_covers_the_reduced_tile(shape, item, nw, data):
    parent = L.default_blocked(shape, item, nw)
    axis = data.draw(st.integers(0, len(shape) - 1))
    for keep in (True, False):
        s = L.sliced(parent, axis, keep)
        if s.rank == 0:
            assert s.n == 1
            continue
        assert (holders(s) == replicas(s)).all()
        assert no_thread_holds_twice(s)
    # the keepdims slice broadcasts back to its parent without leaving the thread
    keep = L.sliced(parent, axis, True)

    def drop(c):
        c = c.copy()
        c[..., axis] = 0
        return c
    assert L.register_map(keep, parent, drop) is not None


@given(shapes.filter(lambda s: len(s) >= 2), itemsizes, warps)
def test_permuted_layout_moves_no_data(shape, item, nw):
    layout = L.default_blocked(shape, item, nw)
    perm = tuple(reversed(range(len(shape))))
    t = L.permuted(layout, perm)
    assert t.shape == tuple(shape[p] for p in perm)
    assert (t.table() == layout.table()[..., list(perm)]).all()


@pytest.mark.parametrize("dtype, vec", [(D.float32, 4), (D.bfloat16, 8), (D.int8, 16), (D.int64, 2)])
def test_unit_stride_aligned_rows_get_16_byte_vectors(dtype, vec):
    layout = memory_layout((4, 1024), ArraySpec(dtype, 2), 4)
    assert L.contiguous_run(layout) == vec
    lanes = [t for t in layout.terms[1] if t.src == "lane"]
    assert lanes and lanes[0].shift == 0, "neighbouring lanes must step along the last dim"


def test_strided_rows_get_one_element_per_thread():
    layout = memory_layout((64, 64), ArraySpec(D.float32, 2, unit_inner_stride=False), 4)
    assert L.contiguous_run(layout) == 1


def test_softmax_row_layout():
    layout = L.default_blocked((1, 1024), 4, 4)
    assert layout.n == 8 and L.contiguous_run(layout) == 4
    assert layout.replica_bits("lane") == 0 and layout.replica_bits("warp") == 0
    assert layout.regs[:5] == ((0, 0), (0, 1), (0, 2), (0, 3), (0, 512))


def test_small_tile_replicates():
    layout = L.default_blocked((8,), 4, 4)     # 8 elements over 128 threads
    assert replicas(layout) == 64
    assert (holders(layout) == 64).all()


def test_unit_dims_changed_keeps_registers():
    layout = L.default_blocked((64,), 4, 4)
    row = L.unit_dims_changed(layout, (1, 64))
    assert row.shape == (1, 64) and row.n == layout.n
    assert (row.table()[..., 1] == layout.table()[..., 0]).all()
    assert L.unit_dims_changed(L.default_blocked((4, 16), 4, 4), (64,)) is None


def test_vector_width():
    addr = np.array([[0, 4, 8, 12, 32, 36, 40, 44]])
    assert L.vector_width(addr, 4) == 4
    assert L.vector_width(addr + 4, 4) == 1          # misaligned groups
    assert L.vector_width(np.array([[0, 8, 4, 12]]), 4) == 1


def test_conversion_between_different_layouts_needs_shared_memory():
    a = L.default_blocked((32, 32), 4, 4)
    b = L.permuted(L.default_blocked((32, 32), 4, 4), (1, 0))
    assert L.same_elements(a, a) == tuple(range(a.n))
    assert L.same_elements(a, b) is None


@pytest.mark.parametrize("shape, item, nw, r", [((128, 32, 1), 1, 4, 2), ((16, 8, 1), 2, 1, 2), ((4, 64, 1), 4, 8, 4)])
def test_an_expanded_then_merged_last_dim_moves_no_data(shape, item, nw, r):
    """``expanded_last`` grows a unit last dim in registers, ``merged_last`` merges it into the
    dim before: the same thread holds element ``(…, a, j)`` and ``(…, a*r + j)`` in the same
    register, and ``split_last`` gives the expanded layout back."""
    base = L.unit_dims_changed(L.default_blocked(shape[:-1], item, nw), shape)
    grown = L.expanded_last(base, r)
    merged = L.merged_last(grown)
    assert merged.shape == shape[:-2] + (shape[-2] * r,)
    g, m = grown.table(), merged.table()
    np.testing.assert_array_equal(m[..., -1], g[..., -2] * r + g[..., -1])
    np.testing.assert_array_equal(m[..., :-1], g[..., :-2])
    split = L.split_last(merged, r)
    np.testing.assert_array_equal(split.table(), g)
    assert L.same_elements(L.collapsed(grown, [len(shape) - 1]), base) is not None


def test_split_last_refuses_a_dim_whose_threads_step_through_a_group():
    lay = L.blocked((8, 64), (1, 1), (1, 32), (1, 1), (1, 0), 1)      # lane l holds columns l, l+32
    assert L.split_last(lay, 2) is None
    assert L.split_last(L.blocked((8, 64), (1, 2), (1, 32), (1, 1), (1, 0), 1), 2) is not None
    assert L.merged_last(L.blocked((16, 2), (1, 1), (16, 2), (1, 1), (1, 0), 1)) is None   # dim -1 on lanes
