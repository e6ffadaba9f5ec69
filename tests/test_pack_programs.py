"""pack_programs: several programs along grid axis 0 in one CTA.  Each packed kernel must give
bit for bit what the unpacked one gives on the emulator (groups own disjoint shared memory and
named barriers), program_id / num_programs must keep their meaning, the PTX must assemble with
one named barrier per group, and kernels with loops or tensor cores are refused."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import backends, codegen, ir, simt
from tilejit import dtypes as D
from tilejit.backends import cuda, emulate
from tilejit.examples.layernorm import layernorm_kernel
from tilejit.examples.matmul import matmul_kernel
from tilejit.examples.rmsnorm import rmsnorm_kernel
from tilejit.examples.softmax import softmax_kernel
from tilejit.passes.pack_programs import pack_programs, packable
from tilejit.passes.pipeline import compile_to_simt
from tilejit.passes.warps import choose_num_warps
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

from conftest import assemble_or_skip


def row_spec(dt):
    return ArraySpec(dt, 2, True, True, False)


def vec_spec(dt):
    return ArraySpec(dt, 1, True, True, False)


CASES = {
    "softmax": (softmax_kernel, lambda dt: (row_spec(dt), row_spec(dt)), lambda x, w: [x]),
    "rmsnorm": (rmsnorm_kernel, lambda dt: (row_spec(dt), vec_spec(dt), row_spec(dt), ScalarSpec(D.float32)),
                lambda x, w: [x, w]),
    "layernorm": (layernorm_kernel, lambda dt: (row_spec(dt), vec_spec(dt), vec_spec(dt), row_spec(dt),
                                                 ScalarSpec(D.float32)), lambda x, w: [x, w, w[::-1].copy()]),
}


def run(fn, inputs, out_shape, dtype, grid0):
    """``grid0`` programs of ``fn`` on the emulator, as the emulate backend launches them."""
    y = np.full(out_shape, np.nan, dtype)
    args = inputs + [y] + ([1e-5] if len(inputs) > 1 else [])
    emulate.run(fn, *backends.launch_geometry(fn.meta.programs_per_cta, (grid0, 1, 1), args))
    return y


def same_rows(one, packed, inputs, dt, rows: int, block: int, seed: int) -> None:
    """``packed`` gives ``one``'s rows bit for bit (ragged rows; 16-byte aligned, as the spec says)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, block - 8)).astype(dt.np)
    w = rng.standard_normal(block - 8).astype(dt.np)
    want = run(one, inputs(x, w), x.shape, dt.np, rows)
    got = run(packed, inputs(x, w), x.shape, dt.np, rows)
    assert not np.isnan(want.astype(np.float32)).any()
    np.testing.assert_array_equal(got.view(f"u{dt.itemsize}"), want.view(f"u{dt.itemsize}"))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
@pytest.mark.parametrize("block, warps, programs", [(256, 2, 4), (128, 1, 8), (256, 1, 2), (64, 2, 3), (256, 1, 8), (512, 1, 8)])
def test_packed_rows_match_the_unpacked_kernel_bit_for_bit(name, dtype, block, warps, programs):
    kernel, specs, inputs = CASES[name]
    dt = D.from_numpy(np.dtype(getattr(__import__("ml_dtypes"), dtype)) if isinstance(dtype, str) else np.dtype(dtype))
    tile = kernel.tile_ir(specs(dt), {"BLOCK": block})
    one = compile_to_simt(tile, num_warps=warps)
    packed = compile_to_simt(tile, num_warps=warps, programs_per_cta=programs)
    assert packed.meta.programs_per_cta == programs and packed.meta.num_warps == warps
    same_rows(one, packed, inputs, dt, 6 * programs - 1, block, block + programs)


@tj.kernel
def ids(out, BLOCK: tj.constexpr):
    p = tj.program_id(0)
    t = tj.zeros((BLOCK,), tj.int32) + p * 1000 + tj.num_programs(0)
    tj.store(out, (p * BLOCK,), t)


