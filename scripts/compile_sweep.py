"""Compile every example kernel at the configs the benchmarks and autotuners launch, for sm_90a,
from the examples' own ``run`` functions, without a GPU: a launch compiles through the cuda
backend (PTX, then ptxas / nvJitLink) and runs nothing.  Prints one line a launch (registers,
spills, shared memory) and every failure with its error; exits 1 if any launch failed to build.

    python3 scripts/compile_sweep.py [--arch sm_80] [--set MODULE.NAME=VALUE ...] [NAME_SUBSTRING ...]

``--set`` turns a compiler switch before anything compiles (e.g.
``--set tilejit.passes.multicast.MULTICAST=True``: every kernel multicast can pair, paired).

A config that is too big for the GPU (shared memory, registers), or float8 on sm_80, is a clean
``CompileError`` the autotuner skips, reported as "refused"; anything else is a failure.  Last
run (2026-12-05, build machine): 0 failures for sm_90a and for sm_80, about a minute each."""
from __future__ import annotations

import ast
import os
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tilejit as tj  # noqa: E402
from tilejit import backends  # noqa: E402
from tilejit.passes import switches  # noqa: E402
from tilejit.errors import CompileError  # noqa: E402

BF16 = tj.bfloat16.np


class CompileOnly:
    """The cuda backend's compile (for ``arch``, or the device's: sm_90a where none is present);
    launches record the artifact and run nothing."""

    def __init__(self, arch: str | None = None):
        self.cuda = backends.get("cuda")
        self.arch = arch
        self.built: list = []

    @property
    def target(self):
        return self.arch or self.cuda.target

    def cache_key(self, *args, **kwargs):
        return None                     # compile every time: nothing served from a cache

    def compile(self, tile_fn, options):
        options = {**options, "cache_key": None}
        if self.arch is None:
            return self.cuda.compile(tile_fn, options)
        cls = type(self.cuda)
        saved = cls.__dict__["target"]
        cls.target = property(lambda _: self.arch)
        try:
            return self.cuda.compile(tile_fn, options)
        finally:
            cls.target = saved

    def launch(self, artifact, grid, args, stream):
        self.built.append(artifact)


