"""Occupancy hints: the CTAs per SM each kernel asks ptxas to fit (``pipeline.set_occupancy``),
the wishes for more that packed and long-row kernels make, the cuda backend's retries while a
hint spills (``backends.cuda.assemble_hinted``, ``codegen.ptxas.with_min_ctas``) and what
``inspect()`` reports."""
import sys

import numpy as np
import pytest

from tilejit import codegen
from tilejit import dtypes as D
from tilejit.backends import cuda
from tilejit.passes.pipeline import compile_to_simt
from tilejit.specs import ArraySpec

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_pack_programs import CASES  # noqa: E402  (the row kernels and their specs)
from tilejit.examples.matmul import matmul_kernel  # noqa: E402


def test_packed_kernels_wish_for_more_ctas_and_say_what_to_fall_back_to(monkeypatch):
    """A packed kernel asks ptxas for 2048, then 1536 threads per SM, then for the plain hint; an
    unpacked one keeps the plain hint and has nothing to fall back to."""
    from tilejit.passes import pipeline
    kernel, specs, _ = CASES["layernorm"]
    packed = compile_to_simt(kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 128}), 1, pack=True)
    threads = packed.meta.cta_threads
    assert packed.meta.programs_per_cta > 1
    assert (packed.meta.min_ctas_per_sm, packed.meta.min_ctas_fallbacks) == (2048 // threads, (1536 // threads, 0))
    one = compile_to_simt(kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 4096}), 4, pack=True)
    assert (one.meta.programs_per_cta, one.meta.min_ctas_per_sm, one.meta.min_ctas_fallbacks) == (1, 0, ())
    monkeypatch.setattr(pipeline, "PACKED_THREADS_PER_SM", ())
    plain = compile_to_simt(kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 128}), 1, pack=True)
    assert (plain.meta.min_ctas_per_sm, plain.meta.min_ctas_fallbacks) == (0, ())


@pytest.mark.parametrize("spilling, kept", [((8,), 6), ((8, 6), 0), ((), 8), ((8, 6, 0), 6), ("tie", 0)])
def test_the_backend_keeps_the_first_hint_that_does_not_spill(monkeypatch, spilling, kept):
    """The cuda backend assembles with each hint in turn while the last one spilled, and keeps the
    first without spills (where all spill: the one that spilled least, here hint 6)."""
    from tilejit.codegen import ptxas
    kernel, specs, _ = CASES["layernorm"]
    tried = []

    def fake_assemble(ptx, target, options=(), whole_program=False):
        hint = int(ptx.split(".minnctapersm")[1].split()[0]) if ".minnctapersm" in ptx else 0
        tried.append(hint)
        spills = 8 if spilling == "tie" else {8: 64, 6: 8, 0: 16}[hint] if hint in spilling else 0
        return ptxas.Assembled(b"cubin", 40, spills, 0, "")

    monkeypatch.setattr(ptxas, "available", lambda: True)
    monkeypatch.setattr(ptxas, "assemble", fake_assemble)
    state = cuda.build(kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 128}), 1, "sm_90a", pack=True)
    assert state["simt_fn"].meta.min_ctas_per_sm == kept
    assert (f".minnctapersm {kept}" in state["ptx"]) == bool(kept)
    assert (f'"nvvm.minctasm"="{kept}"' in state["llvm_ir"]) == bool(kept)        # remade to match
    if spilling == "tie":                   # all spill alike: the last, least aggressive hint
        assert state["spills"] == 8 and tried == [8, 6, 0]
        return
    assert state["spills"] == (0 if kept != 6 or spilling == (8,) else 8)
    assert tried == [8, 6, 0][:len(spilling) + 1 if len(spilling) < 3 else 3]


def test_without_nvjitlink_the_backend_keeps_the_plain_hint(monkeypatch):
    """The driver JIT reports no spills to judge the wish by: the PTX carries the plain hint."""
    from tilejit.codegen import ptxas
    kernel, specs, _ = CASES["layernorm"]
    monkeypatch.setattr(ptxas, "available", lambda: False)
    state = cuda.build(kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 128}), 1, "sm_90a", pack=True)
    assert state["simt_fn"].meta.min_ctas_per_sm == 0 and ".minnctapersm" not in state["ptx"]
    assert "cubin" not in state


