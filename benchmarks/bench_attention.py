"""FlashAttention forward (``examples/attention.py``) on torch CUDA tensors against torch SDPA
with the flash (FlashAttention-2) and cuDNN backends, measured in the same run. Target:
≥ 1.0× SDPA flash on all four configurations.

    python3 benchmarks/bench_attention.py [--configs 4x32x4096x128,16x16x1024x64] [--reps 20]
        [--kernel-configs 64x64x4,128x128x8]   (BENCH_EACH=1: every config's figure)

Each output is checked against SDPA (math backend, float32) before it is timed. FLOPs counted as
4·B·H·S²·D (halved for causal), as FlashAttention reports them.
"""
from __future__ import annotations

import argparse
import os
import sys

import common
import tilejit as tj

CONFIGS = [(4, 32, 4096, 128), (16, 16, 1024, 64)]
KERNEL_CONFIGS = [(64, 64, 4), (64, 128, 4), (128, 32, 4), (128, 64, 4), (128, 64, 8), (128, 128, 8)]   # BM, BN, num_warps (64x64x4, 128xNx8: wgmma on sm_90a)


def measure(torch, batch, heads, seq, dim, causal, reps, kernel_configs=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    q, k, v = (common.random_tensor(torch, (batch, heads, seq, dim), torch.bfloat16, seed=s) for s in (1, 2, 3))
    o = torch.empty_like(q)
    flops = 4.0 * batch * heads * seq * seq * dim / (2 if causal else 1)
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    kernel = common.load_example("attention").attention_kernel
    row = {"config": f"B{batch} H{heads} S{seq} D{dim}", "causal": causal}

    def launcher(cfg):
        BM, BN, nw = cfg
        grid = (tj.cdiv(seq, BM), batch * heads)
        return lambda: kernel[grid](q, k, v, o, 1.0 / dim ** 0.5, BM=BM, BN=BN, BD=dim, CAUSAL=causal,
                                    num_warps=nw)
    results = common.sweep(torch, kernel_configs or KERNEL_CONFIGS, launcher, o, ref, 2e-2, reps)
    best = None
    if os.environ.get("BENCH_EACH"):               # every config's figure, not only the best
        for cfg, (t, err) in results.items():
            print(f"  {row['config']} {'causal' if causal else 'full'} {'x'.join(map(str, cfg))}: "
                  f"{flops / t.median_ms / 1e9:.0f} TFLOP/s", file=sys.stderr)
    if results:
        cfg, (t, err) = min(results.items(), key=lambda item: item[1][0].median_ms)
        best = ("x".join(map(str, cfg)), t.median_ms, err)
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                t = common.time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=reps)
            row[name] = flops / t.median_ms / 1e9
        except RuntimeError as e:
            print(f"  SDPA {name}: {e}", file=sys.stderr)
            row[name] = float("nan")
    if best:
        row.update(best=best[0], tilejit=flops / best[1] / 1e9, err=best[2])
        row["vs_flash"], row["vs_cudnn"] = row["tilejit"] / row["flash"], row["tilejit"] / row["cudnn"]
        common.record("attention", row["config"] + (" causal" if causal else ""), "bfloat16", row["tilejit"],
                      "TFLOP/s", "SDPA flash", row["flash"], row["vs_flash"], cudnn=row["cudnn"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join("x".join(map(str, c)) for c in CONFIGS))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--kernel-configs", default=",".join("x".join(map(str, c)) for c in KERNEL_CONFIGS),
                        help="BMxBNxwarps,... to sweep")
    args = parser.parse_args(argv)
    kernel_configs = [tuple(int(v) for v in c.split("x")) for c in args.kernel_configs.split(",")]
    torch = common.cuda_torch()
    if torch is None:
        print("bench_attention: skipped (needs torch with a CUDA GPU)")
        return 0
    rows = [measure(torch, *map(int, c.split("x")), causal, args.reps, kernel_configs)
            for c in args.configs.split(",") for causal in (False, True)]
    common.print_table(rows, [("config", "config", "s"), ("causal", "causal", "s"), ("best", "BMxBNxwarps", "s"),
                              ("tilejit", "tilejit TF/s", ".0f"), ("flash", "SDPA flash TF/s", ".0f"),
                              ("cudnn", "SDPA cuDNN TF/s", ".0f"), ("vs_flash", "tj/flash", ".3f"),
                              ("vs_cudnn", "tj/cuDNN", ".3f"), ("err", "rel err", ".1e")],
                       title=f"attention forward bf16 on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
