"""Tutorial 5: attention. The one idea: *carried state* across a loop. FlashAttention never
forms the S x S score matrix: it streams key/value blocks and keeps, per query row, a running
maximum ``m``, a running denominator ``l`` and a running output ``acc`` (the online softmax).

    python3 tutorials/05_attention.py

- Two DOTs per iteration: scores ``q @ k.T`` and the update ``p @ v``. ``k.T`` (or
  ``tj.trans(k)``) is free: the compiler reads k transposed.
- When a new block raises a row's maximum, what was summed so far is rescaled by
  ``exp(m_old - m_new)``.
- ``CAUSAL`` is a constexpr: the masking code is compiled in only when asked, and the loop stops
  at the diagonal.
"""
import numpy as np

import tilejit as tj


@tj.kernel
def attention_kernel(q, k, v, o, scale: tj.constexpr, BM: tj.constexpr, BN: tj.constexpr, BD: tj.constexpr,
                     CAUSAL: tj.constexpr):
    start_m = tj.program_id(0) * BM
    bh = tj.program_id(1)                                     # one (batch, head) pair per program row
    qt = tj.load(q, (bh, start_m, 0), (1, BM, BD)).reshape((BM, BD))
    rows = start_m + tj.arange(0, BM)
    m = tj.full((BM,), -tj.inf, tj.float32)
    l = tj.zeros((BM,), tj.float32)
    acc = tj.zeros((BM, BD), tj.float32)
    end = k.shape[1]
    if CAUSAL:
        end = tj.minimum(end, start_m + BM)
    for start_n in range(0, end, BN):
        kt = tj.load(k, (bh, start_n, 0), (1, BN, BD)).reshape((BN, BD))
        vt = tj.load(v, (bh, start_n, 0), (1, BN, BD)).reshape((BN, BD))
        s = tj.dot(qt, kt.T) * scale
        cols = start_n + tj.arange(0, BN)
        keep = cols[None, :] < k.shape[1]
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        s = tj.where(keep, s, -tj.inf)
        m_new = tj.maximum(m, tj.max(s, axis=1))
        p = tj.exp(s - m_new[:, None])
        alpha = tj.exp(m - m_new)
        l = l * alpha + tj.sum(p, axis=1)
        acc = acc * alpha[:, None] + tj.dot(p.to(vt.dtype), vt)
        m = m_new
    tj.store(o, (bh, start_m, 0), (acc / l[:, None]).to(o.dtype).reshape((1, BM, BD)))


def attention(q, k, v, causal=False, BM=32, BN=32):
    o = np.empty_like(q)
    bh, seq, dim = q.shape
    attention_kernel[(tj.cdiv(seq, BM), bh)](q, k, v, o, scale=1.0 / float(np.sqrt(dim)), BM=BM, BN=BN,
                                            BD=tj.next_power_of_2(dim), CAUSAL=causal)
    return o


def main():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 150, 64)).astype(np.float16) for _ in range(3))
    for causal in (False, True):
        s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / 8.0
        if causal:
            s = np.where(np.tril(np.ones((150, 150), bool)), s, -np.inf)
        p = np.exp(s - s.max(axis=2, keepdims=True))
        want = (p / p.sum(axis=2, keepdims=True)) @ v.astype(np.float64)
        out = attention(q, k, v, causal)
        tj.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
        print(f"attention {q.shape} causal={causal}: max error {np.abs(out - want).max():.1e}")


if __name__ == "__main__":
    main()
