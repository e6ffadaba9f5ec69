"""EmbeddingBag (sum mode): bag ``p`` is the sum of the table rows named by ``ids[offsets[p] :
offsets[p + 1]]``.  Each program gathers its bag's rows with an index tile as the row offset
(``tj.load(table, (rows, 0), (B, D))``), up to B ids at a time, and sums them in float32."""
import numpy as np

import tilejit as tj


@tj.kernel
def embedding_bag_kernel(table, ids, offsets, out, B: tj.constexpr, D: tj.constexpr):
    p = tj.program_id(0)
    start = tj.load(offsets, (p,), (1,)).reshape(())
    end = tj.load(offsets, (p + 1,), (1,)).reshape(())
    acc = tj.zeros((D,), tj.float32)
    for i in range(start, end, B):
        pos = tj.arange(0, B) + i
        rows = tj.load(ids, (i,), (B,), other=-1)
        rows = tj.where(pos < end, rows, -1)                      # ids of the next bag: not ours
        acc += tj.sum(tj.load(table, (rows, 0), (B, D)).to(tj.float32), axis=0)
    tj.store(out, (p, 0), acc[None, :].to(out.dtype))


def run(table, ids, offsets, B=16):
    out = np.empty((offsets.size - 1, table.shape[1]), table.dtype)
    embedding_bag_kernel[(offsets.size - 1,)](table, ids, offsets, out, B=B, D=tj.next_power_of_2(table.shape[1]))
    return out


def reference(table, ids, offsets, **_):
    t = table.astype(np.float64)
    return np.stack([t[ids[a:b]].sum(axis=0) for a, b in zip(offsets[:-1], offsets[1:])])


def example_inputs(rng):
    table = rng.standard_normal((1000, 96)).astype(np.float32)
    sizes = rng.integers(0, 40, 64)                               # empty bags too
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    ids = rng.integers(0, 1000, offsets[-1]).astype(np.int32)
    return table, ids, offsets


if __name__ == "__main__":
    inputs = example_inputs(np.random.default_rng(0))
    out, ref = run(*inputs), reference(*inputs)
    tj.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    print(f"embedding bag: {inputs[2].size - 1} bags over a {inputs[0].shape} table, max error {np.abs(out - ref).max():.2e}")
