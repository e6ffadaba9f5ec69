"""The compiler's pass pipeline, in order, in one list: tile IR -> tile IR passes, the lowering
to SIMT IR, then SIMT IR passes.  ``fold_exp`` turns softmax exponentials into exp2 with the
log2(e) scale folded into one FMA, ``fold_scale`` moves a positive scale off the scores (onto
their maximum and into that FMA), ``fuse_fma`` contracts a product into the sum it feeds;
``uniform_masks`` skips a block mask behind a scalar bound
check when the whole block is inside it; ``hoist_loads`` issues each top-level load as early as
its operands allow (never past a store).  ``plan_dots`` decides each DOT's instructions (wgmma,
mma.sync or FMA) and warp split (``plans.DotPlan``); ``assign_layouts`` gives every tile a
register layout; ``plan_loops`` decides how each loop is pipelined (``plans.LoopPlan``);
``lower_to_simt`` reads the plans (``pipeline_loads`` lowers the rings).

    compile_to_simt(tile_fn, num_warps=4, target="sm_90a", dump=None, *, wgmma=True, tma=True, cluster=True,
                    verify=False)
        -> SIMT ir.Function

With ``verify=True`` (``TILEJIT_DEBUG=1`` at the API edge) the IR is verified after every pass
(``tilejit.verifier.verify`` for tile IR, ``simt.verify`` for SIMT IR); ``dump(stage_name, text)`` is
called with the input and with each stage's output text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tilejit import ir, simt, verifier
from tilejit.ir import TileOp
from tilejit.passes.assign_layouts import assign_layouts, layouts_text
from tilejit.passes.prefetch_loads import prefetch_loads
from tilejit.passes.canonicalize import canonicalize
from tilejit.passes.chunk_rows import chunk_rows
from tilejit.passes import cluster_rows as cluster_module
from tilejit.passes import coarsen_programs as coarsen
from tilejit.passes.dce import dce
from tilejit.passes.fold_exp import fold_exp
from tilejit.passes.fold_scale import fold_scale
from tilejit.passes.fuse_fma import fuse_fma
from tilejit.passes.hoist_loads import hoist_loads
from tilejit.passes.lower import lower_to_simt
from tilejit.passes.mma_tiling import DEFAULT_STAGES
from tilejit.passes.pack_programs import choose_programs, pack_programs
from tilejit.passes import persist_programs as persist_module
from tilejit.passes.persist_programs import persist_programs
from tilejit.passes.plan_dots import dot_plans_text, plan_dots
from tilejit.passes.plan_loops import plan_loops, plans_text
from tilejit.passes.plan_stores import plan_stores
from tilejit.passes import remat_indices as remat_module
from tilejit.passes.shared_memory import MAX_SHARED_BYTES, insert_barriers, plan_shared_memory, ring_buffers
from tilejit.passes import specialise_warps as specialise_module
from tilejit.passes.specialise_warps import persistable, specialise_warps
from tilejit.passes.sink_transposes import sink_transposes
from tilejit.passes.split_dot_loads import split_dot_loads
from tilejit.passes.strip_asserts import strip_asserts
from tilejit.passes.defer_products import defer_products
from tilejit.passes.rotate_products import rotate_products
from tilejit.passes.swap_small_dots import swap_small_dots
from tilejit.passes.uniform_masks import uniform_masks
from tilejit.passes.warps import loaded_values, small_program
from tilejit.passes.widen_offsets import widen_offsets


# Threads per SM that a kernel of several programs per CTA (``pack_programs``) asks ptxas to
# fit (its ``min_ctas_per_sm``; None: no hint beyond ``occupancy_hint``).  A short row keeps one
# row's bytes in flight per program, so the bytes in flight per SM grow with the programs it
# holds: bf16 layernorm at 128 columns takes 47 registers, 5 CTAs of 256 threads; at 1536
# threads ptxas fits it in 40 with no spill.  Tried in turn: the first that does not spill wins.
PACKED_THREADS_PER_SM = (2048, 1536)
# The same wishes for the other kernels that get ``occupancy_hint``'s (memory-bound, 512 threads
# or more: long rows in chunk loops, whose loads wait at 2 CTAs per SM).  H200 (2026-12-04, same
# call, ratio to copy, with / without): RMSNorm bf16 16K 0.84 / 0.69, 32K 0.79 / 0.72 (40
# registers, 3 CTAs of 512 threads), softmax bf16 32K 0.70 / 0.66; the other 15 cells of softmax,
# layernorm and RMSNorm at 16K-64K, fp32 and bf16, within 2%.
ROW_THREADS_PER_SM = (2048, 1536)
# ... for CTAs of at least this many threads (those occupancy_hint gives a hint too).  32 (every
# CTA wishes) measured on the H200 (2026-12-04, session 7, same call, softmax at 1K-8K columns):
# only the 1024-column rows take the wish (the others spill at it), 1.00 / 0.995x copy (bf16 /
# fp32) against 1.01 / 0.99 without; the rest within 2%.  No gain, so 512 stays.
ROW_MIN_THREADS = 512
# ... and for persistent row kernels (``persist_programs``).  () : none.  (2048, 1536) measured
# on the H200 (2026-12-04, session 7, layernorm and RMSNorm at 1K-8K columns): bf16 layernorm
# 0.88 / 0.86 / 0.87 / 0.86x copy, RMSNorm 0.91 / 0.91 / 0.89 / 0.88, against 0.89 / 0.91 / 0.86 /
# 0.85 and 0.92 / 0.91 / 0.91 / 0.90 without: no gain.
PERSIST_THREADS_PER_SM = ()
# ... and for decode-shaped tensor-core kernels: every DOT's tile at most DECODE_DOT_ROWS rows (a
# GEMV-like W4A16 or split-K product at M 1-16 is bound by latency, and its CTAs come in waves:
# W4A16 16x128x128x4 at 159 registers holds 3 CTAs of 128 threads an SM, so split 8 at N 8192 is
# 512 CTAs on 396 slots, 1.3 waves; 16x64x128x4 fits 4 CTAs in 110 registers without a spill).
# () : none (other tensor-core kernels never wish: their tiles would spill).  Measured on the
# H100 (W4A16 M 1 and 16, N 8192 / 28672, K 8192, alternating, scripts/gpu_w4_ab.sh): (512,) the
# same as none (2026-12-05, session 18: 16x64x128x4 holds 4 CTAs at 125 registers anyway);
# (640,) -- 5 CTAs of 128 threads at 96 registers, no spill -- **8% faster at N 28672** (115.0-117.4
# against 124.6-127.0 us; 1792 CTAs come in fewer waves) and the same at N 8192 (42.1-43.0 us:
# its 512 CTAs fit one wave either way) (2026-12-05, session 20).  384 (3 CTAs): B taken from the
# nibbles at 16x128x128x4 spills 48 bytes at 4 CTAs and fits 3 in 118 registers (2026-12-06).
DECODE_DOT_THREADS_PER_SM = (640, 512, 384)
DECODE_DOT_ROWS = 16


@dataclass(frozen=True)
class Options:
    """What the pipeline is asked for.  The switches are read from the environment once, at the
    API edge (``tilejit.kernel.compile_switches``); no pass reads the environment."""
    num_warps: int = 4
    target: str = "sm_90a"
    wgmma: bool = True          # Hopper warpgroup mma where it applies (TILEJIT_WGMMA=0: off)
    verify: bool = False        # verify the IR after every pass (TILEJIT_DEBUG=1)
    num_stages: int | None = None      # ring depth of loops that do not say (launch option; None: the compiler picks)
    pack: bool = False          # several short programs per CTA where it applies (TILEJIT_PACK=0: off)
    programs_per_cta: int | None = None     # programs along grid axis 0 per CTA (None: pack decides)
    debug: bool = False         # keep tj.device_assert checks (launch option debug=True, TILEJIT_DEBUG=1)
    persist: bool | str = True  # persistent programs with the next one's rows copied ahead where measured
                                # faster ("always": wherever it applies; False: never)
    tma: bool = True            # wgmma rings filled by TMA copies where the arrays allow (TILEJIT_TMA=0: cp.async)
    warp_specialize: bool | str = "auto"   # a producer warpgroup issues a TMA loop's copies where measured
                                # faster ("auto"; True: wherever it applies, TILEJIT_WS=1; False: never, =0)
    cluster: bool = True        # long rows split over a thread-block cluster on sm_90 (TILEJIT_CLUSTER=0: off)
    tma_store: bool | str = "auto"   # epilogues copied out by TMA where they apply ("auto": the measured
                                # default, ``plan_stores.TMA_STORES``; TILEJIT_TMA_STORE=1 / =0: on / off)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable            # (fn, Options) -> fn
    level: str               # IR level of the stage's *output*: "tile" or "simt"


# Shared bytes a persistent kernel's rings may not take: the consumers' mbarriers that
# specialise_warps adds after planning (8 per slot) must still fit
RING_MARGIN = 1024

PIPELINE = [
    Stage("strip_asserts", lambda fn, opt: strip_asserts(fn, opt.debug), "tile"),
    Stage("cluster_rows", lambda fn, opt: cluster_module.cluster_rows(fn)
          if opt.cluster and cluster_module.supports(opt.target) else fn, "tile"),
    Stage("chunk_rows", lambda fn, opt: chunk_rows(fn), "tile"),
    Stage("widen_offsets", lambda fn, opt: widen_offsets(fn), "tile"),
    Stage("canonicalize", lambda fn, opt: canonicalize(fn), "tile"),
    Stage("fold_exp", lambda fn, opt: fold_exp(fn), "tile"),
    Stage("fold_scale", lambda fn, opt: fold_scale(fn), "tile"),
    Stage("fuse_fma", lambda fn, opt: fuse_fma(fn), "tile"),
    Stage("dce", lambda fn, opt: dce(fn), "tile"),
    Stage("sink_transposes", lambda fn, opt: sink_transposes(fn), "tile"),
    Stage("uniform_masks", lambda fn, opt: uniform_masks(fn), "tile"),
    Stage("hoist_loads", lambda fn, opt: hoist_loads(fn), "tile"),
    Stage("prefetch_loads", lambda fn, opt: prefetch_loads(fn, opt.num_warps, opt.target if opt.wgmma else "sm_80"),
          "tile"),
    Stage("split_dot_loads", lambda fn, opt: split_dot_loads(fn, opt.target), "tile"),
    Stage("swap_small_dots", lambda fn, opt: swap_small_dots(fn, opt.num_warps, opt.target, opt.wgmma), "tile"),
    Stage("defer_products", lambda fn, opt: defer_products(fn, opt.num_warps, opt.target, opt.wgmma), "tile"),
    Stage("rotate_products", lambda fn, opt: rotate_products(fn, opt.num_warps, opt.target, opt.wgmma), "tile"),
    Stage("plan_dots", lambda fn, opt: plan_dots(fn, opt.num_warps, opt.target, opt.wgmma, opt.num_stages or DEFAULT_STAGES), "tile"),
    Stage("assign_layouts", lambda fn, opt: assign_layouts(fn, opt.num_warps), "tile"),
    Stage("plan_loops", lambda fn, opt: plan_loops(fn, opt.num_warps, opt.target, opt.num_stages, opt.tma), "tile"),
    Stage("plan_stores", lambda fn, opt: plan_stores(fn, opt.target, opt.tma and opt.tma_store), "tile"),
    Stage("lower_to_simt", lambda fn, opt: lower_to_simt(fn, opt.num_warps), "simt"),
    Stage("coarsen_programs", lambda fn, opt: coarsen.coarsen_programs(fn, 1 if opt.pack or opt.programs_per_cta
                                                                        else coarsen.COARSEN), "simt"),
    Stage("persist_programs", lambda fn, opt: persist_programs(fn, always=True if opt.persist == "always" else None)
          if opt.persist and not (
        opt.pack or opt.programs_per_cta or fn.meta.serial_programs) else fn, "simt"),
    Stage("remat_indices", lambda fn, opt: remat_module.remat_indices(fn) if remat_module.REMAT else fn, "simt"),
    Stage("plan_shared_memory", lambda fn, opt: plan_shared_memory(
        fn, ring_buffers(fn) if opt.warp_specialize and (persistable(fn) or specialise_module.PRIVATE_RINGS
                                                        or specialise_module.product_before_loop(fn)) else (),
        MAX_SHARED_BYTES.get(opt.target, 0) - RING_MARGIN), "simt"),
    Stage("insert_barriers", lambda fn, opt: insert_barriers(fn), "simt"),
    Stage("specialise_warps", lambda fn, opt: specialise_warps(fn, opt.warp_specialize is True)
          if opt.warp_specialize else fn, "simt"),
    Stage("pack_programs", lambda fn, opt: fn if fn.meta.serial_programs or fn.meta.persistent
          or fn.meta.persistent_tiles else
          pack_programs(fn, *((opt.programs_per_cta,) if opt.programs_per_cta else choose_programs(fn, opt.pack))),
          "simt"),
]


def stage_text(fn: ir.Function, level: str) -> str:
    if level == "simt":
        return ir.print_function(fn) + f"\n# {fn.meta.summary()}"
    if "loop_plans" in fn.meta:
        text = plans_text(fn)
    elif "layouts" in fn.meta:
        text = layouts_text(fn)
    else:
        text = ir.print_function(fn)
    return text + "\n" + dot_plans_text(fn) if "dot_plans" in fn.meta else text


def compile_to_simt(tile_fn: ir.Function, num_warps: int = 4, target: str = "sm_90a",
                    dump: Callable[[str, str], None] | None = None, *, wgmma: bool = True,
                    verify: bool = False, num_stages: int | None = None, fast_math: bool = False,
                    pack: bool = False, programs_per_cta: int | None = None, debug: bool = False,
                    persist: bool | str = True, tma: bool = True, warp_specialize: bool | str = "auto",
                    cluster: bool = True, tma_store: bool | str = "auto") -> ir.Function:
    """Run the pipeline on a copy of ``tile_fn`` (which is left untouched)."""
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps must be a power of two from 1 to 32, got {num_warps!r}")
    pack = pack and small_program(tile_fn, num_warps)               # several tiny programs per CTA
    options = Options(num_warps, target, wgmma, verify, num_stages, pack, programs_per_cta, debug, persist, tma,
                      warp_specialize, cluster, tma_store)
    fn = clone_function(tile_fn)
    if dump:
        dump("input", stage_text(fn, "tile"))
    for stage in PIPELINE:
        fn = stage.run(fn, options)
        if options.verify:
            if stage.level == "simt":
                simt.verify(fn)
            else:
                verifier.verify(fn)
        if dump:
            dump(stage.name, stage_text(fn, stage.level))
    fn.meta.target = target
    set_occupancy(fn, tile_fn, num_warps)
    fn.meta.fast_math = fast_math             # codegen: approximate sin/cos (a launch option)
    return fn


def set_occupancy(fn: ir.Function, tile_fn: ir.Function, num_warps: int) -> None:
    """The SIMT program's occupancy hint (``min_ctas_per_sm``) and the hints the backend tries
    in turn where that one spills (``min_ctas_fallbacks``, ending with the plain hint): the plain
    ``occupancy_hint``, raised for clustered and persistent kernels by their passes' rules, and
    wishes for more CTAs per SM for packed, long-row (and, when asked, persistent) kernels."""
    fn.meta.min_ctas_per_sm = plain = occupancy_hint(tile_fn, num_warps)
    if fn.meta.cluster_ctas > 1 and not fn.meta.paired_ctas and cluster_module.THREADS_PER_SM and (  # (not where
            # it would spill; a multicast pair is two programs, not one row's parts)
            loaded_values(tile_fn) // fn.meta.cluster_ctas <= fn.meta.cta_threads * cluster_module.VALUES_PER_THREAD):
        fn.meta.min_ctas_per_sm = max(fn.meta.min_ctas_per_sm, cluster_module.THREADS_PER_SM // fn.meta.cta_threads)
    if fn.meta.persistent and persist_module.THREADS_PER_SM:
        fn.meta.min_ctas_per_sm = max(fn.meta.min_ctas_per_sm, persist_module.THREADS_PER_SM // fn.meta.cta_threads)
    dots = [o for o in tile_fn.walk() if o.op is TileOp.DOT]       # (tensor-core kernels wish only decode-shaped)
    decode = bool(dots) and all(o.result.type.shape[-2] <= DECODE_DOT_ROWS for o in dots)
    wanted = PACKED_THREADS_PER_SM if fn.meta.programs_per_cta > 1 else \
        (DECODE_DOT_THREADS_PER_SM if decode else ()) if dots else \
        PERSIST_THREADS_PER_SM if fn.meta.persistent else \
        ROW_THREADS_PER_SM if fn.meta.cluster_ctas == 1 and fn.meta.cta_threads >= ROW_MIN_THREADS else ()
    wishes = sorted({min(32, threads // fn.meta.cta_threads) for threads in wanted or ()}   # (at most 32 per SM)
                    - set(range(fn.meta.min_ctas_per_sm + 1)), reverse=True)
    if wishes:                  # the most CTAs that assemble without spilling (the backend tries)
        fn.meta.min_ctas_per_sm, *rest = wishes
        fn.meta.min_ctas_fallbacks = (*rest, plain)
    elif fn.meta.min_ctas_per_sm != plain:
        fn.meta.min_ctas_fallbacks = (plain,)


def occupancy_hint(tile_fn: ir.Function, num_warps: int) -> int:
    """CTAs per SM to ask ptxas to fit (it caps registers to match), a fact of the SIMT
    program's metadata that codegen reads.  Kernels without tensor-core or shared-memory-heavy
    work are memory-bound and need many bytes in flight: ask for half the SM's 2048 threads.
    Kernels with DOT keep their registers (they would spill)."""
    threads = 32 * num_warps
    if threads < 512 or any(o.op is TileOp.DOT for o in tile_fn.walk()):
        return 0
    return 1024 // threads


clone_function = ir.clone_function          # (where tests and passes have always found it)
