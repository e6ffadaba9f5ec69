"""FlashAttention backward (``examples/attention_backward.py``: delta, dK/dV and dQ kernels) on
torch CUDA tensors against SDPA flash's backward, and forward + backward against SDPA flash's,
measured in the same run. Targets: backward ≥ 1.0× SDPA flash backward, forward + backward
≥ 1.0× SDPA flash, at B4 H32 S4096 D128 and B16 H16 S1024 D64, causal and full.

    python3 benchmarks/bench_attention_backward.py [--configs 4x32x4096x128,16x16x1024x64] [--reps 10]
        [--kernel-configs 32x64x4/64x64x4,32x128x8/128x64x8]   (BENCH_EACH=1: every config's time)

A dQ config ``atomic`` (``64x64x4/atomic``) has the dK/dV kernel add dQ atomically
(``backward(dq_config="atomic")``: all five DOTs on wgmma where BN = D = 16 * warps).
``BWD_PDL=1`` / ``=0``: the three kernels with programmatic dependent launch or plainly (unset:
the example's ``DEPENDENT_LAUNCH``).

A kernel config is ``BMxBNxwarps`` of the dK/dV kernel, then ``/`` and the dQ kernel's (which
wants its 16 rows a warp along BM where dK/dV wants them along BN); the forward of the
forward + backward timing runs at ``FORWARD`` (128 x 128, 8 warps: wgmma, warp-specialised).

The gradients are checked against SDPA's (math backend, float32) before timing. FLOPs counted
as FlashAttention reports them: backward 2.5× the forward's 4·B·H·S²·D (halved for causal).
"""
from __future__ import annotations

import argparse
import os
import sys

import common

CONFIGS = [(4, 32, 4096, 128), (16, 16, 1024, 64)]
# (dK/dV BM, BN, num_warps), (dQ BM, BN, num_warps): each DOT on wgmma from TMA rings on sm_90a
# (ptxas, whole: no spills but 64x128x8 at D128, 416 bytes)
KERNEL_CONFIGS = [((32, 64, 4), (64, 64, 4)), ((32, 128, 8), (128, 64, 8)), ((32, 64, 4), (128, 64, 8)),
                  ((64, 128, 8), (128, 64, 8)), ((64, 128, 8), (128, 128, 8)), ((64, 128, 8), "atomic"),
                  ((32, 128, 8), "atomic")]     # (64 x 128 + 128 x 128: the torch op's at D64, backward_tiles)
FORWARD = {"BM": 128, "BN": 128, "num_warps": 8}