def cases():
    """(name, thunk): each thunk launches an example once (compiling it)."""
    from tilejit.examples import (attention, attention_backward as bwd, decode_attention as dec, fp8_attention as fa8,
                                  fp8_blockwise_gemm as f8, layernorm, matmul, rmsnorm, softmax, w4a16_gemm as w4)
    rng = np.random.default_rng(0)

    def arr(*shape, dtype=BF16):
        return np.zeros(shape, dtype)
    for cfg in matmul.CONFIGS:
        k = cfg.constexprs
        for dt in (BF16, np.float16):
            a, b, c = arr(1024, 1024, dtype=dt), arr(1024, 1024, dtype=dt), arr(1024, 1024, dtype=np.float32)
            yield (f"matmul {np.dtype(dt).name} {k['BM']}x{k['BN']}x{k['BK']} s{k['STAGES']} w{cfg.num_warps}",
                   lambda a=a, b=b, c=c, k=k, w=cfg.num_warps: matmul.matmul_kernel.kernel[
                       (tj.cdiv(1024, k["BM"]), tj.cdiv(1024, k["BN"]))](a, b, c, num_warps=w, **k))
    for k in (matmul.CONFIGS[1], matmul.CONFIGS[8], matmul.CONFIGS[0]):     # rows of 2000 bytes: no TMA, the twin loops
        a, b, c = arr(256, 1000), arr(1000, 256), arr(256, 256, dtype=np.float32)
        kw = k.constexprs
        yield (f"matmul bfloat16 K=1000 (unaligned rows) {kw['BM']}x{kw['BN']}x{kw['BK']} w{k.num_warps}",
               lambda a=a, b=b, c=c, kw=kw, w=k.num_warps: matmul.matmul_kernel.kernel[
                   (tj.cdiv(256, kw["BM"]), tj.cdiv(256, kw["BN"]))](a, b, c, num_warps=w, **kw))
    for cfg in attention.attention_tuned.configs:
        k = cfg.constexprs
        for dim, causal in ((64, False), (128, True), (128, False)):
            q = arr(2, 4, 512, dim)
            yield (f"attention D{dim}{' causal' if causal else ''} {k['BM']}x{k['BN']} w{cfg.num_warps}",
                   lambda q=q, k=k, w=cfg.num_warps, dim=dim, causal=causal: attention.attention_kernel[
                       (tj.cdiv(512, k["BM"]), 8)](q, q, q, np.zeros_like(q), dim ** -0.5, BD=dim, CAUSAL=causal,
                                                   num_warps=w, **k))
    for bm, bn, w in ((64, 64, 8), (64, 64, 4), (128, 64, 8), (128, 128, 8)):
        for causal in (False, True):
            inputs = fa8.example_inputs(rng, 1, 4, 2, 512, 128)
            yield (f"fp8 attention D128{' causal' if causal else ''} {bm}x{bn} w{w}",
                   lambda inputs=inputs, bm=bm, bn=bn, w=w, causal=causal: fa8.run(*inputs, causal=causal, BM=bm,
                                                                                    BN=bn, num_warps=w))
    for bm, bn, bk, w in ((64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 128, 4)):
        a, sa = f8.quantize_rows(rng.standard_normal((512, 512)).astype(np.float32))
        b, sb = f8.quantize_blocks(rng.standard_normal((512, 512)).astype(np.float32))
        yield f"fp8 blockwise {bm}x{bn}x{bk} w{w}", lambda a=a, sa=sa, b=b, sb=sb, c=(bm, bn, bk): f8.run(a, sa, b, sb, *c)
    for bm, bn, bk, w in ((128, 128, 128, 8), (64, 128, 128, 4), (128, 128, 64, 8),
                          (128, 256, 128, 8)):
        a, sa = f8.quantize_rows(rng.standard_normal((512, 512)).astype(np.float32))
        b, sb = f8.quantize_blocks(rng.standard_normal((512, 512)).astype(np.float32))
        yield (f"fp8 blockwise (N, K) {bm}x{bn}x{bk} w{w}",
               lambda a=a, sa=sa, b=b, sb=sb, c=(bm, bn, bk, w): f8.run_nk(a, sa, np.ascontiguousarray(b.T),
                                                                          np.ascontiguousarray(sb.T), *c))
    packed, scales, zeros = w4.quantize(rng.standard_normal((1024, 512)).astype(np.float32), 128)
    for bm, bn, bk, w, split in ((16, 64, 128, 4, 1), (16, 64, 128, 4, 8), (16, 128, 128, 4, 8), (64, 64, 128, 4, 1),
                                 (64, 128, 64, 4, 1), (64, 128, 128, 4, 2), (64, 64, 64, 4, 4)):
        for m in sorted({1, bm}):
            x = arr(m, 1024)
            yield (f"w4a16 M{m} {bm}x{bn}x{bk} w{w} split {split}",
                   lambda x=x, c=dict(BM=bm, BN=bn, BK=bk, split=split): w4.run(x, packed, scales, zeros, group=128, **c))
    packed_odd, scales_odd, zeros_odd = w4.quantize(rng.standard_normal((1024, 1000)).astype(np.float32), 128)
    for bm, bn, bk, split in ((64, 128, 128, 2), (16, 64, 128, 8)):      # packed rows of 500 bytes
        x = arr(bm, 1024)
        yield (f"w4a16 N=1000 (unaligned rows) M{bm} {bm}x{bn}x{bk} split {split}",
               lambda x=x, c=dict(BM=bm, BN=bn, BK=bk, split=split): w4.run(x, packed_odd, scales_odd, zeros_odd,
                                                                              group=128, **c))
    for split, bn, w in ((1024, 64, 4), (2048, 128, 4), (2048, 128, 8)):
        q, k, v = dec.example_inputs(rng, 2, 8, 2, 1, 2048, 128)
        yield (f"decode {split}x{bn} w{w}",
               lambda q=q, k=k, v=v, c=dict(split=split, BN=bn, num_warps=w): dec.run(q, k, v, **c))
    for bm, bn, w, dq in ((32, 64, 4, (64, 64, 4)), (32, 128, 8, (128, 64, 8)), (64, 64, 4, (64, 64, 4)),
                          (64, 128, 8, (128, 128, 8))):       # (the last: the torch op's at D64, backward_tiles)
        for dim in (64, 128):
            q = arr(1, 4, 256, dim)
            lse = arr(1, 4, 256, dtype=np.float32)
            yield (f"attention backward D{dim} {bm}x{bn} w{w} dq {dq}",
                   lambda q=q, lse=lse, c=dict(BM=bm, BN=bn, num_warps=w, dq_config=dq):
                   bwd.backward(q, q, q, q, lse, q, causal=True, **c))
    from tilejit.examples import (embedding_bag, fp8_matmul, histogram, moe_gemm, split_k_gemm, topk)
    a8, sa = fp8_matmul.quantize(rng.standard_normal((512, 512)).astype(np.float32))
    for bm, bn, bk, w in ((128, 256, 128, 8), (128, 128, 128, 8), (64, 256, 128, 4), (128, 256, 64, 8)):
        yield (f"fp8 matmul (N, K) {bm}x{bn}x{bk} w{w}",
               lambda c=(bm, bn, bk, w): fp8_matmul.run_linear(a8, a8, sa, sa, *c))
    for c in ((64, 64, 64), (32, 64, 32)):
        yield f"fp8 matmul {'x'.join(map(str, c))}", lambda c=c: fp8_matmul.run(a8, a8, sa, sa, *c)
    for dt in (np.float16, BF16):
        a, b = arr(256, 2048, dtype=dt), arr(2048, 256, dtype=dt)
        for split, c in ((4, (64, 64, 32)), (8, (128, 128, 64))):
            yield (f"split-K {np.dtype(dt).name} split {split} {'x'.join(map(str, c))}",
                   lambda a=a, b=b, split=split, c=c: split_k_gemm.run(a, b, split, *c))
    x, w, experts = moe_gemm.example_inputs(rng)
    for c in ((32, 64, 32), (64, 64, 64)):
        yield f"moe {'x'.join(map(str, c))}", lambda c=c: moe_gemm.run(x, w, experts, *c)
    yield "topk 8 of 300", lambda: topk.run(*topk.example_inputs(rng))
    yield "histogram 256 bins", lambda: histogram.run(*histogram.example_inputs(rng))
    yield "histogram scatter", lambda: histogram.run_scatter(*histogram.example_inputs(rng))
    yield "embedding bag", lambda: embedding_bag.run(*embedding_bag.example_inputs(rng))
    for cols in (1024, 16384):
        x = arr(64, cols, dtype=np.float32)
        yield f"softmax f32 {cols}", lambda x=x: softmax.run(x)
        yield f"layernorm f32 {cols}", lambda x=x: layernorm.run(x, x[0], x[0])
        yield f"rmsnorm f32 {cols}", lambda x=x: rmsnorm.run(x, x[0])


