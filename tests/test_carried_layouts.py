"""Loop-carried tiles take the layout their loop body yields: a product computed before the loop
by one engine (mma.sync) and carried into a loop whose DOT runs on another (wgmma, other warps)
is converted once before the loop, not through shared memory at every iteration's yield; the
values are the same on every backend."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit.ir import TileOp
from tilejit.specs import ArraySpec

from conftest import pipeline_until


@tj.kernel
def rotated(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """The product of K tile t is issued before tile t-1's is added (scaled) to the accumulator."""
    acc = tj.zeros((BM, BN), tj.float32)
    p = tj.dot(tj.load(a, (0, 0), (BM, BK)), tj.load(b, (0, 0), (BK, BN)))
    for k in range(BK, a.shape[1], BK):
        p_next = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)))
        acc = tj.fma(p, 0.5, acc)
        p = p_next
    tj.store(c, (0, 0), tj.fma(p, 0.5, acc))


def assigned(kernel, specs, consts, num_warps):
    return pipeline_until(kernel, specs, consts, "assign_layouts", num_warps)


@pytest.mark.parametrize("first_on_wgmma", [False, True])
def test_a_carried_product_takes_the_layout_of_the_loops_dot(first_on_wgmma, monkeypatch):
    """The first product takes wgmma too where it can (``wgmma.first_products``: no conversion
    at all); on mma.sync (``COMPUTED_B`` off: its B cannot be staged N-major) it is converted
    once, before the loop."""
    from tilejit.passes import wgmma
    monkeypatch.setattr(wgmma, "COMPUTED_B", first_on_wgmma)
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    fn = assigned(rotated, (bf16, bf16, ArraySpec(tj.float32, 2, True, True, False)),
                  {"BM": 128, "BN": 128, "BK": 64}, 8)
    layouts = fn.meta["layouts"]
    loop = next(o for o in fn.body.ops if o.op is TileOp.FOR)
    before = next(o for o in fn.body.ops if o.op is TileOp.DOT)
    inside = next(o for o in loop.regions[0].ops if o.op is TileOp.DOT)
    # mma.sync before, wgmma (warps 8x1) in it; or wgmma in both
    assert (layouts[before.result] == layouts[inside.result]) == first_on_wgmma
    for arg, yielded in zip(loop.regions[0].args[1:], loop.regions[0].ops[-1].operands):
        assert layouts[arg] == layouts[yielded]
    for res, arg in zip(loop.results, loop.regions[0].args[1:]):
        assert layouts[res] == layouts[arg]


@pytest.mark.parametrize("backend", ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_rotated_loop_computes_the_scaled_product(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 256)).astype(tj.bfloat16.np)
    b = rng.standard_normal((256, 128)).astype(tj.bfloat16.np)
    c = np.empty((128, 128), np.float32)
    rotated[(1,)](a, b, c, BM=128, BN=128, BK=64, num_warps=8)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_a_product_carried_in_flight_is_waited_for_before_it_is_read_and_its_loop_unrolled():
    """The loop's wgmma group stays in flight (``wait_group 1``), the carried product of the
    previous iteration goes through that wait (nothing reads it before), and the SIMT loop is
    marked to be unrolled by two; the PTX has both copies' wgmmas and ptxas does not serialise
    them (its C7514 note: a non-wgmma instruction read an accumulator in flight)."""
    from tilejit import codegen
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp

    from conftest import assemble_or_skip
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    tile = rotated.tile_ir((bf16, bf16, ArraySpec(tj.float32, 2, True, True, False)), {"BM": 128, "BN": 128, "BK": 64})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", warp_specialize=False)
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    assert loop.attrs.unroll
    wait, = [o for o in loop.regions[0].ops if o.op is SimtOp.WGMMA_WAIT]
    assert wait.attrs.n == 1 and loop.regions[0].args[2] in wait.operands
    reads = [o for o in loop.regions[0].ops if o.op is not SimtOp.WGMMA_WAIT and o.op is not SimtOp.YIELD
             and loop.regions[0].args[2] in o.operands]
    assert reads == []                              # only the waited-for copy is read
    ptx = codegen.compile_ptx(fn, "sm_90a")
    first = sum(o.op is SimtOp.WGMMA for o in fn.walk()) - sum(o.op is SimtOp.WGMMA for o in loop.regions[0].walk())
    assert first == 4                               # the first product, before the loop (BK 64: 4 k steps)
    assert ptx.count("wgmma.mma_async") == first + 2 * sum(o.op is SimtOp.WGMMA for o in loop.regions[0].walk())
    assembled = assemble_or_skip(ptx, "sm_90a")
    assert "C7514" not in assembled.log and assembled.spills == 0


