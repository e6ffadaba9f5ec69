"""Attention spelled as Triton's tutorial spells its softmax: the scale and log2(e) folded into
one constant applied to the row max and, in one FMA, to the scores (``exp2(s * qk_scale - m)``,
exact for a positive scale), against ``examples/attention.py`` (``s = dot * scale`` then the max
and ``exp``).  ``sass``: the loop's SASS instruction counts of both on the build machine;
``check``: both against float64 on whichever backend runs; ``bench``: the three spellings
(``SPELLINGS``: also ``attention_raw``, ``exp((s - m) * scale)``) timed against SDPA (cuDNN) in
one run on the GPU.

    python3 scripts/probes/attention_exp2.py [sass | check | bench] [--reps N]"""
import sys

import numpy as np

import tilejit as tj
from tilejit.examples import attention

LOG2E = 1.4426950408889634


@tj.kernel
def attention_exp2(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    kv_head = head // (heads // k.shape[1])
    seq_k = k.shape[2]
    qk_scale = scale * 1.4426950408889634
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    rows = start_m + tj.arange(0, BM)
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    end = seq_k
    if CAUSAL:
        end = tj.minimum(seq_k, start_m + BM)
    for start_n in range(0, end, BN):
        kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T)
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1) * qk_scale)
        p = tj.exp2(s * qk_scale - m_new[:, None])
        alpha = tj.exp2(m_i - m_new)
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tj.store(o, (batch, head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, 1, BM, BD)))


@tj.kernel
def attention_raw(q, k, v, o, scale, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    """The softmax kept in the raw scores' units, scaled inside the exponential
    (``exp((s - m) * scale)``), as FlashAttention-2's CUDA spells ``exp2f(s * scale - m * scale)``."""
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch, head = tj.program_id(1) // heads, tj.program_id(1) % heads
    kv_head = head // (heads // k.shape[1])
    seq_k = k.shape[2]
    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    rows = start_m + tj.arange(0, BM)
    m_i = tj.full((BM,), -tj.inf, tj.float32)
    l_i = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    end = seq_k
    if CAUSAL:
        end = tj.minimum(seq_k, start_m + BM)
    for start_n in range(0, end, BN):
        kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T)
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        p = tj.exp((s - m_new[:, None]) * scale)
        alpha = tj.exp((m_i - m_new) * scale)
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tj.store(o, (batch, head, start_m, 0), (acc / l_i[:, None]).to(o.dtype).reshape((1, 1, BM, BD)))


SPELLINGS = (("example", attention.attention_kernel), ("exp2", attention_exp2), ("raw", attention_raw))


def _loop_counts(kernel, causal):
    import collections
    import re
    import subprocess
    q = np.zeros((1, 2, 4096, 128), tj.bfloat16.np)
    specs, consts, _ = kernel.specialise(kernel.bind((q, q, q, q, 0.088), dict(BM=128, BN=128, BD=128, CAUSAL=causal)))
    cubin = kernel.compile(specs, consts, 8, "cuda").artifact.cubin
    with open("/tmp/_att.cubin", "wb") as f:
        f.write(cubin)
    sass = subprocess.run(["nvdisasm", "-c", "/tmp/_att.cubin"], capture_output=True, text=True).stdout.splitlines()
    gmma = [i for i, line in enumerate(sass) if "HGMMA" in line]
    ops = collections.Counter(re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line).group(1)
                              for line in sass[gmma[0]:gmma[-1]] if re.match(r"\s*/\*[0-9a-f]+\*/", line))
    return sum(ops.values()), ops


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "sass"
    if what == "sass":
        for causal in (False, True):
            for name, kernel in SPELLINGS:
                n, ops = _loop_counts(getattr(kernel, "kernel", kernel), causal)
                print(f"causal={causal} {name}: {n} SASS instructions from the first HGMMA to the last "
                      f"(FMUL {ops['FMUL']}, FFMA {ops['FFMA']}, FMNMX {ops['FMNMX']}, MUFU {ops['MUFU']}, FSEL {ops['FSEL']})")
    elif what == "check":
        for causal in (False, True):
            for dim in (64, 128):
                qa, ka, va = attention.example_inputs(np.random.default_rng(dim), batch=2, heads=4, kv_heads=2, seq=333,
                                                      dim=dim, dtype=tj.bfloat16.np)
                ref = attention.reference(qa, ka, va, causal)
                o = np.full_like(qa, np.nan)
                attention_exp2[(tj.cdiv(333, 128), 8)](qa, ka, va, o, 1 / np.sqrt(dim), BM=128, BN=128, BD=dim,
                                                       CAUSAL=causal, num_warps=8)
                err = np.abs(o.astype(np.float64) - ref)
                print(f"exp2 spelling D{dim} causal={causal}: max err {np.nanmax(err):.2e}, "
                      f"{int(np.sum(~(err <= 2e-3 + 2e-2 * np.abs(ref))))} bad")
    else:
        import torch
        import torch.nn.functional as F
        sys.path.insert(0, "benchmarks")
        import common
        reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 20
        for b, h, s, d in ((4, 32, 4096, 128), (16, 16, 1024, 64)):
            for causal in (False, True):
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                row = []
                for name, kernel in SPELLINGS * 2:
                    o = torch.full_like(q, float("nan"))
                    run = lambda: kernel[(tj.cdiv(s, 128), b * h)](q, k, v, o, 1 / d ** 0.5, BM=128, BN=128, BD=d,
                                                                  CAUSAL=causal, num_warps=8)
                    run()
                    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                    assert (o.float() - ref).abs().max().item() < 2e-2, name
                    t = common.time_cuda(run, reps=reps)
                    row.append(f"{name} {flops / t / 1e9:.0f}")
                t = common.time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=reps)
                print(f"B{b} H{h} S{s} D{d} causal={causal}: " + ", ".join(row) + f" TFLOP/s; SDPA {flops / t / 1e9:.0f}")
