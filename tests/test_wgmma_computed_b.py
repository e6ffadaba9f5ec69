"""wgmma with a B the loop computes (``wgmma.COMPUTED_B``, on since measured on the GPU): the
W4A16 example at 64 rows a block, and a Triton-style loop whose B is a loaded tile scaled in the
loop, take wgmma (A from its TMA ring, B stored into wgmma's atoms each iteration -- into two
buffers with one group in flight, or one with none -- and one proxy fence); float64 references on the emulator and, under
``-m gpu``, on the GPU; the PTX assembles without spills or serialised wgmmas."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import dtypes as D
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import w4a16_gemm
from tilejit.passes import wgmma
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

BF16, U8 = (ArraySpec(dt, 2, True, True, False) for dt in (D.bfloat16, D.uint8))
F32_3, I32_1 = ArraySpec(D.float32, 3, True, True, False), ArraySpec(D.int32, 1, True, True, False)
W4 = w4a16_gemm.w4a16_matmul_kernel


@tj.kernel
def scaled_b(x, w, y, s: tj.float32, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, x.shape[1], BK):
        acc += tj.load(x, (m, k), (BM, BK)) @ (tj.load(w, (k, n), (BK, BN)) * s).to(tj.bfloat16)
    tj.store(y, (m, n), acc)


@pytest.fixture(params=[1, 2], ids=["one_buffer", "two_buffers"])
def computed_b(monkeypatch, request):
    """The switch on, with one or two buffers for the computed B (``COMPUTED_B_BUFFERS``: with
    two, the group stays in flight while the next B is stored); the value is the count."""
    monkeypatch.setattr(wgmma, "COMPUTED_B", True)
    monkeypatch.setattr(wgmma, "COMPUTED_B_BUFFERS", request.param)
    for k in (W4, scaled_b):
        k._cache.clear()
        k._fast.clear()
    yield request.param
    for k in (W4, scaled_b):
        k._cache.clear()
        k._fast.clear()


def in_flight(plans: str) -> int:
    """The K loop's ``wgmma_in_flight`` in a plan_loops dump (its first loop)."""
    return int(plans.split("wgmma_in_flight=")[1][0])


def w4_simt(bm=64, warps=4):
    consts = {"BM": bm, "BN": 64, "BK": 128, "GROUP": 128, "K_SLICE": 2048}
    texts = {}
    fn = compile_to_simt(W4.tile_ir((BF16, U8, BF16, BF16, BF16, F32_3, I32_1), consts), warps, "sm_90a",
                         dump=texts.__setitem__)
    return fn, texts["plan_loops"]


def test_the_w4a16_64_row_dot_takes_wgmma_with_the_switch(computed_b, monkeypatch):
    fn, plans = w4_simt()
    assert "wgmma bf16 m64 n64 k128" in plans and in_flight(plans) == computed_b - 1
    assert "as A_ATOMS (wgmma)" in plans
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    body = list(loop.regions[0].walk())
    # one buffer: nothing left in flight; two: one group, its B in the other buffer
    assert {o.attrs.n for o in body if o.op is SimtOp.WGMMA_WAIT} == {computed_b - 1}
    assert [o.op for o in body].count(SimtOp.STORE_SHARED) == 1
    monkeypatch.setattr(wgmma, "COMPUTED_B_BUFFERS", 1)
    assert fn.meta.shared_bytes - w4_simt()[0].meta.shared_bytes == (computed_b - 1) * 128 * 64 * 2   # a B tile
    monkeypatch.setattr(wgmma, "COMPUTED_B_BUFFERS", computed_b)
    # with 8 warps (two warpgroups reading one B) the group never stays in flight
    assert in_flight(w4_simt(bm=128, warps=8)[1]) == 0
    monkeypatch.setattr(wgmma, "COMPUTED_B", False)
    assert "mma.sync bf16 m64 n64 k128" in w4_simt()[1]
    assert "mma.sync" in w4_simt(bm=16)[1]                 # 16 rows: not a warpgroup's 64 either way


def test_two_b_buffers_get_no_more_slots_than_keep_two_ctas_an_sm(computed_b):
    """64x128x128 at 4 warps: one B buffer keeps the compiler's 4 slots; two (32 KB each) get 3, the
    CTA's shared memory within ``PAIR_CTA_BYTES`` (measured: 4 slots and one CTA an SM were 32%
    slower); a B of 16 KB leaves the 4 slots."""
    from tilejit.passes import plan_loops
    consts = {"BM": 64, "BN": 128, "BK": 128, "GROUP": 128, "K_SLICE": 2048}
    fn = compile_to_simt(W4.tile_ir((BF16, U8, BF16, BF16, BF16, F32_3, I32_1), consts), 4, "sm_90a")
    [loop] = fn.meta.tma_loops
    assert (loop.stages, loop.in_flight) == ((4, 0) if computed_b == 1 else (3, 1))
    assert computed_b == 1 or fn.meta.shared_bytes <= plan_loops.PAIR_CTA_BYTES
    [loop] = w4_simt()[0].meta.tma_loops                                  # BN 64: 16 KB a buffer
    assert loop.stages == 4


