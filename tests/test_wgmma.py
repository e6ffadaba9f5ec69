"""Hopper wgmma GEMM path (``passes/wgmma.py``): which DOTs take it, the SIMT structure of the
pipelined loop, the N-major B atom layout, PTX that assembles without ptxas serialising the
wgmmas, and float64 NumPy equivalence on ragged shapes with every A swizzle span (K = 16, 32,
64 bf16/fp16 per row) on the emulator and, under ``-m gpu``, on the H200."""
import os
import re

import ml_dtypes
import numpy as np
import pytest

from tilejit import dtypes as D
from tilejit.codegen import ptxas
from tilejit.codegen.llvm import compile_ptx
from tilejit.examples import matmul
from tilejit.examples.attention import attention_kernel
from tilejit.examples.matmul import matmul_kernel
from tilejit.passes import wgmma
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.specs import ArraySpec, ScalarSpec

KERNEL = matmul.matmul_kernel.kernel
ONLY = os.environ.get("TILEJIT_TEST_BACKEND")
BACKENDS = [b for b in ("emulate", pytest.param("cuda", marks=pytest.mark.gpu))
            if ONLY is None or getattr(b, "values", (b,))[0] == ONLY]


def simt_fn(BM=64, BN=64, BK=32, stages=2, warps=4, dtype=D.bfloat16, target="sm_90a", wgmma=True, tma=True):
    spec = ArraySpec(dtype, 2, True, True, False)
    out = ArraySpec(D.float32, 2, True, True, False)
    tile = KERNEL.tile_ir((spec, spec, out), {"BM": BM, "BN": BN, "BK": BK, "STAGES": stages})
    return compile_to_simt(tile, num_warps=warps, target=target, wgmma=wgmma, tma=tma)


def ops(fn, kind):
    return [o for o in fn.walk() if o.op is kind]


def test_pipelined_gemm_takes_wgmma_with_one_fence_per_iteration():
    fn = simt_fn(BK=64, tma=False)
    mmas = ops(fn, SimtOp.WGMMA)
    assert len(mmas) == 64 // 16 and {o.attrs.n for o in mmas} == {64}
    assert mmas[0].attrs.a_row_bytes == 128 and mmas[0].attrs.b_atom_bytes == 64 * 128
    assert len(ops(fn, SimtOp.WGMMA_COMMIT)) == len(ops(fn, SimtOp.WGMMA_WAIT)) == 1
    assert len(ops(fn, SimtOp.FENCE_PROXY_ASYNC)) == 1             # before the ring's barrier
    assert not ops(fn, SimtOp.MMA)              # one loop: no mma.sync twin for unaligned rows


def test_three_slot_ring_keeps_one_group_in_flight():
    fn = simt_fn(BK=64, stages=3, tma=False)
    waits = [o.attrs.n for o in ops(fn, SimtOp.WGMMA_WAIT)]
    assert waits == [1, 0]                      # per iteration, then once after the loop
    loop = next(o for o in fn.walk() if o.op is SimtOp.FOR and any(
        x.op is SimtOp.WGMMA for x in o.regions[0].walk()))
    body = list(loop.regions[0].walk())
    waits = [o.attrs.n for o in body if o.op is SimtOp.CP_ASYNC_WAIT]
    assert waits == [0]                         # copies run one slot ahead: stages - 2
    assert sum(o.op is SimtOp.CP_ASYNC_COMMIT for o in fn.walk() if o not in body) >= 1


@pytest.mark.parametrize("why, kwargs", [
    ("not sm_90a", {"target": "sm_80"}),
    ("M is not one warpgroup slice per 4 warps", {"BM": 32, "BN": 128}),   # (BN 64: swapped, below)
    ("N is not a whole 64-column atom", {"BN": 32}),
    ("no pipelining", {"stages": 1}),
    ("float32 without tf32", {"dtype": D.float32}),
])
def test_other_dots_keep_mma_sync(why, kwargs):
    assert not ops(simt_fn(**kwargs), SimtOp.WGMMA), why


