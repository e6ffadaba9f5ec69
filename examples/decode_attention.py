"""Split-KV decode attention (FlashDecoding): a few query rows per sequence (a decode step, or
a short speculative window of ``L`` tokens) against a long key/value cache, with grouped-query
attention.  One program takes one key/value head of one sequence, all ``GROUP`` query heads that
share it (``GROUP * L`` rows of one tensor-core tile), and one slice of ``SPLIT`` cache
positions: the cache is read once, by enough programs to fill the GPU.  Each program keeps an
online softmax over its slice and writes its partial output (normalised) and log-sum-exp; a
second kernel merges the slices per query row:

    o = sum_s exp(lse_s - lse) * o_s,   lse = log(sum_s exp(lse_s))

Shapes: q (B, H, L, D), k and v (B, H_kv, S, D), H = GROUP * H_kv; partial outputs
(NS * B, H, L, D) and log-sum-exps (NS * B, H, L) in float32, NS = ceil(S / SPLIT) (no slice
is empty).  Causal masking inside the window: query row i (of L) sees cache positions up to
S - L + i, as the last L tokens of the cache are the window's own."""
import numpy as np

import tilejit as tj


@tj.kernel
def decode_split_kernel(q, k, v, o_part, lse_part, scale, GROUP: tj.constexpr, BL: tj.constexpr,
                        BN: tj.constexpr, BD: tj.constexpr, SPLIT: tj.constexpr):
    split = tj.program_id(0)
    kv_heads = k.shape[1]
    batch = tj.program_id(1) // kv_heads
    kv_head = tj.program_id(1) % kv_heads
    seq, window = k.shape[2], q.shape[2]
    head = kv_head * GROUP
    qt = tj.load(q, (batch, head, 0, 0), (1, GROUP, BL, BD)).reshape((GROUP * BL, BD))
    # row r is query position r % BL of head r // BL; it sees keys up to seq - window + r % BL
    last = seq - window + tj.arange(0, GROUP * BL) % BL
    start = split * SPLIT
    end = tj.minimum(start + SPLIT, seq)
    m_i = tj.full((GROUP * BL,), -tj.inf, tj.float32)
    l_i = tj.zeros((GROUP * BL,), tj.float32)
    acc = tj.zeros((GROUP * BL, BD), tj.float32)
    for n in range(start, end, BN):
        kt = tj.load(k, (batch, kv_head, n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (batch, kv_head, n, 0), (1, 1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, tj.trans(kt)) * scale
        cols = n + tj.arange(0, BN)
        s = tj.where((cols[None, :] < end) & (cols[None, :] <= last[:, None]), s, -tj.inf)
        m_new = tj.maximum(m_i, tj.max(s, axis=1))
        safe = tj.where(m_new == -tj.inf, 0.0, m_new)           # a row that sees nothing yet
        alpha = tj.exp(m_i - safe)
        p = tj.exp(s - safe[:, None])
        l_i = l_i * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m_i = m_new
    seen = l_i > 0
    out = acc / tj.where(seen, l_i, 1.0)[:, None]
    lse = tj.where(seen, m_i + tj.log(tj.where(seen, l_i, 1.0)), -tj.inf)
    row = split * q.shape[0] + batch
    tj.store(o_part, (row, head, 0, 0), out.reshape((1, GROUP, BL, BD)))
    tj.store(lse_part, (row, head, 0), lse.reshape((1, GROUP, BL)))


@tj.kernel
def decode_combine_kernel(o_part, lse_part, o, BL: tj.constexpr, BD: tj.constexpr):
    heads = o.shape[1]
    batch = tj.program_id(0) // heads
    head = tj.program_id(0) % heads
    splits = o_part.shape[0] // o.shape[0]
    m = tj.full((BL,), -tj.inf, tj.float32)
    total = tj.zeros((BL,), tj.float32)
    acc = tj.zeros((BL, BD), tj.float32)
    for s in range(splits):
        row = s * o.shape[0] + batch
        lse = tj.load(lse_part, (row, head, 0), (1, 1, BL), other=-tj.inf).reshape((BL,))
        part = tj.load(o_part, (row, head, 0, 0), (1, 1, BL, BD)).reshape((BL, BD))
        m_new = tj.maximum(m, lse)
        safe = tj.where(m_new == -tj.inf, 0.0, m_new)
        alpha = tj.exp(m - safe)
        w = tj.exp(lse - safe)
        total = total * alpha + w
        acc = acc * alpha[:, None] + part * w[:, None]
        m = m_new
    out = acc / tj.where(total > 0, total, 1.0)[:, None]
    tj.store(o, (batch, head, 0, 0), out.to(o.dtype).reshape((1, 1, BL, BD)))


def splits_for(seq: int, split: int) -> int:
    return tj.cdiv(seq, split)


def run(q, k, v, split=1024, BN=64, num_warps=4, parts=None, out=None):
    """The decode attention of ``q`` against the cache ``k``, ``v`` (NumPy arrays or device
    tensors; ``parts``: preallocated (o_part, lse_part) float32 buffers, ``out`` the output's,
    e.g. torch tensors)."""
    batch, heads, window, dim = q.shape
    kv_heads, seq = k.shape[1], k.shape[2]
    group = heads // kv_heads
    BL = max(tj.next_power_of_2(window), 16 // min(group, 16))          # GROUP * BL >= 16 rows
    BD = tj.next_power_of_2(dim)
    split = max(BN, split // BN * BN)
    ns = splits_for(seq, split)
    if parts is None:
        parts = (np.empty((ns * batch, heads, window, dim), np.float32),
                 np.empty((ns * batch, heads, window), np.float32))
    o_part, lse_part = parts
    if out is None:
        out = np.empty_like(q) if isinstance(q, np.ndarray) else q.new_empty(q.shape)
    scale = 1.0 / float(np.sqrt(dim))
    decode_split_kernel[(ns, batch * kv_heads)](q, k, v, o_part, lse_part, scale, GROUP=group, BL=BL, BN=BN,
                                                BD=BD, SPLIT=split, num_warps=num_warps)
    decode_combine_kernel[(batch * heads,)](o_part, lse_part, out, BL=tj.next_power_of_2(window), BD=BD)
    return out


def reference(q, k, v, **_):
    """float64: query row i of the window sees cache positions up to S - L + i."""
    heads, kv_heads, window, seq = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k = np.repeat(k.astype(np.float64), heads // kv_heads, axis=1)
    v = np.repeat(v.astype(np.float64), heads // kv_heads, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k, 2, 3) / np.sqrt(q.shape[3])
    rows, cols = np.arange(window)[:, None], np.arange(seq)[None, :]
    s = np.where(cols <= seq - window + rows, s, -np.inf)
    p = np.exp(s - s.max(axis=3, keepdims=True))
    return (p / p.sum(axis=3, keepdims=True)) @ v


def example_inputs(rng, batch=2, heads=8, kv_heads=2, window=1, seq=700, dim=64, dtype=tj.bfloat16.np):
    q = rng.standard_normal((batch, heads, window, dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, seq, dim)).astype(dtype)
    return q, k, v


if __name__ == "__main__":
    q, k, v = example_inputs(np.random.default_rng(0))
    out, ref = run(q, k, v, split=256), reference(q, k, v)
    tj.testing.assert_close(out, ref, dtype=tj.bfloat16)
    print(f"decode attention q {q.shape} kv {k.shape}, splits of 256: max error {np.abs(out - ref).max():.2e}")