def test_a_product_read_before_the_next_dot_is_not_rotated():
    """Reading the carried product before this iteration's DOT (the wait comes after it) keeps
    the plain loop: no unrolling, the wait passes only the new product."""
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp

    @tj.kernel
    def early(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        acc = tj.zeros((BM, BN), tj.float32)
        p = tj.dot(tj.load(a, (0, 0), (BM, BK)), tj.load(b, (0, 0), (BK, BN)))
        for k in range(BK, a.shape[1], BK):
            acc = tj.fma(p, 0.5, acc)
            p = tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)))
        tj.store(c, (0, 0), tj.fma(p, 0.5, acc))
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    tile = early.tile_ir((bf16, bf16, ArraySpec(tj.float32, 2, True, True, False)), {"BM": 128, "BN": 128, "BK": 64})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a", warp_specialize=False)
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    assert not loop.attrs.unroll


def test_a_loop_after_shared_memory_work_that_its_rings_reuse_is_not_warp_specialised(monkeypatch):
    """The product computed before the loop (on mma.sync: ``COMPUTED_B`` off) stages its operands
    in shared memory that the loop's rings reuse: specialised, the producer would fill the rings
    while the computing warps still read those bytes (on the H200 that gave wrong values), so
    ``TILEJIT_WS=1`` leaves the kernel as it is; the same loop without the product before it is
    specialised, and so is the loop after a wgmma product (``product_before_loop``: the rings'
    bytes kept to themselves)."""
    from tilejit.passes import specialise_warps as ws
    from tilejit.passes import wgmma
    from tilejit.passes.pipeline import compile_to_simt
    monkeypatch.setattr(wgmma, "COMPUTED_B", False)
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    specs = (bf16, bf16, ArraySpec(tj.float32, 2, True, True, False))
    fn = compile_to_simt(rotated.tile_ir(specs, {"BM": 128, "BN": 128, "BK": 64}), num_warps=8, target="sm_90a",
                         warp_specialize=False)
    rec = fn.meta.tma_loops[0]
    assert ws._shared_before(fn, rec, None)
    fn = compile_to_simt(rotated.tile_ir(specs, {"BM": 128, "BN": 128, "BK": 64}), num_warps=8, target="sm_90a",
                         warp_specialize=True)
    assert fn.meta.producer_warps == 0 and fn.meta.tma_loops

    @tj.kernel
    def plain(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        acc = tj.zeros((BM, BN), tj.float32)
        for k in range(0, a.shape[1], BK):
            acc = tj.fma(tj.dot(tj.load(a, (0, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN))), 0.5, acc)
        tj.store(c, (0, 0), acc)
    fn = compile_to_simt(plain.tile_ir(specs, {"BM": 128, "BN": 128, "BK": 64}), num_warps=8, target="sm_90a",
                         warp_specialize=True)
    assert fn.meta.producer_warps == 4
    monkeypatch.setattr(wgmma, "COMPUTED_B", True)
    fn = compile_to_simt(rotated.tile_ir(specs, {"BM": 128, "BN": 128, "BK": 64}), num_warps=8, target="sm_90a",
                         warp_specialize=True)
    assert fn.meta.producer_warps == 4 and ws._private(fn, fn.meta.tma_loops[0])


@pytest.mark.parametrize("private", [False, True])
def test_the_emulator_reports_a_producer_filling_rings_the_consumers_still_read(private, monkeypatch):
    """The race the H200 showed (wrong values) when ``_shared_before`` did not exist: specialised
    anyway, the producer's first TMA copies land in bytes the consumer warps' mma.sync staging
    still reads, and no mbarrier phase orders the two.  The emulator reports it, though it runs
    the consumers' staging first (a CTA barrier among the consumers does not order them with the
    producer); with the rings' bytes kept apart (``PRIVATE_RINGS``) the same kernel is exact."""
    from tilejit import backends
    from tilejit.backends import emulate
    from tilejit.passes import specialise_warps as ws
    from tilejit.passes import wgmma
    from tilejit.passes.pipeline import compile_to_simt
    monkeypatch.setattr(wgmma, "COMPUTED_B", False)          # the first product on mma.sync
    monkeypatch.setattr(ws, "_shared_before", lambda *args: False)
    monkeypatch.setattr(ws, "PRIVATE_RINGS", private)
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    specs = (bf16, bf16, ArraySpec(tj.float32, 2, True, True, False))
    fn = compile_to_simt(rotated.tile_ir(specs, {"BM": 128, "BN": 128, "BK": 64}), num_warps=8, target="sm_90a",
                         warp_specialize=True)
    assert fn.meta.producer_warps == 4
    rng = np.random.default_rng(6)
    a = rng.standard_normal((128, 320)).astype(tj.bfloat16.np)
    b = rng.standard_normal((320, 128)).astype(tj.bfloat16.np)
    c = np.zeros((128, 128), np.float32)
    geometry = backends.launch_geometry(fn.meta.programs_per_cta, (1, 1, 1), [a, b, c])
    if not private:
        with pytest.raises(emulate.EmulatorError, match="TMA_LOAD overwrites bytes the consumer warps"):
            emulate.run(fn, *geometry)
        return
    emulate.run(fn, *geometry)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@tj.kernel
def rotated_in_a_loop(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    """``rotated`` for two row blocks, one after another in an outer loop."""
    for i in range(0, 2):
        acc = tj.zeros((BM, BN), tj.float32)
        p = tj.dot(tj.load(a, (i * BM, 0), (BM, BK)), tj.load(b, (0, 0), (BK, BN)))
        for k in range(BK, a.shape[1], BK):
            p_next = tj.dot(tj.load(a, (i * BM, k), (BM, BK)), tj.load(b, (k, 0), (BK, BN)))
            acc = tj.fma(p, 0.5, acc)
            p = p_next
        tj.store(c, (i * BM, 0), tj.fma(p, 0.5, acc))


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_first_product_inside_another_loop_is_that_loops_dot(backend, monkeypatch):
    """``wgmma.first_products`` stages a first product's operands by the threads, which only a
    DOT outside every loop can do: one in an outer loop is left to that loop's own plan (here
    its rings: wgmma too), with the same values."""
    from tilejit.passes import wgmma
    bf16 = ArraySpec(tj.bfloat16, 2, True, True, False)
    fn = pipeline_until(rotated_in_a_loop, (bf16, bf16, ArraySpec(tj.float32, 2, True, True, False)),
                        {"BM": 64, "BN": 64, "BK": 32}, "plan_dots", 4)
    dots = {o for o in fn.walk() if o.op is TileOp.DOT}
    assert len(dots) == 2 and wgmma.first_products(fn, dots) == set()
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((128, 160)).astype(tj.bfloat16.np)
    b = rng.standard_normal((160, 64)).astype(tj.bfloat16.np)
    c = np.full((128, 64), np.nan, np.float32)
    rotated_in_a_loop[(1,)](a, b, c, BM=64, BN=64, BK=32, num_warps=4)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
