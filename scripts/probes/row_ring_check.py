import os, sys, numpy as np
os.environ["TILEJIT_BACKEND"] = sys.argv[1]
on = sys.argv[2] == "1"
os.environ["TILEJIT_CACHE_DIR"] = f"/tmp/rrc_{on}"
import tilejit as tj
from tilejit.passes import row_rings as R
R.DOT_LOOP_ROW_RINGS = on
from tilejit.examples import w4a16_gemm as ex
rng = np.random.default_rng(1)
outs = []
for (m, k, n, cfg) in [(3, 1024, 192, dict(BM=16, BN=64, BK=128, split=3)), (5, 640, 128, dict(BM=16, BN=64, BK=128, split=1)),
                       (70, 512, 128, dict(BM=64, BN=64, BK=128, split=2)), (2, 384, 256, dict(BM=16, BN=128, BK=64, split=2))]:
    a = rng.standard_normal((m, k)).astype(tj.bfloat16.np)
    packed, s, z = ex.quantize(rng.standard_normal((k, n)).astype(np.float32), 128)
    out = ex.run(a, packed, s, z, group=128, **cfg)
    ref = ex.reference(a, packed, s, z, group=128, rounded=cfg["BM"] >= 64)
    outs.append(out.view(np.uint16))
    print(m, k, n, cfg, "err", float(np.abs(out.astype(np.float64) - ref).max()), "of", float(np.abs(ref).max()))
np.save(f"/tmp/rr_{sys.argv[1]}_{int(on)}.npy", np.concatenate([o.ravel() for o in outs]))