def main(argv) -> int:
    arch = None
    if argv[:1] == ["--arch"]:
        arch, argv = argv[1], argv[2:]
    while argv[:1] == ["--set"]:                 # a compiler switch, MODULE.NAME=VALUE (a Python literal)
        target, _, value = argv[1].partition("=")
        switches.apply([(target, ast.literal_eval(value))])
        argv = argv[2:]
    os.environ["TILEJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tj_sweep_")
    sweep = CompileOnly(arch)
    backends.PROVIDERS["sweep"] = ()
    backends.register("sweep", sweep)
    os.environ["TILEJIT_BACKEND"] = "sweep"
    failed = 0
    for name, thunk in cases():
        if argv and not any(w in name for w in argv):
            continue
        start, before = time.perf_counter(), len(sweep.built)
        try:
            thunk()
        except CompileError as err:
            msg = str(err).splitlines()[0]
            refused = "shared memory" in msg or "registers" in msg or " needs sm_" in msg   # too big, or float8 on sm_80
            failed += not refused
            print(f"{'refused' if refused else 'FAILED '} {name}: {msg[:160]}")
            continue
        except Exception as err:     # noqa: BLE001 -- every other error is a compiler bug
            failed += 1
            print(f"FAILED  {name}: {type(err).__name__}: {str(err).splitlines()[0][:160]}")
            traceback.print_exc(limit=3, file=sys.stdout)
            continue
        arts = sweep.built[before:]
        info = ", ".join(f"{a.name} {a.registers} regs {a.spills or 0} B spilled {a.shared_bytes} B smem"
                         + (" paired" if getattr(a, "paired_ctas", False) else "") for a in arts)
        print(f"ok      {name}: {info} ({time.perf_counter() - start:.1f} s)")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
