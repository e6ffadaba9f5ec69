"""``codegen.memory.BRANCH_FREE_LOADS``: a masked vector group loads from a selected address (the
group's, or 16 zero bytes' where it is not whole) with no branch around the load; only a group
the array's edge cuts branches to element-wise loads, after the tile's other loads."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tilejit as tj
from tilejit import codegen
from tilejit.codegen import memory
from tilejit.passes import switches
from tilejit.passes.pipeline import compile_to_simt
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip


@tj.kernel
def ragged_copy(x, y, BM: tj.constexpr, BN: tj.constexpr, OTHER: tj.constexpr):
    m = tj.program_id(0) * BM
    n = tj.program_id(1) * BN
    tj.store(y, (m, n), tj.load(x, (m, n), (BM, BN), other=OTHER) + 1)


@pytest.fixture
def branch_free():
    before = memory.BRANCH_FREE_LOADS          # a run with the switch on throughout keeps it on
    switches.apply([("tilejit.codegen.memory.BRANCH_FREE_LOADS", True)])
    yield
    switches.apply([("tilejit.codegen.memory.BRANCH_FREE_LOADS", before)])


def ptx_of(dtype, other):
    spec = ArraySpec(dtype, 2)
    tile = ragged_copy.tile_ir((spec, spec), {"BM": 32, "BN": 64, "OTHER": other})
    return codegen.compile_ptx(compile_to_simt(tile, num_warps=4, target="sm_90a"), "sm_90a")


def loads_behind_branches(ptx: str) -> int:
    """The ld.global.v4 that open a basic block (the target of a branch taken where the group is whole)."""
    lines = [x.strip() for x in ptx.splitlines() if x.strip() and not x.strip().startswith((".loc", "//"))]
    return sum(1 for a, b in zip(lines, lines[1:]) if a.startswith("$L__") and b.startswith("ld.global.v4"))


def test_off_by_default_the_vector_loads_sit_in_branches(monkeypatch):
    assert switches.DEFAULTS["tilejit.codegen.memory"]["BRANCH_FREE_LOADS"] is False
    monkeypatch.setattr(memory, "BRANCH_FREE_LOADS", False)
    ptx = ptx_of(tj.float32, 0.0)
    assert memory.ZEROS_SYMBOL not in ptx and loads_behind_branches(ptx) > 0


@pytest.mark.parametrize("dtype, other", [(tj.float32, 0.0), (tj.bfloat16, -2.0), (tj.uint8, 3)])
def test_on_every_vector_load_is_straight_line_code_from_a_selected_address(branch_free, dtype, other):
    ptx = ptx_of(dtype, other)
    loads = re.findall(r"ld\.global(?:\.nc)?\.v\d\.\w+\s+\{[^}]*\}, \[(%rd\d+)\]", ptx)
    assert loads and loads_behind_branches(ptx) == 0
    assert f".global .align 16 .b8 {memory.ZEROS_SYMBOL}[16]" in ptx
    for reg in loads:                  # each address is a select of the group's and the zeros'
        assert re.search(rf"selp\.b64\s+{re.escape(reg)},", ptx), reg
    if other != 0:                     # a nonzero other replaces what the zeros read
        assert re.search(r"selp\.b(16|32)", ptx)
    assert assemble_or_skip(ptx, "sm_90a").spills == 0


def test_negative_zero_other_is_not_taken_for_the_zero_bytes():
    spec = ArraySpec(tj.float32, 2)
    tile = ragged_copy.tile_ir((spec, spec), {"BM": 32, "BN": 64, "OTHER": -0.0})
    before = memory.BRANCH_FREE_LOADS
    switches.apply([("tilejit.codegen.memory.BRANCH_FREE_LOADS", True)])
    try:
        ptx = codegen.compile_ptx(compile_to_simt(tile, num_warps=4, target="sm_90a"), "sm_90a")
    finally:
        switches.apply([("tilejit.codegen.memory.BRANCH_FREE_LOADS", before)])
    assert re.search(r"selp\.b32\s+%r\d+, %r\d+, -2147483648|selp\.f32\s+%r\d+, %r\d+, 0f80000000", ptx)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, other", [(np.float32, 0.0), (tj.bfloat16.np, -2.0), (np.uint8, 3)])
@pytest.mark.parametrize("shape", [(70, 100), (33, 64), (5, 200)])
def test_on_the_gpu_ragged_tiles_read_other_past_the_edges(branch_free, monkeypatch, dtype, other, shape):
    """x ragged, y the whole tiles: y = x + 1 inside, other + 1 past x's edges (the groups wholly
    outside read the zeros and take other; the ones an edge cuts go element by element)."""
    monkeypatch.setenv("TILEJIT_BACKEND", "cuda")
    rng = np.random.default_rng(sum(shape))
    x = (rng.integers(1, 100, shape) if dtype == np.uint8 else rng.standard_normal(shape)).astype(dtype)
    grid = (tj.cdiv(shape[0], 32), tj.cdiv(shape[1], 64))
    y = np.full((grid[0] * 32, grid[1] * 64), 7, dtype)
    ragged_copy[grid](x, y, BM=32, BN=64, OTHER=other)
    want = np.full(y.shape, other, np.float64)
    want[:shape[0], :shape[1]] = x.astype(np.float64)
    np.testing.assert_array_equal(y.astype(np.float64), (want + 1).astype(dtype).astype(np.float64))
