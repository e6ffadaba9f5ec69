"""FlashAttention forward: softmax(q k^T * scale) v for batch x heads x seq x dim arrays, one
program per (BM rows of one head); keys and values stream through in BN-row blocks with an
online softmax kept in float32. Causal masking is a constexpr; grouped-query attention maps
query head h to key/value head h // (H // H_kv); ragged sequence lengths are masked."""
import numpy as np

import tilejit as tj


@tj.kernel
def attention_kernel(q, k, v, o, scale,
                     BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    block_m = tj.program_id(0)
    if CAUSAL:                                         # longest rows first: a shorter tail of
        block_m = tj.num_programs(0) - 1 - block_m    # short programs at the end of the grid
    start_m = block_m * BM
    heads = q.shape[1]
    batch = tj.program_id(1) // heads
    head = tj.program_id(1) % heads
    kv_head = head // (heads // k.shape[1])
    seq_k = k.shape[2]

    qt = tj.load(q, (batch, head, start_m, 0), (1, 1, BM, BD)).reshape((BM, BD))
    rows = start_m + tj.arange(0, BM)
    m_i = tj.full((BM,), -tj.inf, tj.float32)          # running row maximum
    l_i = tj.zeros((BM,), tj.float32)                  # running softmax denominator
    acc = tj.zeros((BM, BD), tj.float32)
    end = seq_k
    if CAUSAL:
        end = tj.minimum(seq_k, start_m + BM)          # blocks right of the diagonal are all masked
    for start_n in tj.range(0, end, BN, stages=2):     # K/V blocks copied one ahead (cp.async)
        kt = tj.load(k, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, start_n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, tj.trans(kt)) * scale
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        alpha = tj.exp(m_i - m_new)                    # rescales what was summed so far
        p = tj.exp(s - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    out = acc / l_i[:, None]
    tj.store(o, (batch, head, start_m, 0), out.to(o.dtype).reshape((1, 1, BM, BD)))


# block sizes and warps picked per shape on the GPU (the first config on the CPU backends); with
# 16 rows per warp (BM = 16 * num_warps) both DOTs run on Hopper's wgmma, p staying in registers
attention_tuned = tj.autotune(configs=[tj.Config(BM=64, BN=32, num_warps=4),
                                       tj.Config(BM=64, BN=128, num_warps=4),     # wgmma on sm_90a
                                       tj.Config(BM=128, BN=128, num_warps=8),    # wgmma on sm_90a
                                       tj.Config(BM=64, BN=64, num_warps=4),
                                       tj.Config(BM=128, BN=32, num_warps=4),
                                       tj.Config(BM=128, BN=64, num_warps=4),
                                       tj.Config(BM=128, BN=64, num_warps=8)],   # wgmma; D 256's fit
                              key=["q", "k"])(attention_kernel)


def run(q, k, v, causal=False, BM=None, BN=None):
    batch, heads, seq_q, dim = q.shape
    o = np.empty_like(q)
    scale, BD = 1.0 / float(np.sqrt(dim)), tj.next_power_of_2(dim)
    if BM is None:
        grid = lambda meta: (tj.cdiv(seq_q, meta["BM"]), batch * heads)  # noqa: E731
        attention_tuned[grid](q, k, v, o, scale, BD=BD, CAUSAL=causal)
    else:                                                 # by hand: the kernel under the tuner
        grid = (tj.cdiv(seq_q, BM), batch * heads)
        attention_kernel[grid](q, k, v, o, scale, BM=BM, BN=BN or BM, BD=BD, CAUSAL=causal)
    return o


def reference(q, k, v, causal=False):
    heads, kv_heads = q.shape[1], k.shape[1]
    k = np.repeat(k.astype(np.float64), heads // kv_heads, axis=1)
    v = np.repeat(v.astype(np.float64), heads // kv_heads, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k, 2, 3) / np.sqrt(q.shape[3])
    if causal:
        rows, cols = np.arange(s.shape[2])[:, None], np.arange(s.shape[3])[None, :]
        s = np.where(cols <= rows, s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    return (p / p.sum(axis=3, keepdims=True)) @ v


def example_inputs(rng, batch=1, heads=4, kv_heads=2, seq=200, dim=64, dtype=np.float16):
    q = rng.standard_normal((batch, heads, seq, dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    return q, k, v


if __name__ == "__main__":
    q, k, v = example_inputs(np.random.default_rng(0))
    for causal in (False, True):
        out, ref = run(q, k, v, causal), reference(q, k, v, causal)
        tj.testing.assert_close(out, ref)
        print(f"attention {q.shape} kv {k.shape} causal={causal}: max error {np.abs(out - ref).max():.2e}")