@pytest.mark.parametrize("grid", [12, 10, 1])
def test_program_ids_and_their_count_keep_their_meaning(grid):
    """3 CTAs of 4 programs for a grid of 12 or 10 (the last CTA's spare programs store
    nothing), 1 CTA for 1."""
    fn = compile_to_simt(ids.tile_ir((ArraySpec(D.int32, 1, True, True, False),), {"BLOCK": 64}),
                         num_warps=1, programs_per_cta=4)
    out = np.full(13 * 64, -1, np.int32)
    cta_grid, args = backends.launch_geometry(4, (grid, 1, 1), [out])
    assert cta_grid == (-(-grid // 4), 1, 1) and args[-1] == grid
    emulate.run(fn, cta_grid, args)
    want = np.full((13, 64), -1)
    want[:grid] = (np.arange(grid) * 1000 + grid)[:, None]
    np.testing.assert_array_equal(out.reshape(13, 64), want)


def test_groups_own_their_shared_memory_and_named_barriers():
    tile = softmax_kernel.tile_ir((row_spec(D.float32),) * 2, {"BLOCK": 512})
    one = compile_to_simt(tile, num_warps=4, persist=False)
    fn = compile_to_simt(tile, num_warps=4, programs_per_cta=2)
    assert one.meta.shared_bytes > 0
    assert fn.meta.shared_bytes == 2 * -(-one.meta.shared_bytes // 128) * 128
    bars = [o for o in fn.walk() if o.op is SimtOp.BARRIER]
    assert bars and all(len(o.operands) == 1 and o.attrs.threads == 128 for o in bars)
    simt.verify(fn)
    assert "programs_per_cta=2" in fn.meta.summary()
    ptx = codegen.compile_ptx(fn, "sm_90a")
    assert ".maxntid 256" in ptx
    # the barrier id is a register (1 + the group), never the CTA-wide barrier 0
    assert "bar.sync \t%r" in ptx and "bar.sync \t0" not in ptx and "barrier.sync" not in ptx.replace("bar.sync", "")
    assert assemble_or_skip(ptx, "sm_90a").spills == 0


def test_shared_regions_that_overlapped_would_be_caught():
    """Without the per-group offset two programs reduce through the same shared bytes and one
    reads the other's partial sums (so the bit-for-bit test above is not vacuous)."""
    tile = softmax_kernel.tile_ir((row_spec(D.float32),) * 2, {"BLOCK": 512})
    fn = compile_to_simt(tile, num_warps=4, programs_per_cta=2)
    x = np.random.default_rng(0).standard_normal((4, 500)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(run(fn, [x], x.shape, np.float32, 4), want, rtol=1e-5)
    for o in fn.walk():
        if o.op in (SimtOp.LOAD_SHARED, SimtOp.STORE_SHARED):
            moved = o.operands[0].owner
            assert moved.op is SimtOp.ELEMENTWISE and moved.attrs.op is ir.TileOp.ADD
            o.operands[0] = moved.operands[0]        # the address before the group's offset
    assert not np.allclose(run(fn, [x], x.shape, np.float32, 4), want, rtol=1e-5)


def test_loops_and_tensor_cores_are_not_packed():
    spec = ArraySpec(D.float16, 2, True, True, False)
    mm = compile_to_simt(matmul_kernel.kernel.tile_ir((spec, spec, row_spec(D.float32)),
                                                      {"BM": 32, "BN": 32, "BK": 16, "STAGES": 3}), num_warps=4)
    assert not packable(mm)
    with pytest.raises(ValueError, match="cannot pack 2 programs of 4 warps of kernel 'matmul_kernel'"):
        pack_programs(mm, 2)
    sm = compile_to_simt(softmax_kernel.tile_ir((row_spec(D.float32),) * 2, {"BLOCK": 256}), num_warps=2,
                         persist=False)
    assert packable(sm)
    with pytest.raises(ValueError, match="cannot pack 16 programs"):
        pack_programs(sm, 16)
    assert pack_programs(sm, 1) is sm


@pytest.mark.parametrize("rows", [37, 8, 1])
def test_a_launch_packs_short_rows_and_spare_programs_store_nothing(rows, monkeypatch):
    """Through the kernel launch on emulate: the compiler gives a 100-column softmax one warp and
    packs it 8 to a CTA, an extra output row past the grid stays untouched, and the bits are
    those of TILEJIT_PACK=0."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    x = np.random.default_rng(rows).standard_normal((rows, 100)).astype(np.float32)
    outs = {}
    for pack in ("1", "0"):
        monkeypatch.setenv("TILEJIT_PACK", pack)
        found = softmax_kernel.inspect_specs((row_spec(D.float32),) * 2, {"BLOCK": 128}, backend="emulate")
        assert (found.num_warps, found.programs_per_cta) == ((1, 8) if pack == "1" else (1, 1))
        y = np.full((rows + 1, 100), np.nan, np.float32)
        softmax_kernel[(rows,)](x, y, BLOCK=128)
        assert np.isnan(y[rows]).all()
        outs[pack] = y[:rows]
    np.testing.assert_array_equal(outs["1"], outs["0"])
    want = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(outs["1"], want / want.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("name, block, dtype, two_warps, one_warp", [
    ("softmax", 128, D.float32, True, True), ("softmax", 256, D.bfloat16, True, True),
    ("softmax", 256, D.float32, False, True), ("softmax", 512, D.bfloat16, False, True),   # 1 KiB
    ("softmax", 512, D.float32, False, False), ("softmax", 1024, D.bfloat16, False, False),
    ("rmsnorm", 512, D.bfloat16, False, True),             # x and the weight: 1024 values loaded
    ("layernorm", 256, D.float32, False, True),            # x, weight, bias: 768 values
    ("layernorm", 512, D.bfloat16, False, False),          # 1536 values: slower packed on the H200
])
def test_small_programs_are_packed(name, block, dtype, two_warps, one_warp):
    """Packed: one-warp programs with no tile over 1 KiB that load at most 1024 values, and
    two-warp ones with no tile over 512 bytes."""
    kernel, specs, _ = CASES[name]
    tile = kernel.tile_ir(specs(dtype), {"BLOCK": block})
    assert compile_to_simt(tile, num_warps=2, pack=True).meta.programs_per_cta == (4 if two_warps else 1)
    assert compile_to_simt(tile, num_warps=1, pack=True).meta.programs_per_cta == (8 if one_warp else 1)
    assert compile_to_simt(tile, num_warps=2).meta.programs_per_cta == 1        # pack off
    assert choose_num_warps(tile) == (1 if one_warp else 2)


def test_the_cache_entry_keeps_the_packing():
    from tilejit.backends.cuda import CudaArtifact
    art = CudaArtifact("k", [], (0,), 2, 0, ".version 8.4", None, "", "", 20, 0, 4)
    back = CudaArtifact.from_cache(art.files(), art.meta())
    assert back.programs_per_cta == 4 and back.num_warps == 2
    meta = art.meta()
    del meta["programs_per_cta"]                   # an entry written before packing existed
    assert CudaArtifact.from_cache(art.files(), meta).programs_per_cta == 1


@tj.kernel
def softmax_flat(x, y, n, BLOCK: tj.constexpr):
    """The Triton tutorial's spelling: flat 1-D arrays, a row offset, and a column mask."""
    row = tj.program_id(0)
    cols = tj.arange(0, BLOCK)
    t = tj.load(x, (row * n,), (BLOCK,), other=-tj.inf, mask=cols < n)
    e = tj.exp(t - tj.max(t, axis=0))
    tj.store(y, (row * n,), e / tj.sum(e, axis=0), mask=cols < n)


@tj.kernel
def softmax_two_rows(x, y, BLOCK: tj.constexpr):
    """Several rows per program: a (2, BLOCK) tile."""
    r = tj.program_id(0) * 2
    t = tj.load(x, (r, 0), (2, BLOCK), other=-tj.inf)
    e = tj.exp(t - tj.max(t, axis=1, keepdims=True))
    tj.store(y, (r, 0), e / tj.sum(e, axis=1, keepdims=True))


@pytest.mark.parametrize("spelling", ["flat", "two_rows"])
@pytest.mark.parametrize("dtype, programs", [(np.float32, 8), (tj.bfloat16.np, 16)])
def test_other_spellings_of_a_short_row_are_packed_too(spelling, dtype, programs, monkeypatch):
    """512-byte programs either way (a 128-value flat row, or two rows of 64): one warp, 8 per CTA;
    in bf16 the same spellings fill 16 lanes, and two programs share each warp."""
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    rows, n = 21, (100 if spelling == "flat" else 60)
    x = np.random.default_rng(5).standard_normal((rows, n)).astype(dtype)
    xf = x.astype(np.float32)
    want = np.exp(xf - xf.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    if spelling == "flat":
        y = np.full(rows * n, np.nan, dtype)
        found = softmax_flat.inspect(x.ravel(), y, n, BLOCK=128)
        softmax_flat[(rows,)](x.ravel(), y, n, BLOCK=128)
    else:
        y = np.full_like(x, np.nan)
        found = softmax_two_rows.inspect(x, y, BLOCK=64)
        softmax_two_rows[(tj.cdiv(rows, 2),)](x, y, BLOCK=64)
    assert (found.num_warps, found.programs_per_cta) == (1, programs)
    tight = {"rtol": 1e-5, "atol": 1e-7} if dtype == np.float32 else {}     # float32: as before
    tj.testing.assert_close(y.reshape(rows, n), want.astype(dtype), **tight)


# --- sub-warp programs: a one-warp program whose layouts place data on 16 or 8 lanes shares its warp
@tj.kernel
def scan_rows(x, y, BLOCK: tj.constexpr):
    r = tj.program_id(0)
    tj.store(y, (r, 0), tj.cumsum(tj.load(x, (r, 0), (1, BLOCK)), axis=1))


@tj.kernel
def sort_rows(x, y, BLOCK: tj.constexpr):
    r = tj.program_id(0)
    tj.store(y, (r, 0), tj.sort(tj.load(x, (r, 0), (1, BLOCK), other=tj.inf), axis=1))


SUBWARP = dict(CASES, scan=(scan_rows, CASES["softmax"][1], CASES["softmax"][2]),
               sort=(sort_rows, CASES["softmax"][1], CASES["softmax"][2]))


@pytest.mark.parametrize("name", sorted(SUBWARP))
@pytest.mark.parametrize("dtype, block, lanes", [(D.bfloat16, 128, 16), (D.bfloat16, 64, 8), (D.float32, 64, 16),
                                                 (D.float32, 128, 32)])
def test_sub_warp_programs_match_the_unpacked_kernel_bit_for_bit(name, dtype, block, lanes):
    """A 128-column bf16 row is 16 lanes of 16 bytes: two programs per warp, 16 per CTA (8 lanes:
    four per warp); shuffles stay inside a program, shared memory is the program's own, and
    barriers are per warp (its programs run in step)."""
    kernel, specs, inputs = SUBWARP[name]
    tile = kernel.tile_ir(specs(dtype), {"BLOCK": block})
    one = compile_to_simt(tile, num_warps=1)
    packed = compile_to_simt(tile, num_warps=1, pack=True)
    programs = 8 * 32 // lanes
    assert (packed.meta.programs_per_cta, packed.meta.lanes_per_program) == (programs, lanes)
    assert packed.meta.cta_threads == 256
    if lanes < 32:
        assert f"lanes_per_program={lanes}" in packed.meta.summary()
        assert all(o.attrs.mask < lanes for o in packed.walk() if o.op is SimtOp.SHUFFLE_XOR)
        assert all(o.attrs.threads == 32 for o in packed.walk() if o.op is SimtOp.BARRIER and o.operands)
    same_rows(one, packed, inputs, dtype, 3 * programs - 1, block, block + lanes)
    simt.verify(packed)
    ptx = codegen.compile_ptx(packed, "sm_90a")
    assert ".maxntid 256" in ptx
    assemble_or_skip(ptx, "sm_90a")
    assert cuda.assemble_hinted(packed, "sm_90a")[0].spills == 0       # (the hint the backend keeps)


def test_a_kernel_that_shuffles_across_replica_lanes_keeps_whole_warps():
    """An atomic whose old values are used ORs them across the replica lanes (shuffle xor 16):
    its programs need the whole warp."""
    @tj.kernel
    def bump(x, y, BLOCK: tj.constexpr):
        r = tj.program_id(0)
        tj.store(y, (r, 0), tj.atomic_add(x, (r, 0), tj.full((1, BLOCK), 1, tj.int32)))
    tile = bump.tile_ir((ArraySpec(D.int32, 2, True, True, False),) * 2, {"BLOCK": 16})
    fn = compile_to_simt(tile, num_warps=1, pack=True)
    assert fn.meta.lanes_per_program == 32 and fn.meta.programs_per_cta == 8
    x = np.arange(5 * 16, dtype=np.int32).reshape(5, 16)
    y = np.zeros_like(x)
    emulate.run(fn, *backends.launch_geometry(8, (5, 1, 1), [x, y]))
    np.testing.assert_array_equal(y, np.arange(5 * 16).reshape(5, 16))
    np.testing.assert_array_equal(x, np.arange(5 * 16).reshape(5, 16) + 1)


def test_sub_warp_packing_refuses_a_program_that_places_data_on_more_lanes():
    tile = softmax_kernel.tile_ir((row_spec(D.float32),) * 2, {"BLOCK": 128})
    fn = compile_to_simt(tile, num_warps=1)
    with pytest.raises(ValueError, match="more than 16 lanes"):
        pack_programs(fn, 16, 16)


# --- coarsen_programs (a switch, off by default: measured below the uncoarsened kernels)
@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
@pytest.mark.parametrize("dtype, block, warps, k", [(D.bfloat16, 1024, 2, 2), (D.float32, 4096, 8, 3),
                                                    (D.float32, 512, 4, 4)])
def test_coarsened_programs_match_the_kernel_bit_for_bit(name, dtype, block, warps, k, monkeypatch):
    """k programs one after another per CTA, their loads first: the same rows bit for bit,
    ragged grids included (the copies past the grid store nothing), own shared buffers."""
    from tilejit.passes import coarsen_programs as coarsen
    kernel, specs, inputs = CASES[name]
    tile = kernel.tile_ir(specs(dtype), {"BLOCK": block})
    one = compile_to_simt(tile, num_warps=warps)
    monkeypatch.setattr(coarsen, "COARSEN", k)
    co = compile_to_simt(tile, num_warps=warps)
    assert (co.meta.programs_per_cta, co.meta.serial_programs, co.meta.cta_threads) == (k, True, 32 * warps)
    loads = [i for i, o in enumerate(co.body.ops) if o.op is SimtOp.LOAD_GLOBAL]
    first_write = min(i for i, o in enumerate(co.body.ops) if o.op in (SimtOp.STORE_GLOBAL, SimtOp.BARRIER,
                                                                          SimtOp.SHUFFLE_XOR))
    assert len(loads) >= k and max(loads) < first_write          # every copy's loads come first
    same_rows(one, co, inputs, dtype, 3 * k + 1, block, block + k)
    simt.verify(co)
    assert ".maxntid %d" % (32 * warps) in codegen.compile_ptx(co, "sm_90a")


def test_kernels_with_branches_are_not_coarsened(monkeypatch):
    from tilejit.passes import coarsen_programs as coarsen
    monkeypatch.setattr(coarsen, "COARSEN", 2)
    kernel, specs, _ = CASES["layernorm"]           # uniform_masks puts its edge test in an IF
    fn = compile_to_simt(kernel.tile_ir(specs(D.float32), {"BLOCK": 1024}), num_warps=2)
    assert any(o.op is SimtOp.IF for o in fn.walk()) and fn.meta.programs_per_cta == 1
