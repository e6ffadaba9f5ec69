"""GPU probe: ``examples/fp8_attention.py`` at its tile configs (the 16-rows-a-warp ones, whose
q k^T takes float8 wgmma, build for sm_90a since session 22), each checked against the float32
attention of the dequantised inputs before it is timed, against SDPA bfloat16 (flash) on the same
inputs.  B4 H32 S4096 D128 by default.

    python3 scripts/probes/fp8_attention_configs.py [--seq 4096] [--causal]"""
import argparse
import sys

sys.path.insert(0, "benchmarks")
import common  # noqa: E402
import tilejit as tj  # noqa: E402

CONFIGS = [(64, 64, 8), (64, 64, 4), (128, 64, 8), (128, 128, 8)]        # BM, BN, num_warps


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    torch = common.cuda_torch()
    ex = common.load_example("fp8_attention")
    b, h, s, d = 4, 32, args.seq, 128
    q, k, v = (common.random_tensor(torch, (b, h, s, d), torch.float32, seed=i) for i in (1, 2, 3))
    scales = [float(x.abs().max()) / ex.E4M3_MAX for x in (q, k, v)]
    q8, k8, v8 = ((x / sc).to(torch.float8_e4m3fn) for x, sc in zip((q, k, v), scales))
    vt8 = v8.transpose(2, 3).contiguous()
    o = torch.empty((b, h, s, d), device="cuda", dtype=torch.bfloat16)
    qd, kd, vd = (x8.float() * sc for x8, sc in zip((q8, k8, v8), scales))
    ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=args.causal)
    flops = 4 * b * h * s * s * d / (2 if args.causal else 1)
    qb, kb, vb = (x.to(torch.bfloat16) for x in (qd, kd, vd))
    sdpa = common.time_cuda(lambda: torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=args.causal),
                            reps=args.reps).median_ms
    print(f"SDPA bf16 {flops / sdpa / 1e9:.0f} TFLOP/s")
    score_scale = scales[0] * scales[1] / d ** 0.5
    for bm, bn, w in CONFIGS:
        def launch(bm=bm, bn=bn, w=w):
            ex.fp8_attention_kernel[(tj.cdiv(s, bm), b * h)](q8, k8, vt8, o, score_scale, scales[2], BM=bm, BN=bn,
                                                             BD=d, CAUSAL=args.causal, num_warps=w)
        err = common.checked(torch, launch, o, lambda: ref, 5e-2, f"{bm}x{bn}x{w}")
        ms = common.time_cuda(launch, reps=args.reps).median_ms
        print(f"fp8 attention {bm}x{bn}x{w}: {flops / ms / 1e9:.0f} TFLOP/s ({sdpa / ms:.2f}x SDPA bf16), rel err {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
