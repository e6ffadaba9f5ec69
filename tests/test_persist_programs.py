"""persist_programs: each CTA loops over the programs along grid axis 0 and copies the next
program's rows into shared memory (cp.async) while this one computes.  The persistent kernel
must give bit for bit what the plain one gives on the emulator (ragged rows, an odd number of
programs, every dtype), its staged loads must read only bytes whose copies have landed (the
emulator checks), the PTX must assemble, and the launch geometry must cap the CTAs."""
import os
import re

import numpy as np
import pytest

from tilejit import backends, codegen, ir, simt
from tilejit import dtypes as D
from tilejit.backends import emulate
from tilejit.examples.matmul import matmul_kernel
from tilejit.passes import persist_programs as persist
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec

from conftest import assemble_or_skip
from test_pack_programs import CASES, row_spec


BF16 = D.from_numpy(np.dtype(__import__("ml_dtypes").bfloat16))


def compiled(name, dt, block, warps, persist_on="always"):
    kernel, specs, _ = CASES[name]
    return compile_to_simt(kernel.tile_ir(specs(dt), {"BLOCK": block}), num_warps=warps, persist=persist_on)


def run(fn, inputs, out_shape, dtype, grid0, ctas=None):
    """``grid0`` programs of ``fn`` on the emulator; a persistent ``fn`` on ``ctas`` CTAs."""
    y = np.full(out_shape, np.nan, dtype)
    args = inputs + [y] + ([1e-5] if len(inputs) > 1 else [])
    if fn.meta.persistent:
        emulate.run(fn, *backends.launch_geometry(1, (grid0, 1, 1), args, ctas or -(-grid0 // 2)))
    else:
        emulate.run(fn, (grid0, 1, 1), args)
    return y


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
@pytest.mark.parametrize("dt,block,warps,rows,ctas", [
    (D.float32, 1024, 4, 7, 3), (BF16, 2048, 4, 5, 2), (D.float16, 4096, 8, 9, 4), (D.float32, 2048, 8, 3, 1),
    (BF16, 1024, 2, 6, 6)])
def test_persistent_rows_match_the_plain_kernel_bit_for_bit(name, dt, block, warps, rows, ctas):
    one, per = compiled(name, dt, block, warps, False), compiled(name, dt, block, warps)
    assert per.meta.persistent and not one.meta.persistent
    rng = np.random.default_rng(block + rows)
    x = rng.standard_normal((rows, block - 8)).astype(dt.np)        # ragged: the last groups read global memory
    w = rng.standard_normal(block - 8).astype(dt.np)
    inputs = CASES[name][2](x, w)
    want = run(one, inputs, x.shape, dt.np, rows)
    got = run(per, inputs, x.shape, dt.np, rows, ctas)
    assert not np.isnan(want.astype(np.float32)).any()
    np.testing.assert_array_equal(got.view(f"u{dt.itemsize}"), want.view(f"u{dt.itemsize}"))


def test_the_loop_copies_the_next_program_before_waiting_for_this_one():
    fn = compiled("layernorm", BF16, 4096, 8)
    loop = next(o for o in fn.body.ops if o.op is SimtOp.FOR)
    inner = loop.regions[0].ops
    body = [o.op for o in inner]
    head = [o.op for o in fn.body.ops]
    # prologue: x of the first program, weight and bias once per CTA; the loop: the next x
    assert head.count(SimtOp.CP_ASYNC) == 3 and body.count(SimtOp.CP_ASYNC) == 1
    assert head[-1] is SimtOp.CP_ASYNC_WAIT                                        # the drain
    assert body.index(SimtOp.CP_ASYNC_COMMIT) < body.index(SimtOp.CP_ASYNC_WAIT)
    assert next(o for o in inner if o.op is SimtOp.CP_ASYNC_WAIT).attrs.n == 1
    slot = {o.attrs.buffer for o in fn.walk() if o.op is SimtOp.CP_ASYNC}
    reads = [o for o in inner if o.op is SimtOp.LOAD_SHARED and o.attrs.buffer in slot]
    # nothing is read from global memory in the loop; x is read where it is used and again after
    # the mean's cross-warp exchange (not held in registers across it), w and b where used
    assert SimtOp.LOAD_GLOBAL not in body and len(slot) == 1 and len(reads) >= 4
    assert fn.meta.params[-1].kind.value == "scalar" and "persistent" in fn.meta.summary()
    x, w = np.ones((3, 4000), np.float16), np.ones(4000, np.float16)
    assert CASES["layernorm"][0].inspect(x, w, w, x, 1e-5, BLOCK=4096).persistent
    assert not CASES["softmax"][0].inspect(x, x, BLOCK=4096).persistent
    simt.verify(fn)
    assert simt.parse_function(ir.print_function(fn)) is not None


def test_a_missing_wait_is_caught_by_the_emulator():
    """Mutation: wait for no group at all before reading the slot (n=2 leaves this program's
    copies in flight): the emulator must refuse to read bytes that have not landed."""
    fn = compiled("softmax", D.float32, 1024, 4)
    loop = next(o for o in fn.body.ops if o.op is SimtOp.FOR)
    wait = next(o for o in loop.regions[0].ops if o.op is SimtOp.CP_ASYNC_WAIT)
    wait.attrs = simt.WaitAttrs(2)
    x = np.random.default_rng(0).standard_normal((4, 1024)).astype(np.float32)
    with pytest.raises(emulate.EmulatorError, match="has not landed"):
        run(fn, [x], x.shape, np.float32, 4)


def test_by_default_only_where_it_was_measured_faster():
    assert compiled("layernorm", BF16, 4096, 8, True).meta.persistent
    assert compiled("layernorm", D.float16, 1024, 2, True).meta.persistent
    assert compiled("layernorm", D.float32, 4096, 8, True).meta.persistent
    assert not compiled("softmax", BF16, 4096, 4, True).meta.persistent
    assert compiled("rmsnorm", BF16, 4096, 4, True).meta.persistent
    assert not compiled("rmsnorm", D.float32, 4096, 8, True).meta.persistent
    assert not compiled("layernorm", BF16, 4096, 8, False).meta.persistent


def test_kernels_with_loops_big_rows_or_nothing_to_stage_stay_as_they_are():
    spec = ArraySpec(D.float16, 2, True, True, False)
    mm = compile_to_simt(matmul_kernel.kernel.tile_ir((spec, spec, row_spec(D.float32)),
                                                      {"BM": 32, "BN": 32, "BK": 16, "STAGES": 3}), num_warps=4)
    assert not mm.meta.persistent
    assert not compiled("softmax", D.float32, 16384, 32).meta.persistent          # 2 x 64 KiB > the budget
    plain = compiled("softmax", D.float32, 1024, 4, False)
    assert persist.persist_programs(plain, budget=1024, always=True) is plain and not plain.meta.persistent


def test_launch_geometry_caps_the_ctas_and_passes_the_program_count():
    assert backends.launch_geometry(1, (1000, 1, 1), ["x"], 264) == ((264, 1, 1), ["x", 1000])
    assert backends.launch_geometry(1, (10, 1, 1), ["x"], 264) == ((10, 1, 1), ["x", 10])
    assert backends.launch_geometry(1, (1000, 4, 2), ["x"], 264) == ((33, 4, 2), ["x", 1000])
    assert backends.launch_geometry(1, (1000, 400, 1), ["x"], 264) == ((1, 400, 1), ["x", 1000])
    assert backends.launch_geometry(1, (0, 1, 1), ["x"], 264) == ((0, 1, 1), ["x", 0])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_persistent_kernel_assembles_with_copies_and_shared_reads(target):
    fn = compiled("rmsnorm", BF16, 8192, 16)
    ptx = codegen.compile_ptx(fn, target)
    assert "cp.async.cg.shared.global" in ptx and re.search(r"cp\.async\.wait_group\s+1;", ptx)
    assert "ld.shared.v4" in ptx
    assert assemble_or_skip(ptx, target).spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype,cols,rows", [("float32", 1000, 5000), ("bfloat16", 4000, 3001), ("float16", 8184, 700)])
def test_persistent_row_kernels_on_the_gpu(name, dtype, cols, rows):
    """More programs than resident CTAs (each CTA loops), ragged rows: the plain-NumPy reference."""
    import importlib
    import tilejit as tj
    module = importlib.import_module(f"tilejit.examples.{name}")
    rng = np.random.default_rng(cols)
    dt = np.dtype(getattr(__import__("ml_dtypes"), dtype)) if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.standard_normal((rows, cols)).astype(dt)
    w, b = rng.standard_normal(cols).astype(dt), rng.standard_normal(cols).astype(dt)
    inputs = CASES[name][2](x, w)
    if name == "layernorm":
        inputs = [x, w, b]
    y = np.full_like(x, np.nan)
    kernel = CASES[name][0]
    args = inputs + [y] + ([1e-5] if name != "softmax" else [])
    kernel[(rows,)](*args, BLOCK=tj.next_power_of_2(cols))
    always = os.environ.get("TILEJIT_PERSIST") == "always"      # scripts/persist_probe.sh runs both
    assert kernel.inspect(*args, BLOCK=tj.next_power_of_2(cols)).persistent == (
        always or name == "layernorm" or (name == "rmsnorm" and dt.itemsize == 2))
    ref = module.reference(*[a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args[:len(inputs)]],
                           *([1e-5] if name != "softmax" else []))
    tj.testing.assert_close(y.astype(np.float32), ref, rtol=2e-2 if dt.itemsize == 2 else 1e-5,
                            atol=2e-2 if dt.itemsize == 2 else 1e-5)


def test_tilejit_persist_switches_it_per_launch_and_is_part_of_the_cache_key(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path))
    kernel = CASES["layernorm"][0]
    x, w = np.ones((3, 4000), np.float16), np.ones(4000, np.float16)
    seen = {}
    for value in ("0", "1", "always"):
        monkeypatch.setenv("TILEJIT_PERSIST", value)
        seen[value] = kernel.inspect(x, w, w, x, 1e-5, BLOCK=4096).persistent
    assert seen == {"0": False, "1": True, "always": True}
    monkeypatch.setenv("TILEJIT_PERSIST", "always")
    assert CASES["softmax"][0].inspect(x, x, BLOCK=4096).persistent


def test_a_two_axis_grid_with_num_programs_and_int_rows_on_the_emulator():
    """Axis 1 stays one CTA per program (its weights are 'fixed' per CTA), axis 0 loops;
    num_programs(0) keeps its meaning; integer rows with a nonzero ``other``."""
    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    from tilejit.kernel import classify_argument

    def affine_rows(x, w, b, y, BLOCK: tj.constexpr):
        row, col = tj.program_id(0), tj.program_id(1) * BLOCK
        t = tj.load(x, (row, col), (1, BLOCK), other=-7)
        u = tj.load(w, (col,), (BLOCK,))[None, :] * t + tj.load(b, (col,), (BLOCK,))[None, :]
        tj.store(y, (row, col), u + tj.max(t, axis=1, keepdims=True) + tj.num_programs(0))

    rng = np.random.default_rng(5)
    x = rng.integers(-50, 50, (9, 252)).astype(np.int32)
    w, b = rng.integers(-3, 3, 252).astype(np.int32), rng.integers(-9, 9, 252).astype(np.int32)
    args = [x, w, b, np.zeros_like(x)]
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    fn = compile_to_simt(compile_tile_ir(affine_rows, specs, {"BLOCK": 128}), 4, persist="always")
    assert fn.meta.persistent
    emulate.run(fn, *backends.launch_geometry(1, (9, 2, 1), args, 4 * 2))
    pad = np.concatenate([x, np.full((9, 4), -7, np.int32)], axis=1)
    expect = w * x + b + np.concatenate([np.repeat(pad[:, :128].max(1, keepdims=True), 128, 1),
                                         np.repeat(pad[:, 128:].max(1, keepdims=True), 124, 1)], axis=1) + 9
    np.testing.assert_array_equal(args[3], expect)


@pytest.mark.parametrize("warps", [1, 4])
def test_a_failed_assert_in_a_persistent_kernel_names_its_own_program(warps, monkeypatch):
    """The loop's program id reaches tj.device_assert: program 5 of 7 (CTAs loop twice or more)."""
    import tilejit as tj
    from test_device_assert import checked_copy
    monkeypatch.setenv("TILEJIT_BACKEND", "emulate")
    monkeypatch.setenv("TILEJIT_PERSIST", "always")
    monkeypatch.setenv("TILEJIT_PACK", "0")                # a tiny program would be packed instead
    x = np.ones((14, 4), np.float32)
    x[11, 3] = -1                    # program 5 (rows 10, 11), element (1, 3)
    monkeypatch.setenv("TILEJIT_DEBUG", "1")              # asserts compiled in for inspect() too
    assert checked_copy.inspect(x, x, B=2, num_warps=warps).persistent
    with pytest.raises(tj.DeviceAssertError, match=r"program \(5, 0, 0\), element \(1, 3\)"):
        checked_copy[(7,)](x, np.zeros_like(x), B=2, num_warps=warps, debug=True)
    x[11, 3] = 1
    y = np.zeros_like(x)
    checked_copy[(7,)](x, y, B=2, num_warps=warps, debug=True)
    np.testing.assert_array_equal(y, 2 * x)


def test_programs_past_the_grid_store_nothing():
    """Rows past grid0 exist in the array but belong to no program: the loop's spare iterations
    (a CTA whose next program is past the grid) must not write them."""
    fn = compiled("rmsnorm", BF16, 1024, 2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((11, 1016)).astype(BF16.np)
    w = rng.standard_normal(1016).astype(BF16.np)
    y = np.full(x.shape, np.nan, BF16.np)
    emulate.run(fn, *backends.launch_geometry(1, (7, 1, 1), [x, w, y, 1e-5], 3))     # 3 CTAs, 7 programs
    assert not np.isnan(y[:7].astype(np.float32)).any() and np.isnan(y[7:].astype(np.float32)).all()


@pytest.mark.parametrize("dtype,other", [(np.float32, 5.0), (np.float32, 0.0), (np.int16, -3), (np.uint8, 0)])
def test_a_partial_group_at_the_end_of_a_1d_array(dtype, other):
    """A 1-D array whose length is no multiple of 16 bytes: its last 16-byte group is partly in
    bounds, so the copy must read only that prefix and the body see ``other`` past it."""
    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    from tilejit.kernel import classify_argument

    def shifted(x, y, BLOCK: tj.constexpr, OTHER: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        t = tj.load(x, (i,), (BLOCK,), other=OTHER)
        tj.store(y, (i,), t + tj.sum(t.to(tj.float32)).to(t.dtype))

    n = 1003
    x = np.arange(n).astype(dtype) % 7
    x_big = np.concatenate([x, np.full(64, 99, dtype)])      # bytes after the end that must not be read
    args = [x_big[:n], np.zeros(n, dtype)]
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    tile = compile_tile_ir(shifted, specs, {"BLOCK": 256, "OTHER": other})
    want = np.zeros(n, dtype)
    emulate.run(compile_to_simt(tile, 2, persist=False), (4, 1, 1), [args[0], want])
    fn = compile_to_simt(tile, 2, persist="always")
    assert fn.meta.persistent
    emulate.run(fn, *backends.launch_geometry(1, (4, 1, 1), args, 3))
    np.testing.assert_array_equal(args[1], want)


def test_the_budget_counts_the_fixed_copies_and_short_groups_are_not_staged():
    plain = compiled("layernorm", D.float32, 1024, 2, False)
    loads, fixed = persist.stageable_loads(plain), persist.stageable_loads(plain, of_program=False)
    assert len(loads) == 1 and len(fixed) == 2
    threads = plain.meta.cta_threads
    slot = 1024 * 4                                            # one row of x, all threads together
    assert sum(o.result.type.n * 4 for o in loads) * threads == slot
    # the ring (2 slots) fits, the weight and bias (2 more rows) do not: nothing changes
    assert not persist.persist_programs(plain, budget=2 * slot + slot, always=True).meta.persistent
    assert persist.persist_programs(compiled("layernorm", D.float32, 1024, 2, False),
                                    budget=4 * slot, always=True).meta.persistent
    # rows not 16-byte aligned: no 16-byte groups to copy, the kernel stays as it is
    spec = ArraySpec(D.float32, 2, True, False, False)
    tile = CASES["softmax"][0].tile_ir((spec, spec), {"BLOCK": 1024})
    short = compile_to_simt(tile, num_warps=4, persist=False)
    assert {o.attrs.vec for o in short.walk() if o.op is SimtOp.LOAD_GLOBAL} == {1}
    assert persist.stageable_loads(short) == [] and not compile_to_simt(tile, 4, persist="always").meta.persistent


def test_a_negative_zero_other_is_not_the_copies_zero_fill():
    """``other=-0.0`` must read back as -0.0 past the end (1 / -0.0 is -inf), not as the +0.0
    that a copy zero-fills."""
    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    from tilejit.kernel import classify_argument

    def reciprocal_max(x, y, BLOCK: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        t = tj.load(x, (i,), (BLOCK,), other=-0.0)
        tj.store(y, (i,), t + tj.max(1.0 / t))

    x = np.linspace(-3, -1, 1001).astype(np.float32)
    args = [x, np.zeros_like(x)]
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    fn = compile_to_simt(compile_tile_ir(reciprocal_max, specs, {"BLOCK": 256}), 2, persist="always")
    assert fn.meta.persistent
    with np.errstate(divide="ignore"):
        emulate.run(fn, *backends.launch_geometry(1, (4, 1, 1), args, 2))
    assert np.isfinite(args[1]).all()


def test_a_layernorm_spelled_with_several_rows_per_program_takes_the_same_path():
    """Triton users write two rows per program and load the weights last: the same loop, the
    same result bit for bit."""
    import tilejit as tj
    from tilejit.frontend import compile_tile_ir
    from tilejit.kernel import classify_argument

    def layernorm_rows(x, w, b, y, eps, ROWS: tj.constexpr, BLOCK: tj.constexpr):
        r0 = tj.program_id(0) * ROWS
        n = x.shape[1]
        t = tj.load(x, (r0, 0), (ROWS, BLOCK)).to(tj.float32)
        mean = tj.sum(t, axis=1, keepdims=True) / n
        c = tj.where(tj.arange(0, BLOCK)[None, :] < n, t - mean, 0.0)
        rstd = tj.rsqrt(tj.sum(c * c, axis=1, keepdims=True) / n + eps)
        out = c * rstd * tj.load(w, (0,), (BLOCK,)).to(tj.float32)[None, :] + tj.load(b, (0,), (BLOCK,)).to(tj.float32)
        tj.store(y, (r0, 0), out.to(y.dtype))

    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 1016)).astype(BF16.np)
    w, b = rng.standard_normal(1016).astype(BF16.np), rng.standard_normal(1016).astype(BF16.np)
    args = [x, w, b, np.zeros_like(x), 1e-5]
    specs = [classify_argument(f"a{i}", a)[0] for i, a in enumerate(args)]
    tile = compile_tile_ir(layernorm_rows, specs, {"ROWS": 2, "BLOCK": 1024})
    plain, per = compile_to_simt(tile, 4, persist=False), compile_to_simt(tile, 4)
    assert per.meta.persistent and len(persist.stageable_loads(plain, of_program=False)) == 2
    want = np.zeros_like(x)
    emulate.run(plain, (4, 1, 1), [x, w, b, want, 1e-5])
    emulate.run(per, *backends.launch_geometry(1, (4, 1, 1), args, 3))
    np.testing.assert_array_equal(args[3].view(np.uint16), want.view(np.uint16))


def test_a_read_back_with_a_nonzero_other_is_one_masked_shared_load():
    """softmax's ``other=-inf``: the read-back is a masked LOAD_SHARED (no WHERE per element),
    which the PTX turns into one branch per read that skips the selects when the thread's groups
    are all in bounds."""
    fn = compiled("softmax", BF16, 4096, 4)
    masked = [o for o in fn.walk() if o.op is SimtOp.LOAD_SHARED and len(o.operands) == 2]
    assert masked and all(o.attrs.other == float("-inf") and o.attrs.vec == 8 for o in masked)
    assert not any(o.op is SimtOp.ELEMENTWISE and o.attrs.op is ir.TileOp.WHERE
                   and o.result.type.dtype == BF16 for o in fn.walk())
    ptx = codegen.compile_ptx(fn, "sm_90a")
    body = ptx[re.search(r"cp\.async\.wait_group\s+1;", ptx).end():]
    first = body[:body.index("max.NaN.f32")]       # up to the first use of the row
    assert re.search(r"ld\.shared\.v4\.b32.*\n(.*\n){0,12}?\s*@%p\d+ bra", first), first[-1500:]
    assert "selp" not in first[first.rindex("ld.shared.v4"):first.index(" bra")]
    assert assemble_or_skip(ptx, "sm_90a").spills == 0


def test_a_masked_shared_load_reads_other_where_its_mask_is_false():
    text = """func @f() {
  %0 = constant {values=(0, 4, 8, 12)} : <4xint32>
  %1 = constant {values=(True, False, True, False)} : <4xbool>
  %2 = load_shared %0, %1 {vec=4, buffer=0, other=-inf} : <4xfloat32>
}"""
    fn = simt.parse_function(text)
    load = fn.body.ops[-1]
    assert isinstance(load.attrs, simt.MaskedSharedAttrs) and load.attrs.other == float("-inf")
    assert ir.print_function(fn).strip() == text
    simt.verify(fn)
    bad = simt.parse_function(text.replace("{vec=4, buffer=0, other=-inf}", "{vec=4, buffer=0}"))
    with pytest.raises(simt.SimtVerifyError, match="masked LOAD_SHARED"):
        simt.verify(bad)