def test_long_row_kernels_wish_too_but_not_clustered_or_persistent_ones(monkeypatch):
    """A 512-thread chunk-loop kernel (bf16 layernorm over 65536 columns) wishes for 4, then 3 CTAs
    per SM, falling back to occupancy_hint's 2; a clustered softmax keeps its own hint and wishes
    for nothing; with ROW_THREADS_PER_SM=() the plain hint stays."""
    from tilejit.passes import pipeline
    kernel, specs, _ = CASES["layernorm"]
    tile = kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 65536})
    fn = compile_to_simt(tile, 16)
    assert (fn.meta.cta_threads, fn.meta.cluster_ctas, fn.meta.persistent) == (512, 1, False)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (4, (3, 2))
    soft, soft_specs, _ = CASES["softmax"]
    clustered = compile_to_simt(soft.tile_ir(soft_specs(D.bfloat16), {"BLOCK": 65536}), 16)
    assert clustered.meta.cluster_ctas > 1 and clustered.meta.cta_threads == 512
    assert (clustered.meta.min_ctas_per_sm, clustered.meta.min_ctas_fallbacks) == (2, ())   # its THREADS_PER_SM
    monkeypatch.setattr(pipeline, "ROW_THREADS_PER_SM", ())
    fn = compile_to_simt(tile, 16)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (2, ())


