"""Split-KV decode attention (``examples/decode_attention.py``, both kernels timed) against torch
SDPA's flash and cuDNN backends (``enable_gqa=True``: the cache read once, as the example reads
it) on the same inputs, and against copy bandwidth: K and V bytes over the time.

    python3 benchmarks/bench_decode.py [--seqs 8192,65536] [--configs 1024x64x4,...] [--reps 30]
                                       [--page 64]

``--page P`` times the paged kernel instead (``run_paged``): the cache cut into pages of P
positions, shuffled in one pool, read through a block table; each config's BN is then P.
``--fused`` times the one-launch form (``run(fused=True)``: the last slice of each head merges).
``DECODE_GATHER_COMBINE=1`` / ``=0`` times the second kernel that reads every slice at once /
the loop over slices (unset: the example's choice, ``run(gather_combine=None)``).
``DECODE_PDL=1`` / ``=0``: the second kernel launched with programmatic dependent launch or
plainly (unset: the example's ``DEPENDENT_LAUNCH``).

Shape: batch 8, 32 query heads, 8 KV heads, D 128, one query token (``--window``), bf16.
Each output is checked against SDPA's math backend in float32 before it is timed.
"""
from __future__ import annotations

import argparse
import os
import sys

import common

CONFIGS = [(512, 64, 4), (1024, 64, 4), (2048, 64, 4), (4096, 64, 4), (8192, 64, 4), (16384, 64, 4), (32768, 64, 4),
           (16384, 32, 4), (1024, 128, 4), (2048, 128, 4), (4096, 128, 4), (8192, 128, 4), (1024, 64, 8),
           (2048, 128, 8)]          # SPLIT (cache positions per program), BN, num_warps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqs", default="8192,65536")
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--configs", default=",".join("x".join(map(str, c)) for c in CONFIGS))
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--page", type=int, default=0, help="time the paged kernel with pages of this many positions")
    parser.add_argument("--fused", action="store_true", help="one launch: the last slice of each head merges")
    args = parser.parse_args(argv)
    torch = common.cuda_torch()
    if torch is None:
        print("bench_decode: needs torch with a CUDA device")
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    ex = common.load_example("decode_attention")
    copy_gbps = common.copy_gbps(torch, args.reps)
    print(f"{common.gpu_name()}: copy {copy_gbps:.0f} GB/s")
    batch, heads, kv_heads, dim, window = 8, 32, 8, 128, args.window
    rows = []
    for seq in (int(s) for s in args.seqs.split(",")):
        q = common.random_tensor(torch, (batch, heads, window, dim), torch.bfloat16, seed=1)
        k = common.random_tensor(torch, (batch, kv_heads, seq, dim), torch.bfloat16, seed=2)
        v = common.random_tensor(torch, (batch, kv_heads, seq, dim), torch.bfloat16, seed=3)
        kv_bytes = 2 * k.numel() * k.element_size()
        mask = None
        if window > 1:                       # row i sees the cache up to seq - window + i
            rows_i = torch.arange(window, device="cuda")[:, None]
            mask = torch.arange(seq, device="cuda")[None, :] <= seq - window + rows_i
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
        out = torch.empty_like(q)
        refs = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    out.copy_(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))
            try:
                common.checked(torch, sdpa, out, lambda: ref, 2e-2, f"SDPA {name}")
                refs[name] = common.time_cuda(sdpa, reps=args.reps).median_ms
            except Exception as e:          # a backend that refuses the shape: report without it
                print(f"  SDPA {name}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        paged = to_pages(torch, k, v, args.page) if args.page else None
        # the second kernel: unset, the example's choice; 1: every slice at once; 0: the loop
        gather = {"1": True, "0": False}.get(os.environ.get("DECODE_GATHER_COMBINE", ""))
        # programmatic dependent launch of the second kernel: unset, the example's choice; 1 / 0
        dependent = {"1": True, "0": False}.get(os.environ.get("DECODE_PDL", ""))
        best = None
        for cfg in (tuple(int(x) for x in c.split("x")) for c in args.configs.split(",") if c):
            split, bn, warps = cfg
            blk = args.page or bn
            ns = ex.splits_for(seq, max(blk, split // blk * blk))
            parts = (torch.empty((ns * batch, heads, window, dim), device="cuda", dtype=torch.float32),
                     torch.empty((ns * batch, heads, window), device="cuda", dtype=torch.float32))

            count = ex.counts(q, kv_heads) if args.fused else None

            def launch(split=split, bn=bn, warps=warps, parts=parts, count=count):
                if paged is None:
                    ex.run(q, k, v, split=split, BN=bn, num_warps=warps, parts=parts, out=out, fused=args.fused,
                           count=count, gather_combine=gather, dependent_launch=dependent)
                else:
                    ex.run_paged(q, *paged, split=split, num_warps=warps, max_seq=seq, parts=parts, out=out,
                                 fused=args.fused, count=count, gather_combine=gather, dependent_launch=dependent)
            try:
                common.checked(torch, launch, out, lambda: ref, 2e-2, f"decode {seq} {cfg}")
            except Exception as e:
                print(f"  config {cfg}: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)
                continue
            ms = common.time_cuda(launch, reps=args.reps).median_ms
            if os.environ.get("BENCH_EACH"):
                print(f"  decode S{seq} {'x'.join(map(str, cfg))}: {ms * 1e3:.1f} us", file=sys.stderr)
            if best is None or ms < best[0]:
                best = (ms, "x".join(map(str, cfg)))
        if best is None:
            print(f"decode S{seq}: no config ran")
            continue
        faster = min(refs.values()) if refs else float("nan")
        row = {"seq": seq, "config": best[1], "us": best[0] * 1e3,
               "flash": refs.get("flash", float("nan")) * 1e3, "cudnn": refs.get("cudnn", float("nan")) * 1e3,
               "vs_best": faster / best[0], "copy": kv_bytes / (best[0] * 1e-3) / 1e9 / copy_gbps,
               "ref_copy": kv_bytes / (faster * 1e-3) / 1e9 / copy_gbps}
        rows.append(row)
        common.record("decode attention" + (f" paged {args.page}" if args.page else ""),
                      f"B8 H32 Hkv8 S{seq} D128 L{window}", "bfloat16", row["us"], "us",
                      "faster SDPA", faster * 1e3, row["vs_best"])
    common.print_table(rows, [("seq", "KV length", "d"), ("config", "SPLITxBNxwarps", "s"), ("us", "tilejit us", ".1f"),
                              ("flash", "SDPA flash us", ".1f"), ("cudnn", "SDPA cuDNN us", ".1f"),
                              ("vs_best", "vs faster SDPA", ".3f"), ("copy", "K/V of copy", ".3f"),
                              ("ref_copy", "SDPA K/V of copy", ".3f")],
                       title=f"decode attention{f' (pages of {args.page})' if args.page else ''}{' (one launch)' if args.fused else ''} bf16 B8 H32 Hkv8 D128 L{window} on {common.gpu_name()} "
                             "(CUDA events, median, L2 flushed; both kernels timed)")
    return 0


def to_pages(torch, k, v, page):
    """The caches (B, H_kv, S, D) as a shuffled pool of pages (pages, H_kv, page, D) with the
    block table (B, S / page) int32 and the lengths (B,) int32 (S a multiple of ``page``)."""
    batch, kv_heads, seq, dim = k.shape
    per = seq // page
    gen = torch.Generator(device="cuda").manual_seed(4)
    order = torch.randperm(batch * per, device="cuda", generator=gen)       # pool slot -> (b, j)
    pool = [t.reshape(batch, kv_heads, per, page, dim).permute(0, 2, 1, 3, 4).reshape(batch * per, kv_heads, page, dim)
            [order].contiguous() for t in (k, v)]
    table = torch.empty(batch * per, dtype=torch.int32, device="cuda")
    table[order] = torch.arange(batch * per, dtype=torch.int32, device="cuda")
    lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    return pool[0], pool[1], table.reshape(batch, per), lens


if __name__ == "__main__":
    sys.exit(main())
