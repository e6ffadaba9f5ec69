"""Same speed however it is spelled: the attention and GEMM kernels written as Triton's tutorial
writes them (a plain ``range`` loop, ``k.T``, nothing about pipelining) against the examples'
``tj.range(..., stages=N)`` spelling and torch, in the same run (bf16, CUDA events, medians,
L2 flushed, outputs poisoned and checked first).

    python3 benchmarks/bench_spelling.py [--reps 50]
"""
from __future__ import annotations

import argparse
import sys

import common
import tilejit as tj


@tj.kernel
def attention_plain(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr):
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    for n0 in range(0, k.shape[2], BN):
        kt = tj.load(k, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, head, n0, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T) * scale
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    F = torch.nn.functional
    example = common.load_example("attention").attention_kernel
    rows = []
    for (B, H, S, D), (BM, BN, nw) in (((4, 32, 4096, 128), (128, 128, 8)), ((4, 32, 4096, 64), (64, 128, 4))):
        q, k, v = (common.random_tensor(torch, (B, H, S, D), torch.bfloat16, seed=s) for s in (1, 2, 3))
        o = torch.empty_like(q)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        flops = 4.0 * B * H * S * S * D
        grid = (tj.cdiv(S, BM), B * H)
        runs = {"tj.range(stages=2)": lambda: example[grid](q, k, v, o, D ** -0.5, BM=BM, BN=BN, BD=D,
                                                          CAUSAL=False, num_warps=nw),
                "plain range, k.T": lambda: attention_plain[grid](q, k, v, o, D ** -0.5, BM=BM, BN=BN, BD=D,
                                                                  num_warps=nw),
                "torch SDPA": lambda: F.scaled_dot_product_attention(q, k, v)}
        for name, run in runs.items():
            o.fill_(float("nan"))
            run()
            out = o if name != "torch SDPA" else run()
            err = common.relative_error(torch, out.float(), ref)
            t = common.time_cuda(run, reps=args.reps)
            rows.append({"case": f"attention B{B} H{H} S{S} D{D}", "spelling": name,
                         "TFLOP/s": flops / t.median_ms / 1e9, "err": err})
    M = N = K = 8192
    a = common.random_tensor(torch, (M, K), torch.bfloat16, seed=4)
    b = common.random_tensor(torch, (K, N), torch.bfloat16, seed=5)
    c = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
    ref = (a.float() @ b.float())
    mm = common.load_example("matmul").matmul_kernel.kernel
    grid = (M // 128, N // 256)
    runs = {"tj.range(stages=4)": lambda: mm[grid](a, b, c, BM=128, BN=256, BK=64, STAGES=4, num_warps=8),
            "plain range, +=": lambda: matmul_plain[grid](a, b, c, BM=128, BN=256, BK=64, num_warps=8),
            "torch (cuBLAS)": lambda: torch.matmul(a, b, out=c)}
    for name, run in runs.items():
        c.fill_(float("nan"))
        run()
        err = common.relative_error(torch, c.float(), ref)
        t = common.time_cuda(run, reps=args.reps)
        rows.append({"case": f"matmul {M}x{N}x{K}", "spelling": name, "TFLOP/s": 2.0 * M * N * K / t.median_ms / 1e9,
                     "err": err})
    print(f"spelling on {common.gpu_name()} (bf16, CUDA events, median of {args.reps}, L2 flushed)")
    for r in rows:
        print(f"{r['case']:32} {r['spelling']:22} {r['TFLOP/s']:8.1f} TFLOP/s  rel err {r['err']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
