"""A mixture-of-experts grouped GEMM: token t goes to expert e[t]; out[t] = x[t] @ w[e[t]].  The
host sorts the tokens by expert and cuts each expert's tokens into blocks of BM rows (the last
block of an expert is ragged); program (b, n) multiplies block b's rows, gathered from x by an
index tile, with its expert's weight columns, and scatters the rows back to their tokens."""
import numpy as np

import tilejit as tj


@tj.kernel
def moe_kernel(x, w, token_ids, block_expert, out, BM: tj.constexpr, BN: tj.constexpr, BK: tj.constexpr):
    blk = tj.program_id(0)
    n = tj.program_id(1) * BN
    expert = tj.load(block_expert, (blk,), (1,)).reshape(())
    rows = tj.load(token_ids, (blk * BM,), (BM,))                 # -1: padding of a ragged block
    acc = tj.zeros((BM, BN), tj.float32)
    for k in range(0, x.shape[1], BK):
        a = tj.load(x, (rows, k), (BM, BK))                       # gathered token rows
        b = tj.load(w, (expert, k, n), (1, BK, BN)).reshape((BK, BN))
        acc = tj.dot(a, b, acc)
    tj.store(out, (rows, n), acc.to(out.dtype))                   # scattered back (padding: dropped)


def route(experts: np.ndarray, n_experts: int, BM: int):
    """(token_ids, block_expert): the tokens sorted by expert in blocks of BM rows, -1 padded."""
    ids, owners = [], []
    for e in range(n_experts):
        mine = np.nonzero(experts == e)[0]
        for start in range(0, len(mine), BM):
            block = mine[start:start + BM]
            ids.append(np.concatenate([block, np.full(BM - len(block), -1)]))
            owners.append(e)
    return np.concatenate(ids).astype(np.int32), np.array(owners, np.int32)


def run(x, w, experts, BM=32, BN=64, BK=32):
    token_ids, block_expert = route(experts, w.shape[0], BM)
    out = np.zeros((x.shape[0], w.shape[2]), np.float32)
    moe_kernel[(len(block_expert), tj.cdiv(w.shape[2], BN))](x, w, token_ids, block_expert, out, BM=BM, BN=BN, BK=BK)
    return out


def reference(x, w, experts, **_):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    return np.stack([x64[t] @ w64[experts[t]] for t in range(x.shape[0])])


def example_inputs(rng):
    tokens, d, hidden, n_experts = 200, 96, 80, 4
    return (rng.standard_normal((tokens, d)).astype(np.float16),
            (rng.standard_normal((n_experts, d, hidden)) / 8).astype(np.float16),
            rng.integers(0, n_experts, tokens).astype(np.int32))


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    print(f"MoE grouped gemm: {inputs[0].shape[0]} tokens over {inputs[1].shape[0]} experts, max error {np.abs(out - ref).max():.2e}")
