"""Thread-private cp.async rings for the loops of long rows (``passes.row_rings``, behind the
``ROW_RINGS`` switch): the plan names the ringed loads, the kernels give NumPy's results on
emulate (which runs the copies, their groups and waits), ragged rows and rows whose stride is
not a multiple of 16 bytes included, and the PTX assembles without spills."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import codegen
from tilejit.backends import cuda
from tilejit.passes import row_rings
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp

from conftest import assemble_or_skip
from examples import layernorm, rmsnorm, softmax

BF16 = tj.bfloat16.np
KERNELS = [softmax.softmax_kernel, layernorm.layernorm_kernel, rmsnorm.rmsnorm_kernel]


@pytest.fixture
def rings(monkeypatch):
    """Rings on, rows in one CTA (a cluster would share them: ``cluster_rows``), fresh compiles."""
    monkeypatch.setattr(row_rings, "ROW_RINGS", True)
    monkeypatch.setenv("TILEJIT_CLUSTER", "0")
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    for k in KERNELS + [carry_along, in_place_scale]:
        k._cache.clear()
        k._fast.clear()
    yield
    for k in KERNELS + [carry_along, in_place_scale]:
        k._cache.clear()
        k._fast.clear()


def simt_of(kernel, *args, **consts):
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    tile = kernel.tile_ir(specs, consts)
    from tilejit.passes.warps import choose_num_warps
    texts = {}
    fn = compile_to_simt(tile, choose_num_warps(tile), cluster=False, dump=texts.__setitem__)
    return fn, texts["plan_loops"]


@pytest.mark.parametrize("dtype, loops", [(BF16, 3), (np.float32, 0)])
def test_the_chunk_loops_of_a_long_softmax_row_are_ringed(rings, dtype, loops):
    """bf16 at 65,536 columns: three chunk loops of 8192-value chunks (16 KiB a slot), each
    ringed 4 slots deep; float32 chunks of 64 KiB leave no room for two slots."""
    x = np.zeros((2, 65536), dtype)
    fn, plans = simt_of(softmax.softmax_kernel, x, x, BLOCK=65536)
    assert plans.count("row ring:") == loops
    copies = [o for o in fn.walk() if o.op is SimtOp.CP_ASYNC]
    assert len(copies) == 4 * loops                 # 3 in each prologue, 1 in each body
    waits = sorted(o.attrs.n for o in fn.walk() if o.op is SimtOp.CP_ASYNC_WAIT)
    assert waits == [0] * loops + [3] * loops
    ringed = [o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.CP_ASYNC for x in o.regions[0].walk())]
    assert len(ringed) == loops
    assert not any(x.op is SimtOp.BARRIER for o in ringed for x in o.regions[0].walk())   # thread-private


def test_without_the_switch_nothing_is_ringed(monkeypatch):
    monkeypatch.setattr(row_rings, "ROW_RINGS", False)
    x = np.zeros((2, 65536), BF16)
    _, plans = simt_of(softmax.softmax_kernel, x, x, BLOCK=65536)
    assert "row ring:" not in plans


@pytest.mark.parametrize("dtype", [BF16, np.float32])
@pytest.mark.parametrize("cols", [65536, 40000, 20000])
def test_ringed_long_rows_match_numpy_on_emulate(rings, dtype, cols):
    """softmax (other=-inf: the zero-filled copies are replaced), layernorm and RMSNorm, the last
    chunk partly or wholly past the row, against float64 NumPy."""
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((3, cols)) * 3).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    tj.testing.assert_close(softmax.run(x), softmax.reference(x).astype(dtype))
    tj.testing.assert_close(layernorm.run(x, w, b), layernorm.reference(x, w, b).astype(dtype))
    tj.testing.assert_close(rmsnorm.run(x, w), rmsnorm.reference(x, w).astype(dtype))


def test_a_row_stride_off_16_bytes_takes_the_plain_loop(rings):
    """Rows 65,537 bf16 apart: cp.async could not read them in aligned chunks, so the launch
    checks the stride and runs the loop without the ring; the results are the same."""
    rng = np.random.default_rng(1)
    wide = rng.standard_normal((3, 65537)).astype(BF16)
    x = wide[:, :65536]
    tj.testing.assert_close(softmax.run(x), softmax.reference(x).astype(BF16))
    aligned = np.ascontiguousarray(x)
    np.testing.assert_array_equal(softmax.run(x).view(np.uint16), softmax.run(aligned).view(np.uint16))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_ringed_kernels_assemble_without_spills(rings, kernel):
    x = np.zeros((2, 65536), BF16)
    w = np.zeros(65536, BF16)
    args = {"softmax_kernel": (x, x), "layernorm_kernel": (x, w, w, x, 1e-5),
            "rmsnorm_kernel": (x, w, x, 1e-5)}[kernel.name]
    fn, plans = simt_of(kernel, *args, BLOCK=65536)
    assert "row ring:" in plans
    assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a")
    assert cuda.assemble_hinted(fn, "sm_90a")[0].spills == 0


@pytest.mark.parametrize("kernel, target, cols, dtype, ringed", [
    ("softmax", "sm_90a", 32768, BF16, 0),   # a 64 KiB stash, 3 CTAs of 512 threads: no room for 2 slots
    ("rmsnorm", "sm_90a", 16384, BF16, 1),   # a 32 KiB stash: 3 CTAs keep their room with a ring (the
    #                                          weight, which the stored array might alias, is not ringed)
    ("softmax", "sm_80", 32768, np.float32, 0),     # a 128 KiB stash on 164 KiB: nothing left
    ("softmax", "sm_80", 65536, BF16, 3)])   # no stash: slots of 16 KiB under sm_80's limit
def test_a_ring_never_costs_the_sm_a_cta_or_the_target_its_limit(rings, kernel, target, cols, dtype, ringed):
    from tilejit.backends.cuda import check_resources
    from tilejit.passes.warps import choose_num_warps
    x, w = np.zeros((2, cols), dtype), np.zeros(cols, dtype)
    k = {"softmax": softmax.softmax_kernel, "rmsnorm": rmsnorm.rmsnorm_kernel}[kernel]
    args = (x, x) if kernel == "softmax" else (x, w, x, 1e-5)
    specs, consts, _ = k.specialise(k.bind(args, {"BLOCK": cols}))
    tile = k.tile_ir(specs, consts)
    texts = {}
    fn = compile_to_simt(tile, choose_num_warps(tile), target=target, cluster=False, dump=texts.__setitem__)
    assert texts["plan_loops"].count("row ring:") == ringed
    check_resources(fn, target)              # raises past the target's shared memory


@tj.kernel
def carry_along(x, BLOCK: tj.constexpr):
    """Each iteration reads the block the previous one wrote: a copy issued ahead would read it
    before that store."""
    row = tj.program_id(0)
    for c in range(0, x.shape[1] - BLOCK, BLOCK):
        tj.store(x, (row, c + BLOCK), tj.load(x, (row, c), (1, BLOCK)) + 1)


@tj.kernel
def in_place_scale(x, y, BLOCK: tj.constexpr):
    """A store of the loaded block itself (as chunk_rows' store loops write): ringed."""
    row = tj.program_id(0)
    for c in range(0, x.shape[1], BLOCK):
        tj.store(y, (row, c), tj.load(x, (row, c), (1, BLOCK)) * 2)


def test_a_loop_that_writes_a_later_block_is_not_ringed(rings):
    x = np.zeros((3, 64 * 6), BF16)
    x[:, :64] = np.arange(64)
    _, plans = simt_of(carry_along, x, BLOCK=64)
    assert "row ring:" not in plans
    carry_along[(3,)](x, BLOCK=64)
    want = np.arange(64)[None, :, None] + np.arange(6)[None, None, :]
    np.testing.assert_array_equal(x.astype(np.float32).reshape(3, 6, 64).transpose(0, 2, 1),
                                  np.broadcast_to(want, (3, 64, 6)))


def test_a_loop_that_stores_its_own_block_in_place_is_ringed(rings):
    x = np.random.default_rng(2).standard_normal((3, 64 * 6)).astype(BF16)
    want = (x.astype(np.float32) * 2).astype(BF16)
    _, plans = simt_of(in_place_scale, x, x, BLOCK=64)
    assert plans.count("row ring:") == 1
    in_place_scale[(3,)](x, x, BLOCK=64)
    np.testing.assert_array_equal(x.view(np.uint16), want.view(np.uint16))


# --- a tensor-core loop's other big loads (DOT_LOOP_ROW_RINGS): W4A16's packed weights
from examples import w4a16_gemm  # noqa: E402


@pytest.fixture
def dot_rings(monkeypatch):
    monkeypatch.setattr(row_rings, "DOT_LOOP_ROW_RINGS", True)
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    w4a16_gemm.w4a16_matmul_kernel._cache.clear()
    w4a16_gemm.w4a16_matmul_kernel._fast.clear()
    yield
    w4a16_gemm.w4a16_matmul_kernel._cache.clear()
    w4a16_gemm.w4a16_matmul_kernel._fast.clear()


def w4_inputs(rng, m, k, n):
    a = rng.standard_normal((m, k)).astype(BF16)
    return (a,) + w4a16_gemm.quantize(rng.standard_normal((k, n)).astype(np.float32), 128)


def test_the_packed_weights_of_a_w4a16_loop_ride_the_operand_rings_commit_groups(dot_rings, monkeypatch):
    """The packed (128, 32) uint8 tile gets a thread-private ring as deep as the loop's cp.async
    ring of ``x``; its copies share the ring's commit groups (one wait an iteration, no barrier
    of their own); the (1, 64) scales stay plain (too small)."""
    a, packed, s, z = w4_inputs(np.random.default_rng(0), 16, 512, 128)
    c = np.empty((16, 128), BF16)
    fn, plans = simt_of(w4a16_gemm.w4a16_matmul_kernel, a, packed, s, z, c, None, None, BM=16, BN=64, BK=128,
                        GROUP=128)
    line = next(x for x in plans.splitlines() if "stages=" in x and "pipelined=True" in x)
    stages = int(line.split("stages=")[1].split()[0])
    assert plans.count("row ring:") == 1 and f"({stages} slots, thread-private)" in plans
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(x.op is SimtOp.CP_ASYNC for x in o.regions[0].walk()))
    body = list(loop.regions[0].walk())
    assert sum(o.op is SimtOp.CP_ASYNC_COMMIT for o in body) == 1
    assert sum(o.op is SimtOp.CP_ASYNC_WAIT for o in body) == 1
    assert not any(o.op is SimtOp.LOAD_GLOBAL and o.results and o.result.type.dtype == tj.uint8 for o in body)
    monkeypatch.setattr(row_rings, "DOT_LOOP_ROW_RINGS", False)
    assert "row ring:" not in simt_of(w4a16_gemm.w4a16_matmul_kernel, a, packed, s, z, c, None, None, BM=16, BN=64,
                                      BK=128, GROUP=128)[1]