def test_a_small_m_dot_is_computed_transposed_on_wgmma():
    """BM 32 with BN 64 (one 64-row slice per warpgroup) is swapped (``swap_small_dots``): wgmma
    with the B tile as its M-major A, and mma.sync when ``TRANSPOSED_A`` is off."""
    assert ops(simt_fn(BM=32), SimtOp.WGMMA)
    saved, wgmma.TRANSPOSED_A = wgmma.TRANSPOSED_A, False
    try:
        assert not ops(simt_fn(BM=32), SimtOp.WGMMA)
    finally:
        wgmma.TRANSPOSED_A = saved


def test_the_option_turns_it_off():
    assert ops(simt_fn(), SimtOp.WGMMA)
    assert not ops(simt_fn(wgmma=False), SimtOp.WGMMA)


def test_the_env_switch_is_read_at_the_api_edge_and_keys_both_caches(monkeypatch):
    """``TILEJIT_WGMMA=0`` reaches ``Options.wgmma`` through ``compile_switches`` (no pass reads
    the environment), and the in-process and on-disk keys change with it."""
    from tilejit import backends
    from tilejit.kernel import compile_switches
    seen = []

    class Spy:
        target = "sm_90a"

        def cache_key(self, pyfn, specs, consts, num_warps, switches):
            seen.append(("key", dict(switches)))
            return None

        def compile(self, tile_fn, options):
            seen.append(("compile", options["wgmma"]))
            return object()

    monkeypatch.setitem(backends._registry, "spy", Spy())
    spec = ArraySpec(D.bfloat16, 2, True, True, False)
    out = ArraySpec(D.float32, 2, True, True, False)
    consts = {"BM": 64, "BN": 64, "BK": 32, "STAGES": 2}
    monkeypatch.delenv("TILEJIT_PACK", raising=False)
    monkeypatch.delenv("TILEJIT_PERSIST", raising=False)
    monkeypatch.delenv("TILEJIT_TMA", raising=False)
    monkeypatch.delenv("TILEJIT_WS", raising=False)
    monkeypatch.delenv("TILEJIT_CLUSTER", raising=False)
    monkeypatch.delenv("TILEJIT_TMA_STORE", raising=False)
    on = {"wgmma": True, "tma": True, "warp_specialize": "auto", "pack": True, "cluster": True, "persist": True,
          "tma_store": "auto"}
    assert compile_switches() == tuple(on.items())
    KERNEL.compile((spec, spec, out), consts, 4, "spy")
    monkeypatch.setenv("TILEJIT_WGMMA", "0")
    assert compile_switches() == tuple({**on, "wgmma": False}.items())
    KERNEL.compile((spec, spec, out), consts, 4, "spy")          # not the first compile's entry
    KERNEL.compile((spec, spec, out), consts, 4, "spy")          # the second's, from memory
    monkeypatch.setenv("TILEJIT_TMA", "0")
    KERNEL.compile((spec, spec, out), consts, 4, "spy")          # TMA off: another entry
    assert seen == [("key", on), ("compile", True),
                    ("key", {**on, "wgmma": False}), ("compile", False),
                    ("key", {**on, "wgmma": False, "tma": False}), ("compile", False)]


