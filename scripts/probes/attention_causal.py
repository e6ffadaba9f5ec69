"""Which attention configs are wrong on this GPU: the demo's inputs (1x4x200x64, GQA 4/2, fp16),
every config of examples/attention.py's tuner, causal and full, under each switch given on the
command line (NAME=VALUE, e.g. TILEJIT_WS=0); prints the max error against float64 and the config
the tuner picks."""
import os
import sys

import numpy as np

import tilejit as tj
from tilejit.examples import attention

q, k, v = attention.example_inputs(np.random.default_rng(0))
switches = [dict(kv.split("=", 1) for kv in arg.split(",")) if arg != "-" else {} for arg in sys.argv[1:]] or [{}]
for env in switches:
    os.environ.update(env)
    for causal in (False, True):
        ref = attention.reference(q, k, v, causal)
        for config in attention.attention_tuned.configs:
            meta = dict(config.constexprs)
            BM, BN = meta["BM"], meta["BN"]
            o = np.full_like(q, np.nan)
            grid = (tj.cdiv(q.shape[2], BM), q.shape[0] * q.shape[1])
            attention.attention_kernel[grid](q, k, v, o, 1 / 8.0, BM=BM, BN=BN, BD=64, CAUSAL=causal,
                                             num_warps=config.num_warps)
            err = np.abs(o - ref)
            bad = np.argwhere(~(err <= 1e-3 + 1e-2 * np.abs(ref)))
            rows = sorted(set(int(r) for r in bad[:, 2])) if len(bad) else []
            print(f"{env or 'default'} causal={causal} BM={BM} BN={BN} warps={config.num_warps}: "
                  f"max err {np.nanmax(err):.2e}, {len(bad)} bad, rows {rows[:3]}..{rows[-3:]}", flush=True)
        out = attention.run(q, k, v, causal)
        print(f"  tuned: max err {np.abs(out - ref).max():.2e}")
    for key in env:
        os.environ.pop(key)
