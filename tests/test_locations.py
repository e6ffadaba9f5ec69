"""Source locations reach the end of the pipeline: every SIMT op of the examples carries the
user's line, the PTX has ``.loc`` line info (and the cubin a line table), and the errors raised
after the frontend (verifiers, emulator race reports, resource limits) show that line with a
caret."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tilejit as tj
from tilejit import ir, simt
from tilejit.backends import emulate as emulator
from tilejit.backends.cuda import build, check_resources
from tilejit.codegen import ptxas
from tilejit.errors import CompileError
from tilejit.frontend import compile_tile_ir
from tilejit.kernel import classify_argument
from tilejit.passes.pipeline import compile_to_simt
from tilejit.simt import SimtOp
from tilejit.verifier import VerifyError, verify

from examples.attention import attention_kernel
from examples.layernorm import layernorm_kernel
from examples.matmul import matmul_kernel
from examples.softmax import softmax_kernel

HERE = os.path.abspath(__file__)


def specialise(kernel, args, consts):
    kernel = getattr(kernel, "kernel", kernel)
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return kernel, kernel.tile_ir(specs, consts)


def bf16(*shape):
    return np.zeros(shape, tj.bfloat16.np)


EXAMPLES = {
    "softmax": (softmax_kernel, (bf16(64, 1000), bf16(64, 1000)), {"BLOCK": 1024}, 4),
    "layernorm": (layernorm_kernel, (bf16(64, 1000), bf16(1000), bf16(1000), bf16(64, 1000), 1e-5),
                  {"BLOCK": 1024}, 8),
    "matmul": (matmul_kernel, (bf16(256, 256), bf16(256, 256), np.zeros((256, 256), np.float32)),
               {"BM": 128, "BN": 128, "BK": 64, "STAGES": 3}, 8),
    "attention": (attention_kernel, (bf16(1, 2, 256, 64),) * 4 + (0.125,),
                  {"BM": 64, "BN": 128, "BD": 64, "CAUSAL": True}, 4),
}


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_simt_op_of_the_examples_has_the_users_line(name, target):
    kernel, args, consts, warps = EXAMPLES[name]
    kernel, tile_fn = specialise(kernel, args, consts)
    fn = compile_to_simt(tile_fn, warps, target)
    source = kernel.fn.__code__.co_filename
    first = kernel.fn.__code__.co_firstlineno
    last = first + len(open(source).read().splitlines()[first - 1:])
    ops = list(fn.walk())
    assert ops and all(o.loc.file == source and first <= o.loc.line <= last for o in ops), \
        sorted({(o.op.name, str(o.loc)) for o in ops if o.loc.file != source})
    assert len({o.loc.line for o in ops}) > 3              # not just the def line


def test_ptx_carries_line_info_and_the_cubin_a_line_table():
    kernel, args, consts, warps = EXAMPLES["softmax"]
    kernel, tile_fn = specialise(kernel, args, consts)
    state = build(tile_fn, warps, "sm_90a")
    ptx = state["ptx"]
    files = re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M)
    assert [path for _, path in files] == [kernel.fn.__code__.co_filename]
    lines = {int(m) for m in re.findall(r"^\s*\.loc\s+1\s+(\d+)\s+\d+", ptx, re.M)}
    body = {kernel.fn.__code__.co_firstlineno + i for i in range(1, 8)}
    assert len(lines & body) >= 3, lines
    if ptxas.available():
        assert b".debug_line" in state["cubin"]


def transpose(x, y, B: tj.constexpr):
    t = tj.load(x, (0, 0), (B, B))
    tj.store(y, (0, 0), t.T)                  # goes through shared memory


def caret_under(message: str, text: str) -> bool:
    """``message`` shows the source line holding ``text`` with a caret line under it."""
    lines = message.splitlines()
    return any(text in a and b.strip() and set(b.strip()) == {"^"} for a, b in zip(lines, lines[1:]))


def test_an_emulator_race_names_the_users_line():
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    specs = [classify_argument("x", x)[0]] * 2
    fn = compile_to_simt(compile_tile_ir(transpose, specs, {"B": 32}), 4)
    fn.body.ops = [o for o in fn.body.ops if o.op is not SimtOp.BARRIER]
    with pytest.raises(emulator.EmulatorError, match="race") as err:
        emulator.run(fn, (1,), [x, np.zeros_like(x)])
    assert err.value.loc.file == HERE and err.value.kernel == "transpose"
    assert caret_under(str(err.value), "t.T")


def test_the_simt_verifier_names_the_users_line():
    x = np.zeros((32, 32), np.float32)
    specs = [classify_argument("x", x)[0]] * 2
    fn = compile_to_simt(compile_tile_ir(transpose, specs, {"B": 32}), 4)
    bad = next(o for o in fn.walk() if o.op is SimtOp.STORE_SHARED)
    bad.operands[1] = ir.Value(bad.operands[1].type)   # a value nothing defines
    with pytest.raises(simt.SimtVerifyError, match="not defined") as err:
        simt.verify(fn)
    assert err.value.loc == bad.loc and caret_under(str(err.value), "t.T")


def test_the_tile_verifier_names_the_users_line():
    specs = [classify_argument("x", np.zeros((32, 32), np.float32))[0]] * 2
    fn = compile_tile_ir(transpose, specs, {"B": 32})
    trans = next(o for o in fn.walk() if o.op is ir.TileOp.TRANS)
    trans.attrs = ir.PermAttrs((0, 0))
    with pytest.raises(VerifyError) as err:
        verify(fn)
    assert caret_under(str(err.value), "t.T")


def big_transpose(x, y, B: tj.constexpr):
    t = tj.load(x, (0, 0), (B, B))
    tj.store(y, (0, 0), tj.trans(t))           # a B x B float32 tile in shared memory


def test_a_shared_memory_overflow_names_the_users_line():
    specs = [classify_argument("x", np.zeros((256, 256), np.float32))[0]] * 2
    fn = compile_to_simt(compile_tile_ir(big_transpose, specs, {"B": 256}), 32)
    with pytest.raises(CompileError, match="shared memory") as err:
        check_resources(fn, "sm_80")
    assert caret_under(str(err.value), "tj.trans(t)")
