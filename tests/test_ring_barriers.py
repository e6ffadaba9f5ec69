"""A pipelined loop's cp.async ring may still be written after the loop: every thread waits only
for its own copies, and the copies for iterations past the end zero-fill their slots.  A buffer
that reuses the ring's bytes after the loop (here the carried counts, moved to the layout of the
atomic that adds them) must come after a barrier (``passes.shared_memory.BarrierInserter``);
without it the emulator reported a shared-memory race."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec
from tilejit import dtypes as D

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@tj.kernel
def chunked_counts(x, counts, BINS: tj.constexpr, CHUNK: tj.constexpr, PER_PROGRAM: tj.constexpr):
    start = tj.program_id(0) * PER_PROGRAM
    h = tj.zeros((BINS,), tj.int32)
    for i in range(start, start + PER_PROGRAM, CHUNK):
        h += tj.histogram(tj.load(x, (i,), (CHUNK,), other=-1), BINS)
    tj.atomic_add(counts, (0,), h)


@tj.kernel
def chunked_counts_staged(x, counts, BINS: tj.constexpr, CHUNK: tj.constexpr, PER_PROGRAM: tj.constexpr):
    """The same counts spelled with ``tj.range(stages=3)`` and two chunks of values a step."""
    start = tj.program_id(0) * PER_PROGRAM
    h = tj.zeros((BINS,), tj.int32)
    for i in tj.range(start, start + PER_PROGRAM, 2 * CHUNK, stages=3):
        h += tj.histogram(tj.load(x, (i,), (CHUNK,), other=-1), BINS)
        h += tj.histogram(tj.load(x, (i + CHUNK,), (CHUNK,), other=-1), BINS)
    tj.atomic_add(counts, (0,), h)


def _simt():
    spec = ArraySpec(D.int32, 1, True, True, False)
    tile = chunked_counts.tile_ir((spec, spec), {"BINS": 256, "CHUNK": 256, "PER_PROGRAM": 2048})
    return compile_to_simt(tile, num_warps=4, target="sm_90a")


def test_a_buffer_reusing_the_rings_bytes_after_the_loop_waits_for_a_barrier():
    fn = _simt()
    ranges = {b: (off, off + size) for b, (off, size) in fn.meta.shared_buffers.items()}
    top = fn.body.ops
    loop = next(i for i, o in enumerate(top) if o.op is SimtOp.FOR)
    ring = {ranges[b] for o in top[loop].regions[0].walk() if o.op is SimtOp.CP_ASYNC
            for b in (o.attrs.buffer,)}
    assert ring, "the loop's loads should fill a cp.async ring"
    after = top[loop + 1:]
    first_store = next(i for i, o in enumerate(after) if o.op is SimtOp.STORE_SHARED)
    (lo, hi), = {ranges[after[first_store].attrs.buffer]}
    assert any(lo < r_hi and r_lo < hi for r_lo, r_hi in ring), "the test needs a buffer reusing ring bytes"
    assert any(o.op is SimtOp.BARRIER for o in after[:first_store])


@pytest.mark.parametrize("kernel", [chunked_counts, chunked_counts_staged], ids=["range", "tj.range"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_chunked_counts_are_numpys(backend, kernel, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x = np.random.default_rng(3).integers(-8, 264, 5000).astype(np.int32)
    counts = np.zeros(256, np.int32)
    kernel[(tj.cdiv(x.size, 2048),)](x, counts, BINS=256, CHUNK=256, PER_PROGRAM=2048, num_warps=4)
    inside = x[(x >= 0) & (x < 256)]
    np.testing.assert_array_equal(counts, np.bincount(inside, minlength=256))


def test_the_default_warps_hold_the_largest_computed_tile():
    """No ``num_warps``: the (256 values, 256 bins) compares of ``tj.histogram`` need 2 warps at
    1024 values a thread, though the loaded tiles alone would get 1 (``warps.holding_warps``);
    the launch then runs instead of failing with "tile too large for the registers"."""
    from tilejit.passes.warps import _choose_num_warps, choose_num_warps, holding_warps
    spec = ArraySpec(D.int32, 1, True, True, False)
    tile = chunked_counts.tile_ir((spec, spec), {"BINS": 256, "CHUNK": 256, "PER_PROGRAM": 2048})
    assert (_choose_num_warps(tile), holding_warps(tile), choose_num_warps(tile)) == (1, 2, 2)
    x = np.random.default_rng(5).integers(-3, 260, 3000).astype(np.int32)
    counts = np.zeros(256, np.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", "emulate")
        chunked_counts[(2,)](x, counts, BINS=256, CHUNK=256, PER_PROGRAM=2048)
    np.testing.assert_array_equal(counts, np.bincount(x[(x >= 0) & (x < 256)], minlength=256))
