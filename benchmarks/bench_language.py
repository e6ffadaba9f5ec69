"""The language examples (histogram, EmbeddingBag, top-k, MoE grouped GEMM) on torch CUDA
tensors against torch's own operators, same inputs, same run: CUDA events, warm-up, medians,
outputs poisoned before every run (``common.time_cuda``), each result checked against torch's.

    python3 benchmarks/bench_language.py [--only histogram,histogram_scatter,embedding_bag,topk,moe] [--reps 50]

- histogram: 16M int32 values, 256 bins (some values outside them), counts zeroed and filled
  (both timed) against ``torch.bincount`` of the values inside: ``histogram`` by the example's
  ``run`` (each program counts 16K values privately with ``tj.histogram``, then one
  ``tj.atomic_add`` per bin), ``histogram_scatter`` by an atomic per value;
- embedding_bag: 4096 bags of 0-63 rows of a 100k x 128 float32 table against
  ``F.embedding_bag(mode="sum")``;
- topk: 8192 rows of 1024 float32, k = 8, a bitonic ``tj.sort`` per row against ``torch.topk``;
- moe: 8192 tokens routed to 8 experts, float16 1024 -> 1024, the tokens' gather and scatter in
  the kernel against a loop over experts of ``x[idx] @ w[e]`` (routing done once, untimed, for both).
"""
from __future__ import annotations

import argparse
import sys

import common
import tilejit as tj

COLUMNS = [("case", "case", ""), ("shape", "shape", ""), ("tilejit_us", "tilejit µs", ".1f"),
           ("torch_us", "torch µs", ".1f"), ("ratio", "torch ÷ tilejit", ".2f"), ("reference", "torch op", "")]


def _time(torch, fn, out, reps: int) -> float:
    """Median µs of ``fn()`` with ``out`` poisoned before each run."""
    poison = (lambda: out.fill_(-1)) if not out.is_floating_point() else (lambda: out.fill_(float("nan")))
    return common.time_cuda(fn, setup=poison, reps=reps).median_ms * 1e3


def histogram(torch, reps: int, scatter: bool = False) -> dict:
    """``run``'s kernel (private counts per program, one atomic per bin), or with ``scatter``
    the direct one (an atomic per value)."""
    ex = common.load_example("histogram")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(-16, 272, (1 << 24,), generator=gen, device="cuda", dtype=torch.int32)
    counts = torch.empty(256, dtype=torch.int32, device="cuda")
    inside = x[(x >= 0) & (x < 256)]
    BLOCK = 4096
    meta = ex.blocks(256, x.numel())

    def run():
        counts.zero_()
        if scatter:
            ex.histogram_kernel[(tj.cdiv(x.numel(), BLOCK),)](x, counts, BLOCK=BLOCK)
        else:
            ex.histogram_blocks_kernel[(tj.cdiv(x.numel(), meta["PER_PROGRAM"]),)](x, counts, **meta)
    ref = torch.empty(256, dtype=torch.int64, device="cuda")

    def reference():
        ref.copy_(torch.bincount(inside, minlength=256))
    t = _time(torch, run, counts, reps)
    t_ref = _time(torch, reference, ref, reps)
    assert torch.equal(counts.long(), ref), "histogram differs from torch.bincount"
    return {"case": "histogram (scatter)" if scatter else "histogram", "shape": "16M int32, 256 bins",
            "tilejit_us": t, "torch_us": t_ref, "reference": "torch.bincount"}


def embedding_bag(torch, reps: int) -> dict:
    ex = common.load_example("embedding_bag")
    gen = torch.Generator(device="cuda").manual_seed(1)
    table = common.random_tensor(torch, (100_000, 128), torch.float32, 1)
    sizes = torch.randint(0, 64, (4096,), generator=gen, device="cuda")
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), sizes.cumsum(0)]).to(torch.int32)
    ids = torch.randint(0, 100_000, (int(offsets[-1]),), generator=gen, device="cuda", dtype=torch.int32)
    out = torch.empty((4096, 128), dtype=torch.float32, device="cuda")
    ref = torch.empty_like(out)
    ids64, starts64 = ids.long(), offsets[:-1].long()

    def run():
        ex.embedding_bag_kernel[(4096,)](table, ids, offsets, out, B=16, D=128)

    def reference():
        ref.copy_(torch.nn.functional.embedding_bag(ids64, table, starts64, mode="sum"))
    t = _time(torch, run, out, reps)
    t_ref = _time(torch, reference, ref, reps)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)
    return {"case": "embedding_bag", "shape": "4096 bags of 0-63, 100k x 128", "tilejit_us": t, "torch_us": t_ref,
            "reference": "F.embedding_bag(sum)"}


def topk(torch, reps: int) -> dict:
    ex = common.load_example("topk")
    x = common.random_tensor(torch, (8192, 1024), torch.float32, 2)
    out = torch.empty((8192, 8), dtype=torch.float32, device="cuda")
    ref = torch.empty_like(out)

    def run():
        ex.topk_kernel[(8192,)](x, out, K=8, BLOCK=1024)

    def reference():
        ref.copy_(torch.topk(x, 8, dim=1).values)
    t = _time(torch, run, out, reps)
    t_ref = _time(torch, reference, ref, reps)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    return {"case": "topk", "shape": "8192 x 1024, k 8", "tilejit_us": t, "torch_us": t_ref,
            "reference": "torch.topk"}


def moe(torch, reps: int) -> dict:
    ex = common.load_example("moe_gemm")
    tokens, d, hidden, experts, BM, BN, BK = 8192, 1024, 1024, 8, 64, 128, 64
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = common.random_tensor(torch, (tokens, d), torch.float16, 3)
    w = common.random_tensor(torch, (experts, d, hidden), torch.float16, 4, scale=1 / 32)
    owner = torch.randint(0, experts, (tokens,), generator=gen, device="cuda", dtype=torch.int32)
    token_ids, block_expert = (torch.from_numpy(a).cuda() for a in ex.route(owner.cpu().numpy(), experts, BM))
    out = torch.empty((tokens, hidden), dtype=torch.float32, device="cuda")
    groups = [(e, torch.nonzero(owner == e).flatten()) for e in range(experts)]
    ref = torch.empty_like(out)

    def run():
        ex.moe_kernel[(len(block_expert), tj.cdiv(hidden, BN))](x, w, token_ids, block_expert, out,
                                                               BM=BM, BN=BN, BK=BK, num_warps=4)

    def reference():
        for e, idx in groups:
            ref[idx] = (x[idx] @ w[e]).float()
    t = _time(torch, run, out, reps)
    t_ref = _time(torch, reference, ref, reps)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    return {"case": "moe", "shape": f"{tokens} tokens, {experts} experts, {d}->{hidden}", "tilejit_us": t,
            "torch_us": t_ref, "reference": "per-expert x[idx] @ w[e]"}


CASES = {"histogram": histogram, "histogram_scatter": lambda torch, reps: histogram(torch, reps, scatter=True), "embedding_bag": embedding_bag, "topk": topk, "moe": moe}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    torch = common.require_cuda_torch()
    rows, failed = [], 0
    for name in args.only.split(","):
        try:
            row = CASES[name](torch, args.reps)
        except Exception as err:           # one case failing still reports the others
            failed += 1
            print(f"bench_language: {name} FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        row["ratio"] = row["torch_us"] / row["tilejit_us"]
        common.record("language example", row["shape"], name, row["tilejit_us"], "µs", row["reference"],
                      row["torch_us"], row["ratio"])
        rows.append(row)
    common.print_table(rows, COLUMNS, f"language examples on {common.gpu_name()} (median µs, same run)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
