"""Same speed however it is spelled: the attention and GEMM kernels written as Triton's tutorial
writes them (a plain ``range`` loop, ``k.T``, nothing about pipelining) against the examples'
``tj.range(..., stages=N)`` spelling and torch, in the same run (bf16, CUDA events, medians,
L2 flushed, outputs poisoned and checked first).

    python3 benchmarks/bench_spelling.py [--reps 50] [--attention 4x32x4096x128,16x16x1024x64] [--gemm 4096,8192]

Attention, full and causal, is the best of ``TUNE`` for each spelling, against SDPA flash.
"""
from __future__ import annotations

import argparse
import sys

import common
import tilejit as tj


@tj.kernel
def attention_plain(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr,
                    CAUSAL: tj.constexpr):
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    end = k.shape[2]
    if CAUSAL:
        end = tj.minimum(end, start_m + BM)
    for n0 in range(0, end, BN):
        kt = tj.load(k, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T) * scale
        if CAUSAL:
            s = tj.where(n0 + tj.arange(0, BN)[None, :] <= start_m + tj.arange(0, BM)[:, None], s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        alpha = tj.exp(m_i - m_new)
        p = tj.exp(s - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tj.store(o, (batch, head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, 1, BM, BD)))


@tj.kernel
def matmul_plain(a, b, c, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    m, n = tj.program_id(0) * BM, tj.program_id(1) * BN
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, a.shape[1], BK):
        acc += tj.dot(tj.load(a, (m, k), (BM, BK)), tj.load(b, (k, n), (BK, BN)))
    tj.store(c, (m, n), acc.to(c.dtype))


# the attention configs the spellings are tuned over (BM, BN, num_warps): the best of each is kept
TUNE = [(128, 128, 8), (64, 128, 4), (128, 64, 4)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--attention", default="4x32x4096x128,16x16x1024x64", help="B x H x S x D, comma-separated")
    parser.add_argument("--gemm", default="4096,8192", help="bf16 M = N = K sizes")
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    example = common.load_example("attention").attention_kernel
    rows = []
    for shape in filter(None, args.attention.split(",")):
        B, H, S, D = (int(x) for x in shape.split("x"))
        q, k, v = (common.random_tensor(torch, (B, H, S, D), torch.bfloat16, seed=s) for s in (1, 2, 3))
        o = torch.empty_like(q)
        for causal in (False, True):
            with sdpa_kernel(SDPBackend.MATH):
                ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
            case = f"attention B{B} H{H} S{S} D{D}" + (" causal" if causal else "")

            def launcher(kernel):
                def make(cfg):
                    BM, BN, nw = cfg
                    grid = (tj.cdiv(S, BM), B * H)
                    return lambda: kernel[grid](q, k, v, o, D ** -0.5, BM=BM, BN=BN, BD=D, CAUSAL=causal,
                                                num_warps=nw)
                return make
            for name, kernel in (("tj.range(stages=2)", example), ("plain range, k.T", attention_plain)):
                timed = common.sweep(torch, TUNE, launcher(kernel), o, ref, 2e-2, args.reps)
                if timed:
                    cfg, (t, err) = min(timed.items(), key=lambda item: item[1][0].median_ms)
                    rows.append({"case": case, "spelling": f"{name} {'x'.join(map(str, cfg))}",
                                 "TFLOP/s": flops / t.median_ms / 1e9, "err": err})
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                t = common.time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=args.reps)
            rows.append({"case": case, "spelling": "torch SDPA flash", "TFLOP/s": flops / t.median_ms / 1e9,
                         "err": float("nan")})
    mm = common.load_example("matmul").matmul_kernel.kernel
    for size in (int(x) for x in filter(None, args.gemm.split(","))):
        M = N = K = size
        a = common.random_tensor(torch, (M, K), torch.bfloat16, seed=4)
        b = common.random_tensor(torch, (K, N), torch.bfloat16, seed=5)
        c = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
        ref = (a.float() @ b.float())
        grid = (M // 128, N // 256)
        runs = {"tj.range(stages=4)": lambda: mm[grid](a, b, c, BM=128, BN=256, BK=64, STAGES=4, num_warps=8),
                "plain range, +=": lambda: matmul_plain[grid](a, b, c, BM=128, BN=256, BK=64, num_warps=8),
                "torch (cuBLAS)": lambda: torch.matmul(a, b, out=c)}
        for name, run in runs.items():
            c.fill_(float("nan"))
            run()
            err = common.relative_error(torch, c.float(), ref)
            t = common.time_cuda(run, reps=args.reps)
            rows.append({"case": f"matmul {M}x{N}x{K}", "spelling": name,
                         "TFLOP/s": 2.0 * M * N * K / t.median_ms / 1e9, "err": err})
    print(f"spelling on {common.gpu_name()} (bf16, CUDA events, median of {args.reps}, L2 flushed)")
    for r in rows:
        print(f"{r['case']:36} {r['spelling']:32} {r['TFLOP/s']:8.1f} TFLOP/s  rel err {r['err']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
