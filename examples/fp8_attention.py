"""FlashAttention forward in float8, as in fp8 inference: q, k and v stored as float8 e4m3, each
with one float32 scale (x ≈ x8 * scale), v transposed in memory (batch, kv heads, dim, seq), so
that both products read K-major operands, as float8 tensor cores want them.  The softmax runs in
float32; its probabilities (in [0, 1]) are rounded to e4m3 for the second product, and the
scales are applied once: to the scores (``scale_q * scale_k / sqrt(d)``) and to the output
(``scale_v``).  GQA and causal masking as in ``examples/attention.py``; the key loop is a plain
``range``: the compiler pipelines it."""
import numpy as np

import tilejit as tj

E4M3_MAX = 448.0        # the largest finite float8 e4m3 value


@tj.kernel
def fp8_attention_kernel(q, k, vt, o, score_scale, scale_v,
                         BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr, CAUSAL: tj.constexpr):
    start_m = tj.program_id(0) * BM
    heads = q.shape[1]
    batch = tj.program_id(1) // heads
    head = tj.program_id(1) % heads
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
        v_block = tj.load(vt, (batch, kv_head, 0, start_n), (1, 1, BD, BN)).reshape((BD, BN)).T    # (BN, BD), K-major
        s = tj.dot(qt, kt.T) * score_scale
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        alpha = tj.exp(m_i - m_new)
        p = tj.exp(s - m_new[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(tj.float8e4m3), v_block)
        m_i = m_new
    out = acc * (scale_v / l_i)[:, None]
    tj.store(o, (batch, head, start_m, 0), out.to(o.dtype).reshape((1, 1, BM, BD)))


def quantize(x):
    """``x`` (float32) as (float8 e4m3 values, their per-tensor float32 scale)."""
    scale = float(np.abs(x).max()) / E4M3_MAX or 1.0
    return (x / scale).astype(tj.float8e4m3.np), np.float32(scale)


def run(q8, k8, vt8, scale_q, scale_k, scale_v, causal=False, BM=64, BN=64, num_warps=8):
    """bfloat16 attention of the float8 ``q8``, ``k8`` and transposed ``vt8``.  The default tile
    (64 x 64, 8 warps) takes ``mma.sync`` for both products and fits the registers (ptxas for
    sm_90a: no spills); 4 warps of 64 rows take wgmma for q k^T but spill, as the float8
    probabilities do not yet feed wgmma from registers."""
    batch, heads, seq_q, dim = q8.shape
    o = np.empty((batch, heads, seq_q, dim), tj.bfloat16.np)
    score_scale = float(scale_q) * float(scale_k) / float(np.sqrt(dim))
    fp8_attention_kernel[(tj.cdiv(seq_q, BM), batch * heads)](q8, k8, vt8, o, score_scale, float(scale_v), BM=BM,
                                                              BN=BN, BD=tj.next_power_of_2(dim), CAUSAL=causal,
                                                              num_warps=num_warps)
    return o


def reference(q8, k8, vt8, scale_q, scale_k, scale_v, causal=False, **_):
    """float64 attention of the dequantised inputs (the probabilities not rounded)."""
    heads, kv_heads = q8.shape[1], k8.shape[1]
    q = q8.astype(np.float64) * float(scale_q)
    k = np.repeat(k8.astype(np.float64) * float(scale_k), heads // kv_heads, axis=1)
    v = np.repeat(np.swapaxes(vt8.astype(np.float64), 2, 3) * float(scale_v), heads // kv_heads, axis=1)
    s = q @ np.swapaxes(k, 2, 3) / np.sqrt(q.shape[3])
    if causal:
        rows, cols = np.arange(s.shape[2])[:, None], np.arange(s.shape[3])[None, :]
        s = np.where(cols <= rows, s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    return (p / p.sum(axis=3, keepdims=True)) @ v


def example_inputs(rng, batch=1, heads=4, kv_heads=2, seq=200, dim=64):
    q8, sq = quantize(rng.standard_normal((batch, heads, seq, dim)).astype(np.float32))
    k8, sk = quantize(rng.standard_normal((batch, kv_heads, seq, dim)).astype(np.float32))
    vt8, sv = quantize(rng.standard_normal((batch, kv_heads, dim, seq)).astype(np.float32))
    return q8, k8, vt8, sq, sk, sv


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    for causal in (False, True):
        out = run(*inputs, causal=causal).astype(np.float64)
        ref = reference(*inputs, causal=causal)
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        assert err < 5e-2, err
        print(f"fp8 attention {inputs[0].shape} causal={causal}: relative error {err:.2e} (e4m3 inputs, "
              "e4m3 probabilities)")