def measure(torch, batch, heads, seq, dim, causal, reps, kernel_configs):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    ab = common.load_example("attention_backward")
    q, k, v, do = (common.random_tensor(torch, (batch, heads, seq, dim), torch.bfloat16, seed=s) for s in (1, 2, 3, 4))
    forward_flops = 4.0 * batch * heads * seq * seq * dim / (2 if causal else 1)
    with sdpa_kernel(SDPBackend.MATH):
        qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
        ref_o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
        ref = torch.autograd.grad(ref_o, (qf, kf, vf), do.float())
    row = {"config": f"B{batch} H{heads} S{seq} D{dim}", "causal": causal}

    def empty(shape, dtype):
        import numpy as np
        return torch.empty(shape, device="cuda", dtype={np.float32: torch.float32}.get(dtype, dtype))
    best = None
    for (BM, BN, nw), dq_config in kernel_configs:
        label = f"{BM}x{BN}x{nw}/" + (dq_config if dq_config == "atomic" else "x".join(map(str, dq_config)))
        tiles = dict(BM=BM, BN=BN, num_warps=nw, dq_config=dq_config,
                     dependent_launch={"1": True, "0": False}.get(os.environ.get("BWD_PDL", "")))
        try:
            o, lse = ab.forward(q, k, v, causal, empty=empty, **FORWARD)
            grads = ab.backward(q, k, v, o, lse, do, causal, empty=empty, **tiles)
            torch.cuda.synchronize()
            err = max(common.relative_error(torch, g.float(), r) for g, r in zip(grads, ref))
            if not err < 3e-2:
                print(f"  config {label}: WRONG (rel err {err:.2e})", file=sys.stderr)
                continue
            t = common.time_cuda(lambda: ab.backward(q, k, v, o, lse, do, causal, empty=empty, **tiles), reps=reps)
            both = common.time_cuda(lambda: ab.backward(q, k, v, *ab.forward(q, k, v, causal, empty=empty, **FORWARD),
                                                        do, causal, empty=empty, **tiles), reps=reps)
        except Exception as e:                       # a config the compiler refuses: reported, left out
            print(f"  config {label}: dropped: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        if os.environ.get("BENCH_EACH"):
            print(f"  backward {batch}x{heads}x{seq}x{dim}{' causal' if causal else ''} {label}: "
                  f"{t.median_ms * 1e3:.1f} us, with the forward {both.median_ms * 1e3:.1f} us", file=sys.stderr)
        if best is None or t.median_ms < best[1]:
            best = (label, t.median_ms, both.median_ms, err)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        flash_bwd = common.time_cuda(lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True), reps=reps)
        flash_both = common.time_cuda(lambda: torch.autograd.grad(
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal), (qg, kg, vg), do), reps=reps)
    row["flash_bwd"] = 2.5 * forward_flops / flash_bwd.median_ms / 1e9
    row["flash_both"] = 3.5 * forward_flops / flash_both.median_ms / 1e9
    if best:
        row.update(best=best[0], bwd=2.5 * forward_flops / best[1] / 1e9, both=3.5 * forward_flops / best[2] / 1e9,
                   err=best[3])
        row["vs_bwd"], row["vs_both"] = row["bwd"] / row["flash_bwd"], row["both"] / row["flash_both"]
        common.record("attention backward", row["config"] + (" causal" if causal else ""), "bfloat16", row["bwd"],
                      "TFLOP/s", "SDPA flash backward", row["flash_bwd"], row["vs_bwd"], fwd_bwd_ratio=row["vs_both"])
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join("x".join(map(str, c)) for c in CONFIGS))
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--kernel-configs", default=",".join("/".join(t if isinstance(t, str) else "x".join(map(str, t))
                                                                      for t in c) for c in KERNEL_CONFIGS),
                        help="dK/dV BMxBNxwarps / dQ BMxBNxwarps,... to sweep")
    args = parser.parse_args(argv)
    kernel_configs = []
    for c in args.kernel_configs.split(","):
        dkdv, _, dq = c.partition("/")
        dkdv = tuple(int(v) for v in dkdv.split("x"))
        kernel_configs.append((dkdv, "atomic" if dq == "atomic" else tuple(int(v) for v in dq.split("x")) if dq else dkdv))
    torch = common.cuda_torch()
    if torch is None:
        print("bench_attention_backward: skipped (needs torch with a CUDA GPU)")
        return 0
    rows = [measure(torch, *map(int, c.split("x")), causal, args.reps, kernel_configs)
            for c in args.configs.split(",") for causal in (False, True)]
    common.print_table(rows, [("config", "config", "s"), ("causal", "causal", "s"), ("best", "dK/dV / dQ tiles", "s"),
                              ("bwd", "tilejit bwd TF/s", ".0f"), ("flash_bwd", "flash bwd TF/s", ".0f"),
                              ("vs_bwd", "tj/flash bwd", ".3f"), ("both", "tj fwd+bwd TF/s", ".0f"),
                              ("flash_both", "flash fwd+bwd TF/s", ".0f"), ("vs_both", "tj/flash fwd+bwd", ".3f"),
                              ("err", "rel err", ".1e")],
                       title=f"attention backward bf16 on {common.gpu_name()} (CUDA events, median, L2 flushed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
