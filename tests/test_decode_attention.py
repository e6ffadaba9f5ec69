"""Split-KV decode attention (``examples/decode_attention.py``): float64 NumPy equivalence over
GQA groups 1/2/4/8, windows of 1-16 query rows (causal inside the window), ragged cache lengths
and slice sizes (a last slice that is short, one slice for the whole cache), head dims 64 and
128, on interpret, emulate and the GPU (``-m gpu``)."""
import numpy as np
import pytest

import tilejit as tj
from tilejit.examples import decode_attention as ex

BACKENDS = ["interpret", "emulate", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, heads, kv_heads, window, seq, dim, split", [
    (2, 8, 2, 1, 700, 64, 256),        # GQA 4, the last slice short
    (1, 8, 8, 1, 130, 64, 64),         # no grouping: 16 window rows padded per head
    (1, 16, 2, 4, 300, 128, 128),      # GQA 8, a 4-token window, D 128
    (2, 4, 2, 16, 95, 64, 1024),       # one slice for the whole cache, a 16-token window
    (1, 4, 1, 3, 17, 64, 64),          # a cache shorter than one key block
])
def test_decode_matches_float64(backend, monkeypatch, batch, heads, kv_heads, window, seq, dim, split):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    q, k, v = ex.example_inputs(np.random.default_rng(seq + window), batch, heads, kv_heads, window, seq, dim)
    out = ex.run(q, k, v, split=split)
    assert not np.isnan(out.astype(np.float32)).any()
    tj.testing.assert_close(out, ex.reference(q, k, v), dtype=tj.bfloat16)


def test_the_slices_cover_the_cache_once():
    for seq, split in ((700, 256), (256, 256), (1, 64), (8192, 1024), (65536, 4096)):
        ns = ex.splits_for(seq, split)
        assert (ns - 1) * split < seq <= ns * split


def test_the_decode_kernel_takes_the_tensor_cores():
    from tilejit.passes.pipeline import compile_to_simt
    from tilejit.simt import SimtOp
    from tilejit.specs import ArraySpec, ScalarSpec
    from tilejit import dtypes as D
    bf, f32 = ArraySpec(D.bfloat16, 4), ArraySpec(D.float32, 4)
    tile = ex.decode_split_kernel.tile_ir((bf, bf, bf, f32, ArraySpec(D.float32, 3), ScalarSpec(D.float32)),
                                         {"GROUP": 4, "BL": 4, "BN": 64, "BD": 128, "SPLIT": 1024})
    fn = compile_to_simt(tile, num_warps=4)
    kinds = {o.op for o in fn.walk()}
    assert kinds & {SimtOp.MMA, SimtOp.WGMMA}
