"""The ``fuse_fma`` pass: IR text in -> out (a*b + c, c + a*b, a*b - c, c - a*b on float32;
products with another use, in another block, of integers or float64 (Dekker's exact products in
the float64 math library) left alone, and loops' accumulators; the switch),
values on the interpret and emulate backends against NumPy, and the attention softmax spelled
as Triton's tutorial spells it compiled with one FFMA a score (sm_90a, no GPU needed)."""
import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.passes import fuse_fma as fuse_module
from tilejit.passes.dce import dce
from tilejit.passes.fuse_fma import fuse_fma
from tilejit.verifier import verify


def run_pass(text: str) -> str:
    fn = ir.parse_function(text)
    fn = dce(fuse_fma(fn))
    verify(fn)
    return ir.print_function(fn)


LOADS = """  %50 = constant {value=0} : int32
  %0 = load %90, %50 {other=0.0} : tile<8xfloat32>
  %1 = load %91, %50 {other=0.0} : tile<8xfloat32>
  %2 = load %92, %50 {other=0.0} : tile<8xfloat32>
"""
SUMS = """func @k(%90: array<1xfloat32>, %91: array<1xfloat32>, %92: array<1xfloat32>) {
""" + LOADS + """  %3 = mul %0, %1 : tile<8xfloat32>
  %4 = add %3, %2 : tile<8xfloat32>
  %5 = mul %0, %2 : tile<8xfloat32>
  %6 = add %4, %5 : tile<8xfloat32>
  %7 = mul %1, %2 : tile<8xfloat32>
  %8 = sub %7, %6 : tile<8xfloat32>
  %9 = mul %0, %0 : tile<8xfloat32>
  %10 = sub %8, %9 : tile<8xfloat32>
  store %90, %50, %10
}"""


def test_each_form_of_a_sum_of_a_product_becomes_one_fma():
    out = run_pass(SUMS)
    assert "mul" not in out and "add" not in out and "sub" not in out, out
    assert out.count("fma") == 4 and out.count("neg") == 2, out
    assert out.splitlines()[5:11] == [
        "  %7 = fma %4, %5, %6 : tile<8xfloat32>",        # a*b + c
        "  %8 = fma %4, %6, %7 : tile<8xfloat32>",        # c + a*b
        "  %9 = neg %8 : tile<8xfloat32>",                # a*b - c: c negated
        "  %10 = fma %5, %6, %9 : tile<8xfloat32>",
        "  %11 = neg %4 : tile<8xfloat32>",               # c - a*b: a negated
        "  %12 = fma %11, %4, %10 : tile<8xfloat32>"], out


KEPT = """func @k(%90: array<1xfloat32>, %91: array<1xfloat32>, %92: array<1xfloat32>, %93: array<1xint32>) {
""" + LOADS + """  %3 = load %93, %50 {other=0} : tile<8xint32>
  %4 = mul %0, %1 : tile<8xfloat32>
  %5 = add %4, %1 : tile<8xfloat32>
  %6 = add %4, %0 : tile<8xfloat32>
  %7 = mul %3, %3 : tile<8xint32>
  %8 = add %7, %3 : tile<8xint32>
  %9 = mul %0, %0 : tile<8xfloat32>
  %10 = constant {value=0} : int32
  %11 = constant {value=1} : int32
  %19 = dim %90 {axis=0} : int32
  %12 = for %10, %19, %11, %5 {stages=1, unroll=False} : tile<8xfloat32> {
    ^(%13: int32, %14: tile<8xfloat32>):
    %20 = mul %14, %14 : tile<8xfloat32>
    %21 = add %14, %9 : tile<8xfloat32>
    %15 = add %20, %21 : tile<8xfloat32>
    yield %15
  }
  %16 = cast %8 : tile<8xfloat32>
  %17 = add %12, %6 : tile<8xfloat32>
  %18 = add %17, %16 : tile<8xfloat32>
  store %90, %50, %18
}"""


def test_shared_products_integers_products_outside_the_loop_and_accumulators_are_left_alone():
    """A product read twice (fusing would keep it and add nothing), an integer product, a
    loop-invariant product summed inside the loop (fusing would compute it every trip), and a
    loop's accumulator (``acc + x * x``: kept as tuned)."""
    out = run_pass(KEPT)
    assert "fma" not in out and out.count("mul") == 4, out


def test_float64_products_are_left_alone():
    assert "fma" not in run_pass(SUMS.replace("float32", "float64"))


def test_the_emulators_fma_overflows_to_a_signed_infinity():
    """An exact a*b + c past float64's range (the rational arithmetic's float() overflows)."""
    from tilejit.backends.interpret import _fma1, fma64
    assert _fma1(1e308, 10.0, 1.0) == np.inf and _fma1(-1e308, 10.0, 1.0) == -np.inf
    assert list(fma64(np.array([1e308, -1e308]), 10.0, 1.0)) == [np.inf, -np.inf]


def test_the_switch_keeps_products_and_sums_apart(monkeypatch):
    monkeypatch.setattr(fuse_module, "FUSE", False)
    assert run_pass(SUMS).count("mul") == 4