def test_persistent_kernels_wish_only_when_asked(monkeypatch):
    """A persistent row kernel (bf16 RMSNorm over 4096 columns at 4 warps) keeps the plain hint
    by default; PERSIST_THREADS_PER_SM=(2048, 1536) makes it wish for 16, then 12 CTAs of 128
    threads."""
    from tilejit.passes import pipeline
    kernel, specs, _ = CASES["rmsnorm"]
    tile = kernel.tile_ir(specs(D.bfloat16), {"BLOCK": 4096})
    fn = compile_to_simt(tile, 4)
    assert fn.meta.persistent and (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (0, ())
    monkeypatch.setattr(pipeline, "PERSIST_THREADS_PER_SM", (2048, 1536))
    fn = compile_to_simt(tile, 4)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (16, (12, 0))


def test_a_hint_above_the_plain_one_falls_back_to_it(monkeypatch):
    """A clustered kernel whose own hint (cluster_rows.THREADS_PER_SM) asks for more than the
    plain one may fall back to the plain one where it spills."""
    from tilejit.passes import cluster_rows
    soft, soft_specs, _ = CASES["softmax"]
    monkeypatch.setattr(cluster_rows, "THREADS_PER_SM", 2048)
    fn = compile_to_simt(soft.tile_ir(soft_specs(D.bfloat16), {"BLOCK": 65536}), 16)
    assert (fn.meta.cluster_ctas, fn.meta.cta_threads) == (4, 512)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (4, (2,))


def test_the_wishes_are_bounded_and_never_repeat_the_plain_hint(monkeypatch):
    """A 1024-thread long row (fp32 RMSNorm, 32768 columns) wishes for 2 CTAs and falls back to
    the plain 1, not to 1 twice; a 128-thread kernel outside every rule (a bf16 softmax over 4096
    columns) wishes for nothing; a one-warp persistent kernel asks for at most 32 CTAs."""
    from tilejit.passes import pipeline
    rms, rms_specs, _ = CASES["rmsnorm"]
    fn = compile_to_simt(rms.tile_ir(rms_specs(D.float32), {"BLOCK": 32768}), 32)
    assert (fn.meta.cta_threads, fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (1024, 2, (1,))
    soft, soft_specs, _ = CASES["softmax"]
    fn = compile_to_simt(soft.tile_ir(soft_specs(D.bfloat16), {"BLOCK": 4096}), 4)
    assert (fn.meta.persistent, fn.meta.programs_per_cta) == (False, 1)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (0, ())
    monkeypatch.setattr(pipeline, "PERSIST_THREADS_PER_SM", (2048, 1536))
    fn = compile_to_simt(rms.tile_ir(rms_specs(D.bfloat16), {"BLOCK": 1024}), 1)
    assert (fn.meta.cta_threads, fn.meta.persistent) == (32, True)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (32, (0,))


def test_an_edited_hint_gives_the_ptx_llvm_would_write():
    """The backend retries a hint by editing the PTX's ``.minnctapersm`` line: for every pair of
    hints (0: none) the edit equals the PTX LLVM writes for the other hint."""
    from tilejit.codegen import ptxas
    kernel, specs, _ = CASES["layernorm"]
    fn = compile_to_simt(kernel.tile_ir(specs(D.float32), {"BLOCK": 8192}), 16)
    ptx = {}
    for hint in (4, 2, 0):
        fn.meta.min_ctas_per_sm = hint
        ptx[hint] = codegen.compile_ptx(fn, "sm_90a")
    assert ".minnctapersm 4" in ptx[4] and ".minnctapersm" not in ptx[0]
    for a in ptx:
        for b in ptx:
            assert ptxas.with_min_ctas(ptx[a], b) == ptx[b], (a, b)
    assert ptxas.with_min_ctas(ptx[4].replace(".maxntid", ".reqntid"), 2) is None       # no anchor


def test_inspect_shows_the_occupancy_hint_kept():
    """inspect() on the cuda backend (no device needed to compile) reports the hint in the PTX:
    a packed bf16 RMSNorm at 128 columns keeps its wish of 8 CTAs of 256 threads where nvJitLink
    can check it; the emulate backend has none to report."""
    from tilejit.codegen import ptxas
    from tilejit.examples.rmsnorm import rmsnorm_kernel as k
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    x = np.zeros((64, 128), D.bfloat16.np)
    w = np.zeros(128, x.dtype)
    specs, consts, _ = k.specialise(k.bind((x, w, x, 1e-6), {"BLOCK": 128}))
    got = k.inspect_specs(specs, consts, backend="cuda")
    assert got.programs_per_cta == 16 and got.min_ctas_per_sm in (8, 6, 0)    # (2048, 1536 threads, plain)
    written = got.ptx.split(".minnctapersm ")[1].split()[0] if ".minnctapersm" in got.ptx else "0"
    assert got.min_ctas_per_sm == int(written) and got.spills == 0
    assert k.inspect_specs(specs, consts, backend="emulate").min_ctas_per_sm is None


@pytest.mark.parametrize("dtype, block", [(D.bfloat16, 128), (D.float32, 128), (D.bfloat16, 32768)])
def test_the_1d_tutorial_spelling_makes_the_same_occupancy_wishes(dtype, block):
    """Triton's spelling of softmax (a 1-D row, scalar max and sum) is packed or chunked as the
    example is, at the same warps, and wishes for the same CTAs per SM."""
    from test_chunk_rows import softmax_1d
    from tilejit.passes.warps import choose_num_warps
    soft, soft_specs, _ = CASES["softmax"]
    metas = []
    for kernel in (soft, softmax_1d):
        tile = kernel.tile_ir(soft_specs(dtype), {"BLOCK": block})
        fn = compile_to_simt(tile, choose_num_warps(tile), pack=True)
        metas.append((fn.meta.cta_threads, fn.meta.programs_per_cta, fn.meta.min_ctas_per_sm,
                      fn.meta.min_ctas_fallbacks))
    assert metas[0] == metas[1] and metas[0][2] > 0, metas


def test_several_rows_per_program_wish_only_past_row_min_threads(monkeypatch):
    """Four bf16 rows of 128 columns per program run unpacked on 2 warps: below ROW_MIN_THREADS
    they keep the plain hint; at ROW_MIN_THREADS=32 they wish for as many threads per SM as the
    packed one-row spelling does (2048: 32 CTAs of 64 threads, capped; then 1536)."""
    from test_warps import softmax_rows
    from tilejit.passes import pipeline
    tile = softmax_rows.tile_ir(CASES["softmax"][1](D.bfloat16), {"R": 4, "BLOCK": 128})
    fn = compile_to_simt(tile, 2, pack=True)
    assert (fn.meta.cta_threads, fn.meta.programs_per_cta) == (64, 1)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (0, ())
    monkeypatch.setattr(pipeline, "ROW_MIN_THREADS", 32)
    fn = compile_to_simt(tile, 2, pack=True)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (32, (24, 0))


def test_gemms_make_no_wishes():
    """A 512-thread GEMM (tensor cores, registers for its accumulators) keeps the plain hint: none."""
    a = ArraySpec(D.bfloat16, 2, True, True, False)
    k = getattr(matmul_kernel, "kernel", matmul_kernel)
    fn = compile_to_simt(k.tile_ir((a, a, a), {"BM": 128, "BN": 256, "BK": 64, "STAGES": 3}), 16)
    assert fn.meta.cta_threads >= 512
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (0, ())


def test_decode_shaped_tensor_core_kernels_wish_for_more_ctas(monkeypatch):
    """A kernel whose every DOT has at most ``DECODE_DOT_ROWS`` rows (W4A16 at BM 16) asks for
    ``DECODE_DOT_THREADS_PER_SM`` threads per SM in turn (by default 640, 512 then 384: 5, 4 then 3
    CTAs of 128 threads), then for the plain hint; a GEMM of 64-row tiles never does; with the switch
    off (``()``) neither does."""
    from tilejit.passes import pipeline
    from tilejit.examples import w4a16_gemm
    bf16, u8 = (ArraySpec(dt, 2, True, True, False) for dt in (D.bfloat16, D.uint8))
    w4 = w4a16_gemm.w4a16_matmul_kernel
    consts = {"BM": 16, "BN": 64, "BK": 128, "GROUP": 128, "K_SLICE": 1024}
    k = getattr(matmul_kernel, "kernel", matmul_kernel)

    def hints(bm):
        decode = compile_to_simt(w4.tile_ir((bf16, u8, bf16, bf16, bf16, ArraySpec(D.float32, 3, True, True, False),
                                              ArraySpec(D.int32, 1, True, True, False)), dict(consts, BM=bm)), 4)
        return decode.meta.min_ctas_per_sm, decode.meta.min_ctas_fallbacks
    gemm = (k.tile_ir((bf16, bf16, bf16), {"BM": 64, "BN": 64, "BK": 64, "STAGES": 3}), 4)
    assert hints(16) == (5, (4, 3, 0))
    assert hints(64) == (0, ())
    monkeypatch.setattr(pipeline, "DECODE_DOT_THREADS_PER_SM", ())
    assert hints(16) == (0, ())
    monkeypatch.setattr(pipeline, "DECODE_DOT_THREADS_PER_SM", (512,))
    assert hints(16) == (4, (0,))
    assert hints(64) == (0, ())
    fn = compile_to_simt(*gemm)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (0, ())


def test_the_decode_wish_does_not_depend_on_the_spelling(monkeypatch):
    """A GEMV-like product spelled as a Triton user would (``@`` on a transposed weight tile, a
    plain ``range`` loop, 8 warps) is decode-shaped by its 16-row DOT too, and wishes alike."""
    import tilejit as tj
    from tilejit.passes import pipeline

    @tj.kernel
    def gemv(x, w, y, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
        n = tj.program_id(0) * BN
        acc = tj.zeros((BM, BN), tj.float32)
        for k in range(0, x.shape[1], BK):
            acc += tj.load(x, (0, k), (BM, BK)) @ tj.load(w, (n, k), (BN, BK)).T
        tj.store(y, (0, n), acc)
    bf16, f32 = ArraySpec(D.bfloat16, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    monkeypatch.setattr(pipeline, "DECODE_DOT_THREADS_PER_SM", (1024,))
    fn = compile_to_simt(gemv.tile_ir((bf16, bf16, f32), {"BM": 16, "BN": 64, "BK": 64}), 8)
    assert (fn.meta.min_ctas_per_sm, fn.meta.min_ctas_fallbacks) == (1024 // fn.meta.cta_threads, (0,))
    wide = compile_to_simt(gemv.tile_ir((bf16, bf16, f32), {"BM": 64, "BN": 64, "BK": 64}), 8)
    assert (wide.meta.min_ctas_per_sm, wide.meta.min_ctas_fallbacks) == (0, ())


def test_with_registers_edits_the_ptx_as_if_it_were_emitted_for_that_many_ctas():
    """``ptxas.with_registers``: the PTX of a warp-specialised kernel built for one CTA an SM,
    its ``.maxnreg`` and setmaxnreg pair set to ``ctas_per_sm(fn, 2)``'s, is the PTX emitted
    for two CTAs (what ``cuda.assemble_wished`` relies on to skip LLVM); a PTX without the
    three lines is not edited."""
    from tilejit.codegen import ptxas
    from tilejit.examples import attention
    from tilejit.passes.specialise_warps import ctas_per_sm
    from tilejit.specs import ScalarSpec
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr,) * 4 + (ScalarSpec(D.float32, True),),
                                              {"BM": 128, "BN": 64, "BD": 64, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    one = codegen.compile_ptx(fn, "sm_90a")
    ctas_per_sm(fn, 2)
    counts = cuda._register_counts(fn)
    two = codegen.compile_ptx(fn, "sm_90a")
    assert one != two and None not in counts
    assert ptxas.with_registers(one, *counts) == two
    assert ptxas.with_registers(one.replace("setmaxnreg.inc", "setmaxnreg.dec"), *counts) is None   # two .dec
    plain = codegen.compile_ptx(compile_to_simt(matmul_kernel.kernel.tile_ir(
        (ArraySpec(D.float32, 2, True, True, False),) * 3, {"BM": 32, "BN": 32, "BK": 32}), num_warps=4,
        target="sm_80"), "sm_80")
    assert ptxas.with_registers(plain, 80, 96, 40) is None