def test_computed_b_ptx_assembles_without_spills_or_serialised_wgmma(computed_b):
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    fn, _ = w4_simt()
    ptx = compile_ptx(fn, "sm_90a")
    assert "wgmma.mma_async" in ptx and "fence.proxy.async" in ptx
    out = ptxas.assemble(ptx, "sm_90a")
    assert out.spills == 0 and "serialized" not in out.log, out.log


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("m, k, n, cfg", [(70, 512, 128, dict(BM=64, BN=64, BK=128, split=2)),
                                          (64, 384, 192, dict(BM=64, BN=64, BK=128)),
                                          (100, 256, 128, dict(BM=64, BN=128, BK=64))])
def test_w4a16_on_computed_b_wgmma_matches_float64(computed_b, monkeypatch, tmp_path, backend, m, k, n, cfg):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))          # (the cache key does not see the switch)
    rng = np.random.default_rng(m + k)
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, s, z = w4a16_gemm.quantize(rng.standard_normal((k, n)).astype(np.float32), 128)
    out = w4a16_gemm.run(a, packed, s, z, group=128, **cfg).astype(np.float64)
    ref = w4a16_gemm.reference(a, packed, s, z, group=128)
    tj.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["emulate", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_triton_style_loop_with_a_scaled_b_takes_it_too(computed_b, monkeypatch, tmp_path, backend):
    """``acc += x @ (w * s).to(bf16)`` in a plain ``range`` with ``acc +=``: the same path (its
    plan says wgmma) and float64's result on ragged K."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    f32 = ArraySpec(D.float32, 2, True, True, False)
    texts = {}
    compile_to_simt(scaled_b.tile_ir((BF16, BF16, f32, ScalarSpec(D.float32)), {"BM": 64, "BN": 64, "BK": 64}),
                    4, "sm_90a", dump=texts.__setitem__)
    assert "wgmma bf16 m64 n64 k64" in texts["plan_loops"]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 200)).astype(tj.bfloat16.np)
    w = rng.standard_normal((200, 128)).astype(tj.bfloat16.np)
    y = np.full((128, 128), np.nan, np.float32)
    scaled_b[(2, 2)](x, w, y, 0.5, BM=64, BN=64, BK=64, num_warps=4)
    wb = (w.astype(np.float32) * np.float32(0.5)).astype(tj.bfloat16.np).astype(np.float64)
    ref = x.astype(np.float64) @ wb
    tj.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_a_big_computed_b_gets_the_slots_that_fit_beside_its_buffers(computed_b):
    """64x128x256 (a 64 KB B tile) at 4 warps: the ring's slots are counted beside the B's
    buffers, so the CTA fits the SM's shared memory (with two buffers it asked for 263 KB and
    was refused); where a second buffer leaves fewer than 3 slots the loop keeps 2 and one
    buffer, nothing in flight.  A 32 KB B keeps session 21's 3 slots and one group in flight."""
    from tilejit.passes.shared_memory import MAX_SHARED_BYTES
    for bn in (128, 256):                  # a B of 64 KB, and one of 128 KB (with one buffer it took 256 KB)
        consts = {"BM": 64, "BN": bn, "BK": 256, "GROUP": 256, "K_SLICE": 2048}
        fn = compile_to_simt(W4.tile_ir((BF16, U8, BF16, BF16, BF16, F32_3, I32_1), consts), 4, "sm_90a")
        [loop] = fn.meta.tma_loops
        assert fn.meta.shared_bytes <= MAX_SHARED_BYTES["sm_90a"]
        assert loop.stages >= 2 and loop.in_flight == 0
        assert computed_b == 1 or loop.stages == 2
    # the Triton-style spelling (``acc += x @ (w * s).to(bf16)``, w float32) plans the same way
    f32 = ArraySpec(D.float32, 2, True, True, False)
    fn = compile_to_simt(scaled_b.tile_ir((BF16, f32, f32, ScalarSpec(D.float32)), {"BM": 64, "BN": 128, "BK": 256}),
                         4, "sm_90a")
    [loop] = fn.meta.tma_loops
    assert fn.meta.shared_bytes <= MAX_SHARED_BYTES["sm_90a"] and loop.stages >= 2 and loop.in_flight == 0
    consts["BN"], consts["BK"], consts["GROUP"] = 128, 128, 128
    [loop] = compile_to_simt(W4.tile_ir((BF16, U8, BF16, BF16, BF16, F32_3, I32_1), consts), 4, "sm_90a").meta.tma_loops
    assert (loop.stages, loop.in_flight) == ((3, 1) if computed_b == 2 else (4, 0))