def test_b_atoms_are_128_byte_swizzled_rows_of_64_columns():
    k, n = 32, 256
    rows, cols = np.meshgrid(np.arange(k), np.arange(0, 2 * n, 16), indexing="ij")
    off = wgmma.atom_table(rows, cols, k)
    assert sorted(off.ravel()) == list(range(0, k * n * 2, 16))   # a permutation of the chunks
    assert (off[:, :8] < k * 128).all() and (off[:, 8:16] >= k * 128).all()   # atom 1 follows atom 0
    assert (off[3, :8] // 16 % 8 == np.arange(8) ^ 3).all()       # chunk XOR row


def test_ptx_assembles_without_serialised_wgmma():
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    fn = simt_fn(BM=128, BN=256, BK=64, stages=3, warps=8)
    ptx = compile_ptx(fn, "sm_90a")
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4
    for line in (x for x in ptx.splitlines() if "wgmma.mma_async" in x):
        a_desc, b_desc = re.search(r"\}, (%rd\d+), (%rd\d+), p, 1, 1, 0, [01];", line).groups()
        assert a_desc != b_desc, line             # A's and B's descriptors are two operands
    out = ptxas.assemble(ptx, "sm_90a")
    assert out.spills == 0 and "serialized" not in out.log, out.log


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_BACKEND", request.param)
        yield request.param


CASES = [   # K and N multiples of 8 elements: rows 16-byte aligned, so every case takes wgmma
    (64, 64, 64, 64, 64, 32, 2, 4, np.float16),
    (100, 128, 88, 64, 128, 64, 3, 4, ml_dtypes.bfloat16),    # two B atoms, ragged M and K, in flight
    (64, 64, 24, 64, 64, 16, 4, 4, np.float16),               # SW32 rows, in flight
    (64, 64, 40, 64, 64, 32, 5, 4, np.float16),               # trip count below the ring depth
    (130, 256, 200, 128, 256, 64, 3, 8, ml_dtypes.bfloat16),  # two warpgroups, four B atoms
    (60, 64, 8, 64, 64, 32, 3, 4, np.float16),                # K shorter than BK
]


@pytest.mark.parametrize("engine", ["tma", "cp.async", "ws"])
@pytest.mark.parametrize("m, n, k, BM, BN, BK, stages, warps, dt", CASES)
def test_wgmma_gemm_matches_float64(backend, m, n, k, BM, BN, BK, stages, warps, dt, engine, monkeypatch):
    """On each way of filling the rings: TMA, cp.async, TMA from a producer warpgroup."""
    dtype = D.bfloat16 if dt is ml_dtypes.bfloat16 else D.float16
    tma = engine != "cp.async"
    fn = simt_fn(BM, BN, BK, stages, warps, dtype, tma=tma)
    assert ops(fn, SimtOp.WGMMA) and bool(ops(fn, SimtOp.TMA_LOAD)) == tma       # the path under test
    monkeypatch.setenv("TILEJIT_TMA", "1" if tma else "0")
    monkeypatch.setenv("TILEJIT_WS", "1" if engine == "ws" else "0")
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    out = matmul.run(a, b, BM=BM, BN=BN, BK=BK, STAGES=stages, num_warps=warps)
    ref = matmul.reference(a, b)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert (np.abs(out - ref) <= 1e-6 + k * 2**-22 * scale).all(), np.abs(out - ref).max()


def test_unaligned_rows_keep_mma_sync_and_their_warp_split():
    spec = ArraySpec(D.bfloat16, 2, True, False, False)          # rows not 16-byte aligned
    out = ArraySpec(D.float32, 2, True, True, False)
    tile = KERNEL.tile_ir((spec, spec, out), {"BM": 64, "BN": 64, "BK": 32, "STAGES": 3})
    fn = compile_to_simt(tile, num_warps=4, target="sm_90a")
    assert not ops(fn, SimtOp.WGMMA) and ops(fn, SimtOp.MMA)


def test_emulator_catches_a_ring_slot_reused_under_an_in_flight_wgmma(monkeypatch):
    """Leave each group in flight (wait_group 1) with copies still running stages-1 ahead: the
    next iteration's copy lands in the slot the previous group reads."""
    from tilejit.backends import emulate
    real = wgmma.lower_wgmma

    def leave_in_flight(lw, *args):
        monkeypatch.setattr(lw, "in_flight_after", lambda dot: 1)
        return real(lw, *args)
    monkeypatch.setattr(wgmma, "lower_wgmma", leave_in_flight)
    fn = simt_fn(BK=32, stages=2, dtype=D.float16, tma=False)
    a = np.ones((64, 128), np.float16)
    c = np.zeros((64, 64), np.float32)
    with pytest.raises(emulate.EmulatorError, match="in-flight WGMMA"):
        emulate.run(fn, (1, 1), [a, np.ones((128, 64), np.float16), c])


def test_barrier_inserter_fences_thread_stores_before_a_wgmma_reads_them():
    from tilejit import ir, simt
    from tilejit.passes.shared_memory import insert_barriers

    def value(n=1, dt=D.int32):
        return ir.Value(simt.RegType(dt, n))
    attrs = simt.WgmmaAttrs("bf16", 8, 128, True, 128, 2048, (0, 1))
    ops = [ir.Operation(SimtOp.STORE_SHARED, [value(), value()], [], simt.SharedAttrs(1, 0)),
           ir.Operation(SimtOp.WGMMA, [value(4, D.float32), value(), value()], [simt.RegType(D.float32, 4)], attrs)]
    fn = ir.Function("k", ir.Block([], ops), [], simt.SimtMeta("k", [], 4, shared_buffers={0: (0, 1024), 1: (1024, 2048)}))
    assert [o.op for o in insert_barriers(fn).body.ops] == [
        SimtOp.STORE_SHARED, SimtOp.FENCE_PROXY_ASYNC, SimtOp.BARRIER, SimtOp.WGMMA]


def test_a_thread_store_the_wgmma_reads_is_fenced_before_an_earlier_barrier():
    """A barrier placed for another reason (the mbarriers' initialisation) already separates the
    store from the wgmma: the proxy fence goes right after the store, before that barrier (on
    the H200 the warp-specialised BM 64 / BN 128 attention read a stale q tile without it)."""
    from tilejit import ir, simt
    from tilejit.passes.shared_memory import insert_barriers

    def value(n=1, dt=D.int32):
        return ir.Value(simt.RegType(dt, n))
    attrs = simt.WgmmaAttrs("bf16", 8, 128, True, 128, 2048, (0, 1))
    ops = [ir.Operation(SimtOp.STORE_SHARED, [value(), value()], [], simt.SharedAttrs(1, 0)),
           ir.Operation(SimtOp.STORE_SHARED, [value(), value()], [], simt.SharedAttrs(1, 2)),
           ir.Operation(SimtOp.BARRIER, [], []),
           ir.Operation(SimtOp.WGMMA, [value(4, D.float32), value(), value()], [simt.RegType(D.float32, 4)], attrs),
           ir.Operation(SimtOp.STORE_SHARED, [value(), value()], [], simt.SharedAttrs(1, 2))]
    buffers = {0: (0, 1024), 1: (1024, 1024), 2: (2048, 1024)}     # (offset, bytes); threads alone read 2
    fn = ir.Function("k", ir.Block([], ops), [], simt.SimtMeta("k", [], 4, shared_buffers=buffers))
    got = [o.op for o in insert_barriers(fn).body.ops]
    assert got == [SimtOp.STORE_SHARED, SimtOp.STORE_SHARED, SimtOp.FENCE_PROXY_ASYNC, SimtOp.BARRIER,
                   SimtOp.WGMMA, SimtOp.STORE_SHARED]                # buffer 2's stores need no fence


def test_emulator_catches_a_wgmma_reading_a_store_without_its_proxy_fence(monkeypatch):
    """The warp-specialised attention stages q with thread stores, then a barrier (the
    mbarriers'), then the loop's wgmma reads it: without the fence the emulator stops."""
    from tilejit.backends import emulate
    from tilejit.passes import shared_memory
    from tilejit.examples import attention
    q = np.random.default_rng(0).standard_normal((1, 1, 100, 64)).astype(np.float16)

    def simt():
        tile = attention.attention_kernel.tile_ir((ArraySpec(D.float16, 4, True, True, False),) * 4
                                                  + (ScalarSpec(D.float32),),
                                                  {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": False})
        return compile_to_simt(tile, num_warps=4)
    fn = simt()
    assert fn.meta.producer_warps and ops(fn, SimtOp.FENCE_PROXY_ASYNC)
    emulate.run(fn, (2, 1), [q, q, q, np.zeros_like(q), np.float32(0.125)])

    real = shared_memory.BarrierInserter.__init__

    def forgets_the_fence(self, fn):
        real(self, fn)
        self.fenced_stores = set()
    monkeypatch.setattr(shared_memory.BarrierInserter, "__init__", forgets_the_fence)
    fn = simt()
    with pytest.raises(emulate.EmulatorError, match="without a FENCE_PROXY_ASYNC"):
        emulate.run(fn, (2, 1), [q, q, q, np.zeros_like(q), np.float32(0.125)])


def test_emulator_catches_a_wgmma_reading_bytes_stored_without_a_barrier():
    from tilejit.backends import emulate
    from tilejit.examples import attention
    from tilejit.specs import ScalarSpec
    arr = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention.attention_kernel.tile_ir((arr, arr, arr, arr, ScalarSpec(D.float32)),
                                              {"BM": 64, "BN": 64, "BD": 128, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=4)
    for o in fn.walk():                       # every barrier gone: q's staging races the wgmma
        for region in o.regions:
            region.ops[:] = [x for x in region.ops if x.op is not SimtOp.BARRIER]
    fn.body.ops[:] = [x for x in fn.body.ops if x.op is not SimtOp.BARRIER]
    q = np.ones((1, 1, 64, 128), ml_dtypes.bfloat16)
    with pytest.raises(emulate.EmulatorError, match="race"):
        emulate.run(fn, (1, 1), [q, q, q, np.zeros_like(q), np.float32(0.1)])


def test_every_shared_tile_wgmma_reads_is_allocated_on_a_1024_byte_boundary():
    """The SW128 swizzle is a function of absolute shared addresses (bits 4-6 XOR bits 7-9), so
    the tiles wgmma reads must start on 1024-byte boundaries whatever buffers come before them:
    every SHARED_ALLOC a WGMMA reads asks for that alignment (mma.sync tiles ask for 128)."""
    from tilejit.passes import pipeline
    for kernel, args, consts, warps in (
            (matmul_kernel, (np.zeros((256, 256), ml_dtypes.bfloat16),) * 2 + (np.zeros((256, 256), np.float32),),
             {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, 8),
            (attention_kernel, (np.zeros((1, 2, 256, 64), ml_dtypes.bfloat16),) * 4 + (0.1,),
             {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": False}, 4)):
        kernel = getattr(kernel, "kernel", kernel)
        specs, consts_, _ = kernel.specialise(kernel.bind(args, consts))
        fn = pipeline.clone_function(kernel.tile_ir(specs, consts_))
        opts = pipeline.Options(warps, "sm_90a")
        for stage in pipeline.PIPELINE:
            fn = stage.run(fn, opts)
            if stage.name == "lower_to_simt":
                break
        align = {o.attrs.buffer: o.attrs.align for o in fn.walk() if o.op is SimtOp.SHARED_ALLOC}
        read = {b for o in fn.walk() if o.op is SimtOp.WGMMA for b in o.attrs.buffers if b is not None}
        assert read and all(align[b] == 1024 for b in read), (kernel.name, align, read)


@pytest.mark.parametrize("bm, bn, warps, bd, spill_free", [(64, 128, 4, 64, True), (128, 128, 8, 128, False)])
def test_attention_ptx_takes_wgmma_with_p_from_registers_and_assembles(bm, bn, warps, bd, spill_free):
    """Attention's second dot (P @ V) runs wgmma with A in registers ("{%r..}" operands); only
    the GPU ran that form of the inline PTX before, so a broken operand list went unnoticed.
    (128x128 at D128 and 8 warps spills some 280 bytes at ptxas's 255 registers; recorded, not
    yet fixed.)"""
    if not ptxas.available():
        pytest.skip("nvJitLink is not installed")
    spec = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention_kernel.tile_ir((spec, spec, spec, spec, ScalarSpec(D.float32)),
                                    {"BM": bm, "BN": bn, "BD": bd, "CAUSAL": False})
    ptx = compile_ptx(compile_to_simt(tile, num_warps=warps, target="sm_90a"), "sm_90a")
    wgmmas = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    from_regs = [line for line in wgmmas if re.search(r"\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p", line)]
    assert from_regs and len(from_regs) < len(wgmmas), wgmmas[:2]
    whole = "setmaxnreg" in ptx                          # assembled whole, as the cuda backend does
    if whole and not ptxas.whole_program_available():
        pytest.skip("a setmaxnreg kernel is assembled whole: no ptxas command here")
    out = ptxas.assemble(ptx, "sm_90a", whole_program=whole)
    assert "serialized" not in out.log and (out.spills == 0 or not spill_free), out.log


def test_every_env_switch_reaches_the_pipeline():
    """Each switch ``compile_switches`` reads is passed on by ``backends.switch_options`` (which
    every backend's compile uses) and is a ``compile_to_simt`` keyword: a switch dropped there
    would key the caches but compile the default."""
    import inspect

    from tilejit import backends
    from tilejit.kernel import compile_switches
    from tilejit.passes.pipeline import compile_to_simt
    names = [name for name, _ in compile_switches()]
    options = dict(compile_switches())
    assert sorted(backends.switch_options(options)) == sorted(names)
    assert set(names) <= set(inspect.signature(compile_to_simt).parameters)


@pytest.mark.parametrize("on", [False, True])
def test_descriptor_offsets_make_a_tiles_k_steps_one_descriptor_and_adds(on, monkeypatch):
    """``codegen.llvm.DESCRIPTOR_OFFSETS`` (off until measured): the fp8 blockwise loop's four k
    steps read A and B at ``base + 32 k``; with the switch each operand's descriptor is made once
    (one ``lshr`` of an address) and the others are ``+ 2k`` on it; the PTX assembles with no
    spill and no serialised wgmma either way."""
    from tilejit.codegen import llvm as codegen
    from tilejit.examples import fp8_blockwise_gemm as ex
    from conftest import assemble_or_skip
    assert not codegen.DESCRIPTOR_OFFSETS
    monkeypatch.setattr(codegen, "DESCRIPTOR_OFFSETS", on)
    f8, f32 = ArraySpec(D.float8e4m3, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    tile = ex.fp8_blockwise_matmul_kernel.tile_ir((f8, f32, f8, f32, ArraySpec(D.bfloat16, 2, True, True, False)),
                                                  {"BM": 128, "BN": 128, "BK": 128, "B_NK": True})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    text = codegen.emit_llvm(fn, "sm_90a")
    shifts = len(re.findall(r"lshr i64 %\S+, 4", text))
    steps = [int(x) for x in re.findall(r"= add i64 %\S+, (\d+)", text)]
    assert (shifts, sorted(set(steps)) if on else steps) == ((2, [2, 4, 6]) if on else (8, []))
    built = assemble_or_skip(codegen.ptx_from_llvm(text, "sm_90a"), "sm_90a")
    assert built.spills == 0 and "serializ" not in built.log.lower()


def _two_promotions_tile(BM=256, BN=128, BK=128, row_max=False):
    """A block-scaled fp8 GEMM whose rows are two DOTs (the tile's halves), each promoted into
    its own accumulator: two wgmma groups a K block, each waited for and scaled in the loop (the
    first half spelled ``fma(dot, scale, acc)``, the second ``dot_scaled``).  ``row_max``: the
    loop also carries the first product's running row maximum (stored to ``mx_out``)."""
    import tilejit as tj
    from tilejit.specs import NoneSpec

    @tj.kernel
    def halves(a, a_scale, b, b_scale, c, mx_out, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr,
               ROW_MAX: tj.constexpr = False):
        H: tj.constexpr = BM // 2
        m = tj.program_id(0) * BM
        n = tj.program_id(1) * BN
        acc0 = tj.zeros((H, BN), tj.float32)
        acc1 = tj.zeros((H, BN), tj.float32)
        mx = tj.full((H,), -tj.inf, tj.float32)
        for k in range(0, a.shape[1], BK):
            w = tj.load(b, (n, k), (BN, BK)).T
            sb = tj.load(b_scale, (n // 128, k // 128), (1, 1))
            p0 = tj.dot(tj.load(a, (m, k), (H, BK)), w)
            acc0 = tj.fma(p0, tj.load(a_scale, (m, k // 128), (H, 1)) * sb, acc0)
            if ROW_MAX:
                mx = tj.maximum(mx, tj.max(p0, axis=1))
            acc1 = tj.dot_scaled(tj.load(a, (m + H, k), (H, BK)), tj.load(a_scale, (m + H, k // 128), (H, 1)),
                                 w, sb, acc1)
        tj.store(c, (m, n), acc0.to(c.dtype))
        tj.store(c, (m + H, n), acc1.to(c.dtype))
        if ROW_MAX:
            tj.store(mx_out, (m,), mx)
    f8, f32 = ArraySpec(D.float8e4m3, 2, True, True, False), ArraySpec(D.float32, 2, True, True, False)
    specs = (f8, f32, f8, f32, ArraySpec(D.bfloat16, 2, True, True, False),
             ArraySpec(D.float32, 1, True, True, False) if row_max else NoneSpec())
    return halves, halves.tile_ir(specs, {"BM": BM, "BN": BN, "BK": BK, "ROW_MAX": row_max})


@pytest.mark.parametrize("on", [True, False])
def test_a_promoted_accumulator_is_pinned_before_the_next_wgmma_group(on, monkeypatch):
    """``codegen.llvm.PIN_PROMOTED``: a loop body with two promotions (``acc_i = fma(p_i, s_i,
    acc_i)``, one wgmma group each) computes the first one's 64 FMAs before it issues the second
    group; unpinned, LLVM sinks them to the latch, past the second group, where both products
    are live at once (the PTX order only: ptxas schedules the SASS on its own)."""
    from tilejit.codegen import llvm as codegen
    assert codegen.PIN_PROMOTED
    monkeypatch.setattr(codegen, "PIN_PROMOTED", on)
    _, tile = _two_promotions_tile()
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    assert len(ops(fn, SimtOp.WGMMA_COMMIT)) == 2
    ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
    lines = ptx.splitlines()
    groups = [i for i, x in enumerate(lines) if "wgmma.mma_async" in x]
    second = groups[len(groups) // 2]                      # the second group's first wgmma
    fmas = [i for i, x in enumerate(lines) if "fma.rn.f32" in x]
    before = sum(first < i < second for i in fmas for first in groups[:1])
    assert before == (64 if on else 0)
    # attention's row statistics (2 registers, not a product's 64) are never pinned
    spec = ArraySpec(D.bfloat16, 4, True, True, False)
    attn = compile_to_simt(attention_kernel.tile_ir((spec, spec, spec, spec, ScalarSpec(D.float32)),
                                                    {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": False}), 8, "sm_90a")
    text = codegen.emit_llvm(attn, "sm_90a")
    monkeypatch.setattr(codegen, "PIN_PROMOTED", not on)
    assert codegen.emit_llvm(attn, "sm_90a") == text


@pytest.mark.parametrize("on", [True, False])
def test_a_fresh_products_first_wgmma_ignores_its_accumulator(on, monkeypatch):
    """``codegen.llvm.ZERO_PRODUCTS``: a product's first k step (its accumulator a zero constant)
    is issued with ``scale-d`` false and no accumulator inputs, so no zeros are moved into the
    registers: one such wgmma a group in attention's loop (S = QK^T; PV accumulates into the
    output); the PTX assembles without spills either way."""
    from tilejit.codegen import llvm as codegen
    from conftest import assemble_or_skip
    from tilejit.passes import rotate_products
    assert codegen.ZERO_PRODUCTS
    monkeypatch.setattr(codegen, "ZERO_PRODUCTS", on)
    monkeypatch.setattr(rotate_products, "ROTATE", False)      # (rotated: the first product's too)
    spec = ArraySpec(D.bfloat16, 4, True, True, False)
    tile = attention_kernel.tile_ir((spec, spec, spec, spec, ScalarSpec(D.float32)),
                                    {"BM": 128, "BN": 128, "BD": 128, "CAUSAL": False})
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    fresh = [o for o in ops(fn, SimtOp.WGMMA) if codegen._zeros(o.operands[0])]
    assert len(fresh) == 1
    ptx = codegen.ptx_from_llvm(codegen.emit_llvm(fn, "sm_90a"), "sm_90a")
    from tilejit import ir, simt
    some = ir.Operation(SimtOp.CONSTANT, [], [simt.RegType(D.float32, 4)], simt.VectorConstAttrs((0.0, 1.0, 0.0, 0.0)))
    assert not codegen._zeros(some.result)              # every value zero, not just some
    assert ptx.count("setp.ne.b32 p, 0, 0;") == (1 if on else 0)
    assert ptx.count("setp.ne.b32 p, 1, 0;") == len(ops(fn, SimtOp.WGMMA)) - (1 if on else 0)
    built = assemble_or_skip(ptx, "sm_90a")
    assert built.spills == 0


def test_two_promotions_a_block_match_float64_on_the_emulator():
    """The two-halves spelling of the block-scaled fp8 GEMM (two wgmma groups a K block on
    sm_90a) against the float64 product of the dequantised operands, ragged M and N."""
    from tilejit.examples import fp8_blockwise_gemm as ex
    halves, _ = _two_promotions_tile()
    rng = np.random.default_rng(3)
    m, n, k = 300, 200, 384
    a, sa = ex.quantize_rows(rng.standard_normal((m, k)).astype(np.float32) * 3)
    b, sb = ex.quantize_blocks(rng.standard_normal((k, 256)).astype(np.float32))
    b_nk, sb_nk = np.ascontiguousarray(b.T[:n]), np.ascontiguousarray(sb.T)
    c = np.zeros((m, n), ml_dtypes.bfloat16)
    halves[(-(-m // 64), -(-n // 64))](a, sa, b_nk, sb_nk, c, None, BM=64, BN=64, BK=64)
    ref = ex.reference(a, sa, b, sb)[:, :n]
    err = np.abs(c.astype(np.float64) - ref).max()
    assert err <= 1e-2 * np.abs(ref).max()


def test_only_the_product_sized_accumulator_is_pinned(monkeypatch):
    """A two-group loop that also carries a row statistic of the first product (its running row
    maximum, two registers a thread): ``PIN_PROMOTED`` pins the promoted accumulator's 64
    registers before the second group, and not the statistic, which may move with the rest."""
    from tilejit.codegen import llvm as codegen
    _, tile = _two_promotions_tile(row_max=True)
    fn = compile_to_simt(tile, num_warps=8, target="sm_90a")
    pins = {}
    for on in (True, False):
        monkeypatch.setattr(codegen, "PIN_PROMOTED", on)
        pins[on] = codegen.emit_llvm(fn, "sm_90a").count('asm sideeffect "", "=f,0"')
    assert pins[True] - pins[False] == 64