@pytest.mark.parametrize("m, k, n, cfg", [(3, 1024, 192, dict(BM=16, BN=64, BK=128, split=3)),
                                          (5, 640, 128, dict(BM=16, BN=64, BK=128)),
                                          (70, 512, 128, dict(BM=64, BN=64, BK=128, split=2)),
                                          (2, 384, 256, dict(BM=16, BN=128, BK=64, split=2))])
def test_ringed_packed_weights_give_the_same_bits_on_emulate(dot_rings, monkeypatch, tmp_path, m, k, n, cfg):
    """Ragged K (a last tile past the array), split-K slices, 64-row blocks and 64-deep K tiles:
    the ringed loop's result is bit for bit the plain loop's (the emulator also checks that no
    thread reads a slot before its copy landed)."""
    inputs = w4_inputs(np.random.default_rng(m), m, k, n)
    out = {}
    for on in (True, False):
        monkeypatch.setattr(row_rings, "DOT_LOOP_ROW_RINGS", on)
        monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / str(on)))
        w4a16_gemm.w4a16_matmul_kernel._cache.clear()
        w4a16_gemm.w4a16_matmul_kernel._fast.clear()
        out[on] = w4a16_gemm.run(*inputs, group=128, **cfg)
    ref = w4a16_gemm.reference(*inputs, group=128, rounded=cfg["BM"] >= 64)
    tj.testing.assert_close(out[True].astype(np.float64), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    np.testing.assert_array_equal(out[True].view(np.uint16), out[False].view(np.uint16))


def test_ringed_packed_weights_assemble_without_spills(dot_rings):
    a, packed, s, z = w4_inputs(np.random.default_rng(0), 1, 8192, 256)
    c = np.empty((1, 256), BF16)
    part, count = w4a16_gemm.workspace(1, 256, 4, 16, 64)
    fn, plans = simt_of(w4a16_gemm.w4a16_matmul_kernel, a, packed, s, z, c, part, count, BM=16, BN=64, BK=128,
                        GROUP=128, K_SLICE=2048)
    assert "row ring:" in plans
    assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a")
    assert cuda.assemble_hinted(fn, "sm_90a")[0].spills == 0
