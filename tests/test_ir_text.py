"""The tile IR's text form parses back (``ir.parse_function``), so a pass test reads as IR text
in -> IR text out."""
from __future__ import annotations

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir
from tilejit.passes import pipeline
from tilejit.passes.canonicalize import canonicalize
from tilejit.passes.dce import dce
from tilejit.passes.fold_exp import fold_exp

from examples.attention import attention_kernel
from examples.layernorm import layernorm_kernel
from examples.matmul import matmul_kernel
from examples.softmax import softmax_kernel


def run(pass_, text: str) -> str:
    return ir.print_function(pass_(ir.parse_function(text)))


def bf16(*shape):
    return np.zeros(shape, tj.bfloat16.np)


KERNELS = {
    "softmax": (softmax_kernel, (bf16(64, 1000), bf16(64, 1000)), {"BLOCK": 1024}),
    "layernorm": (layernorm_kernel, (bf16(64, 1000), bf16(1000), bf16(1000), bf16(64, 1000), 1e-5), {"BLOCK": 1024}),
    "matmul": (matmul_kernel, (bf16(256, 256), bf16(256, 256), np.zeros((256, 256), np.float32)),
               {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}),
    "attention": (attention_kernel, (bf16(1, 2, 256, 64),) * 4 + (0.125,),
                  {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": True}),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_tile_stage_of_the_examples_round_trips(name):
    kernel, args, consts = KERNELS[name]
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    fn = pipeline.clone_function(kernel.tile_ir(specs, consts))
    options = pipeline.Options(4, "sm_90a")
    for stage in pipeline.PIPELINE:
        if stage.level != "tile":
            break
        text = ir.print_function(fn)
        assert ir.print_function(ir.parse_function(text)) == text, stage.name
        fn = stage.run(fn, options)


def test_canonicalize_from_text():
    assert run(canonicalize, """
func @k(%0: float32, %1: int32) {
  %2 = constant {value=-0.0} : float32
  %3 = sub %0, %2 : float32
  %4 = constant {value=0.0} : float32
  %5 = sub %3, %4 : float32
  %6 = constant {value=0} : int32
  %7 = add %6, %1 : int32
  yield %5, %7
}""") == """func @k(%0: float32, %1: int32) {
  %2 = constant {value=-0.0} : float32
  %3 = sub %0, %2 : float32
  %4 = constant {value=0.0} : float32
  %5 = constant {value=0} : int32
  yield %3, %1
}"""


def test_dce_from_text_keeps_loops_that_store():
    assert run(dce, """
func @k(%0: array<1xfloat32>, %1: int32) {
  %2 = constant {value=0} : int32
  %3 = constant {value=1} : int32
  %4 = constant {value=2.0} : float32
  %5 = mul %4, %4 : float32
  for %2, %1, %3 {stages=1, unroll=False} {
    ^(%6: int32):
    %7 = splat %4 : tile<4xfloat32>
    store %0, %6, %7
    yield
  }
  for %2, %1, %3 {stages=1, unroll=False} {
    ^(%8: int32):
    %9 = add %8, %8 : int32
    yield
  }
}""") == """func @k(%0: array<1xfloat32>, %1: int32) {
  %2 = constant {value=0} : int32
  %3 = constant {value=1} : int32
  %4 = constant {value=2.0} : float32
  for %2, %1, %3 {stages=1, unroll=False} {
    ^(%5: int32):
    %6 = splat %4 : tile<4xfloat32>
    store %0, %5, %6
    yield
  }
}"""


def test_fold_exp_from_text():
    out = run(fold_exp, """
func @k(%0: tile<1x256xfloat32>) {
  %1 = reduce %0 {kind=max, axis=1, keepdims=True} : tile<1x1xfloat32>
  %2 = broadcast %1 : tile<1x256xfloat32>
  %3 = sub %0, %2 : tile<1x256xfloat32>
  %4 = exp %3 : tile<1x256xfloat32>
  yield %4
}""")
    assert "exp2" in out and "fma" in out and " exp " not in out


@pytest.mark.parametrize("text,error", [
    ("func @k() {\n  %1 = add %0, %0 : int32\n}", "used before it is defined"),
    ("func @k(%0: int32) {\n  %1 = frobnicate %0 : int32\n}", "unknown op"),
    ("func @k(%0: int32) {\n  %1 = add %0, %0 : tile<3xnope>\n}", "not a type"),
    ("func @k(%0: int32) {\n  %1 = add %0, %0\n}", "result types"),
    ("func @k(%0: int32) {\n  %1 = constant {bogus=1} : int32\n}", "no attribute record"),
    ("func @k(%0: int32) {\n  %0 = neg %0 : int32\n}", "defined twice"),
    ("nonsense", "expected 'func"),
])
def test_bad_text_is_a_parse_error_naming_the_line(text, error):
    with pytest.raises(ir.ParseError, match=error):
        ir.parse_function(text)


# ------------------------------------------------------------------------------------ SIMT IR
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_simt_ir_of_the_examples_round_trips(name, target):
    from tilejit import simt
    kernel, args, consts = KERNELS[name]
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    text = ir.print_function(pipeline.compile_to_simt(kernel.tile_ir(specs, consts), 4, target))
    assert ir.print_function(simt.parse_function(text)) == text


def test_shared_memory_passes_from_simt_text():
    """A store to shared memory then a read of the same bytes by other threads: the planner
    places the buffers (the second after the first) and a barrier goes between the store and
    the load, none before the second buffer's first store (nothing read it yet)."""
    from tilejit import simt
    from tilejit.passes.shared_memory import insert_barriers, plan_shared_memory
    fn = simt.parse_function("""
func @k() {
  %0 = shared_alloc {buffer=0, size=512, align=16} : int32
  %1 = shared_alloc {buffer=1, size=64, align=128} : int32
  %2 = thread_id : int32
  %3 = constant {values=(4,)} : int32
  %4 = elementwise %2, %3 {op=mul} : int32
  %5 = constant {values=(1.0,)} : float32
  store_shared %4, %5 {vec=1, buffer=0}
  %6 = constant {values=(508,)} : int32
  %7 = elementwise %6, %4 {op=sub} : int32
  %8 = load_shared %7 {vec=1, buffer=0} : float32
  %9 = elementwise %1, %4 {op=add} : int32
  store_shared %9, %8 {vec=1, buffer=1}
}""")
    out = ir.print_function(insert_barriers(plan_shared_memory(fn)))
    assert "shared_alloc" not in out and fn.meta.shared_buffers == {0: (0, 512), 1: (512, 64)}
    assert fn.meta.shared_bytes == 576 and fn.meta.barriers == 1
    lines = [ln.strip() for ln in out.splitlines()]
    store = lines.index("store_shared %4, %5 {vec=1, buffer=0}")
    assert lines[store + 1:store + 4] == ["%6 = constant {values=(508,)} : int32",
                                         "%7 = elementwise %6, %4 {op=sub} : int32", "barrier"]
    assert "%1 = constant {values=(512,)} : int32" in lines


@pytest.mark.parametrize("text,error", [
    ("func @k() {\n  %0 = thread_id : <0xnope>\n}", "not a SIMT type"),
    ("func @k() {\n  %0 = add_tile : int32\n}", "unknown op"),
    ("func @k() {\n  %0 = constant {value=1} : int32\n}", "no attribute record"),
])
def test_bad_simt_text_is_a_parse_error(text, error):
    from tilejit import simt
    with pytest.raises(ir.ParseError, match=error):
        simt.parse_function(text)