@tj.kernel
def axpby(x, y, z, out, a, BLOCK: tj.constexpr):
    i = tj.program_id(0) * BLOCK
    xv, yv, zv = tj.load(x, (i,), (BLOCK,)), tj.load(y, (i,), (BLOCK,)), tj.load(z, (i,), (BLOCK,))
    tj.store(out, (i,), xv * a + yv - zv * xv + (yv * zv - xv))


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_match_numpy(backend, dtype, monkeypatch):
    rng = np.random.default_rng(3)
    x, y, z = (rng.standard_normal(300).astype(dtype) for _ in range(3))
    out = np.full_like(x, np.nan)
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    axpby[(tj.cdiv(300, 128),)](x, y, z, out, 1.5, BLOCK=128)
    ref = x.astype(np.float64) * 1.5 + y - z.astype(np.float64) * x + (y.astype(np.float64) * z - x)
    np.testing.assert_allclose(out, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_the_tutorial_softmax_takes_one_ffma_a_score():
    """scripts/probes/attention_exp2.py's kernel (``exp2(s * qk_scale - m)``): the loop's PTX has
    as many fma as multiplications of the scores would have been, and no separate sub."""
    import runpy
    from tilejit.passes.pipeline import compile_to_simt
    probe = runpy.run_path("scripts/probes/attention_exp2.py", run_name="probe")
    kernel = probe["attention_exp2"]
    kernel = getattr(kernel, "kernel", kernel)
    q = np.zeros((1, 2, 512, 64), tj.bfloat16.np)
    specs, consts, _ = kernel.specialise(kernel.bind((q, q, q, q, 0.125), dict(BM=64, BN=64, BD=64, CAUSAL=False)))
    stages = {}
    compile_to_simt(kernel.tile_ir(specs, consts), 4, "sm_90a", dump=lambda name, text: stages.setdefault(name, text))
    loop = stages["fuse_fma"].split(" for ", 1)[1]
    assert "= fma " in loop and "= sub " not in loop.split("exp2")[0].rsplit("reduce", 1)[-1], loop


def _spellings_compiled(seq, dim, scale, tile, causal, warps) -> dict:
    """name -> the cuda artifact of the example's attention, the tutorial's exp2 spelling and the
    raw ``exp((s - m) * scale)`` (``scripts/probes/attention_exp2.py``), each at ``tile`` x
    ``tile``, ``warps`` warps, for sm_90a."""
    import runpy
    from tilejit.examples import attention
    probe = runpy.run_path("scripts/probes/attention_exp2.py", run_name="probe")
    q = np.zeros((1, 2, seq, dim), tj.bfloat16.np)
    out = {}
    for name, kernel in (("example", attention.attention_kernel), ("tutorial", probe["attention_exp2"]),
                         ("raw", probe["attention_raw"])):
        kernel = getattr(kernel, "kernel", kernel)
        specs, consts, _ = kernel.specialise(kernel.bind((q, q, q, q, scale),
                                                         dict(BM=tile, BN=tile, BD=dim, CAUSAL=causal)))
        out[name] = kernel.compile(specs, consts, warps, "cuda").artifact
    return out


@pytest.mark.parametrize("fold", [True, False])
def test_both_softmax_spellings_reach_one_schedule_and_neither_multiplies_a_score(fold, monkeypatch):
    """The example (``s = dot * scale``) and the tutorial spelling (``exp2(s * qk_scale - m)``)
    at D128 128x128, 8 warps on sm_90a (ptxas here where it exists): the same warp-specialised
    wgmma schedule with TMA copies, no spills and the loop rotated (``rotate_products``); the tutorial's PTX has no multiply a score
    (its scale rides in the FMA), nor, with a positive scale, has the example's (``fold_scale``;
    without it, about 64 a thread more) or the raw one's (``exp((s - m) * scale)``: ``fold_exp``
    takes the positive scale into its FMA; it took the accurate exp, three times the instructions)."""
    from tilejit.passes import fold_scale
    monkeypatch.setattr(fold_scale, "FOLD", fold)
    seen = {name: ((art.producer_warps, art.ptx.count("wgmma.mma_async"), art.ptx.count("cp.async.bulk.tensor"),
                    art.spills or 0, art.ptx.count("wgmma.wait_group.sync.aligned \t2")), art.ptx.count("mul.rn.f32"))
            for name, art in _spellings_compiled(4096, 128, 0.088, 128, False, 8).items()}
    assert seen["example"][0] == seen["tutorial"][0] and seen["example"][0][0] == 4 and seen["example"][0][3] == 0, seen
    assert seen["example"][0][4] >= 1, seen           # rotated (the next QK^T in flight past the softmax), each spelling
    assert seen["raw"][0] == seen["tutorial"][0] and abs(seen["raw"][1] - seen["tutorial"][1]) <= 8, seen
    if fold:
        assert abs(seen["tutorial"][1] - seen["example"][1]) <= 8, seen
    else:
        assert seen["tutorial"][1] <= seen["example"][1] - 60, seen


def test_the_three_softmax_spellings_match_at_64x64_tiles_and_4_warps():
    """The same at D64, 64 x 64 tiles, 4 warps (one warpgroup, causal): the example, the tutorial's
    exp2 and the raw ``exp((s - m) * scale)`` compile to one schedule with mul.rn.f32 counts
    within 8 of each other (``fold_scale`` and ``fold_exp`` reach every spelling)."""
    seen = {name: ((art.ptx.count("wgmma.mma_async"), art.spills or 0, art.ptx.count("ex2.approx")),
                   art.ptx.count("mul.rn.f32"))
            for name, art in _spellings_compiled(1024, 64, 0.125, 64, True, 4).items()}
    assert seen["example"][0] == seen["tutorial"][0] == seen["raw"][0] and seen["example"][0][1] == 0, seen
    assert seen["example"][0][2] > 0, seen
    counts = [seen[n][1] for n in seen]
    assert max(counts) - min(counts) <= 8, seen
