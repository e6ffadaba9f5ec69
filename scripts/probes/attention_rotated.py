"""The attention example with each block's QK^T issued one iteration ahead (``rotate_products``)
against float64, on whichever backend runs (the GPU where there is one): D 64 and 128, full and
causal, a ragged length, GQA 4/2, every config given as BMxBNxwarps (default 128x128x8 and
64x128x4), with the switch off and on.

    python3 scripts/probes/attention_rotated.py [SEQ] [BMxBNxwarps ...]"""
import sys

import numpy as np

import tilejit as tj
from tilejit.examples import attention
from tilejit.passes import rotate_products, switches

seq = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
configs = [tuple(int(x) for x in c.split("x")) for c in sys.argv[2:]] or [(128, 128, 8), (64, 128, 4)]
for rotate in (False, True):
    rotate_products.ROTATE = rotate
    switches.changed()                  # (launchers already made re-check their switches)
    for dim in (64, 128):
        q, k, v = attention.example_inputs(np.random.default_rng(dim), batch=2, heads=4, kv_heads=2, seq=seq, dim=dim,
                                           dtype=tj.bfloat16.np)
        for causal in (False, True):
            ref = attention.reference(q, k, v, causal)
            for BM, BN, warps in configs:
                o = np.full_like(q, np.nan)
                grid = (tj.cdiv(seq, BM), q.shape[0] * q.shape[1])
                attention.attention_kernel[grid](q, k, v, o, 1 / np.sqrt(dim), BM=BM, BN=BN, BD=dim, CAUSAL=causal,
                                                 num_warps=warps)
                err = np.abs(o.astype(np.float64) - ref)
                bad = int(np.sum(~(err <= 2e-3 + 2e-2 * np.abs(ref))))
                print(f"rotate={rotate} D{dim} causal={causal} {BM}x{BN}x{warps}: max err {np.nanmax(err):.2e}, "
                      f"{bad} bad", flush=True)
