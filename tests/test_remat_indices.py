"""passes/remat_indices.py: a global store's thread-derived indices and mask are recomputed next
to it from a fresh (volatile) thread-id read, so they need not stay in registers from the loads
to the store; IR text in and out, the values unchanged on the emulator, fewer registers in ptxas."""
from __future__ import annotations

import numpy as np
import pytest

from tilejit import codegen, ir, simt
from tilejit.passes import pipeline
from tilejit.passes import remat_indices as remat
from tilejit.simt import SimtOp

from conftest import assemble_or_skip
from examples import layernorm, softmax


def tile_ir(kernel, args, consts):
    specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
    return kernel.tile_ir(specs, consts)

def indexed(dtype: str) -> str:
    """A function head: ``%5`` = thread id + 0..3 (4 registers), ``%7`` = ``%5 < param 1``, ``%0``
    a pointer to ``dtype``."""
    return f"""func @f() {{
  %0 = param {{axis=0}} : ptr<{dtype}>
  %1 = param {{axis=1}} : int32
  %2 = thread_id : int32
  %3 = splat %2 : <4xint32>
  %4 = constant {{values=(0, 1, 2, 3)}} : <4xint32>
  %5 = elementwise %3, %4 {{op=add}} : <4xint32>
  %6 = splat %1 : <4xint32>
  %7 = elementwise %5, %6 {{op=lt}} : <4xbool>
"""


KERNEL = indexed("float32") + """  %8 = load_global %0, %5, %7 {vec=4, other=0} : <4xfloat32>
  %9 = elementwise %8, %8 {op=mul} : <4xfloat32>
  store_global %0, %5, %9, %7 {vec=4, other=0}
}"""


def test_the_store_gets_its_own_indices_from_a_fresh_thread_id():
    fn = remat.remat_indices(simt.parse_function(KERNEL))
    ops = fn.body.ops
    store = ops[-1]
    tids = [o for o in ops if o.op is SimtOp.THREAD_ID]
    assert len(tids) == 2 and tids[1].attrs == simt.VolatileAttrs(True)
    assert ops.index(tids[1]) > [o.op for o in ops].index(SimtOp.LOAD_GLOBAL)
    # the offsets and the mask are clones after the fresh read; the value and the pointer are not
    load = next(o for o in ops if o.op is SimtOp.LOAD_GLOBAL)
    square = next(o for o in ops if o.op is SimtOp.ELEMENTWISE and o.operands[0] is load.result)
    assert store.operands[0] is load.operands[0] and store.operands[2] is square.result
    assert store.operands[1] is not load.operands[1] and store.operands[3] is not load.operands[2]
    text = ir.print_function(fn)
    assert text.count("op=add") == 2 and text.count("op=lt") == 2 and text.count("splat %1") == 2
    simt.verify(fn)


def test_stores_that_need_no_thread_id_and_crowded_kernels_are_left_alone():
    plain = KERNEL.replace("%2 = thread_id : int32", "%2 = param {axis=2} : int32")
    assert ir.print_function(remat.remat_indices(simt.parse_function(plain))) == \
        ir.print_function(simt.parse_function(plain))
    x, w = np.zeros((4, 8192), np.float32), np.zeros(8192, np.float32)
    fn = pipeline.compile_to_simt(tile_ir(layernorm.layernorm_kernel, (x, w, w, x, 1e-5), {"BLOCK": 8192}), 16,
                                  persist=False)
    assert sum(o.op is SimtOp.THREAD_ID for o in fn.walk()) == 1        # x, weight and bias in registers


@pytest.mark.parametrize("persist", [False, "always"])
def test_the_values_do_not_change_on_the_emulator(persist, monkeypatch):
    from tilejit import backends
    from tilejit.backends import emulate
    x = np.random.default_rng(1).standard_normal((6, 1000)).astype(np.float32)
    tile = tile_ir(softmax.softmax_kernel, (x, x), {"BLOCK": 1024})
    got, reads = {}, {}
    for on in (False, True):
        monkeypatch.setattr(remat, "REMAT", on)
        fn = pipeline.compile_to_simt(tile, 4, persist=persist)
        assert fn.meta.persistent == bool(persist)
        reads[on] = sum(o.op is SimtOp.THREAD_ID for o in fn.walk())
        y = np.full_like(x, np.nan)
        if fn.meta.persistent:
            emulate.run(fn, *backends.launch_geometry(1, (6, 1, 1), [x, y], 3))
        else:
            emulate.run(fn, (6, 1, 1), [x, y])
        got[on] = y
    assert reads[True] == reads[False] + 1                      # the store's own read
    np.testing.assert_array_equal(got[True], got[False])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got[True], e / e.sum(1, keepdims=True), rtol=2e-6)


def test_softmax_keeps_fewer_registers(monkeypatch):
    import ml_dtypes
    x = np.zeros((4, 8192), ml_dtypes.bfloat16)
    tile = tile_ir(softmax.softmax_kernel, (x, x), {"BLOCK": 8192})
    registers = {}
    monkeypatch.setattr(pipeline, "PACKED_THREADS_PER_SM", ())     # (a cap would hide the difference)
    for on in (False, True):
        monkeypatch.setattr(remat, "REMAT", on)
        fn = pipeline.compile_to_simt(tile, 8, persist=False)
        registers[on] = assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a").registers
    assert registers[True] <= registers[False] - 16, registers


def test_packed_programs_keep_the_stores_own_thread_id_read(monkeypatch):
    """pack_programs turns every thread id into the program-local one; the store's fresh read
    stays a read of its own (masked to the program's lanes), or LLVM would merge it with the first."""
    import ml_dtypes
    x = np.zeros((64, 512), ml_dtypes.bfloat16)
    tile = tile_ir(softmax.softmax_kernel, (x, x), {"BLOCK": 512})
    fn = pipeline.compile_to_simt(tile, 1, pack=True)
    assert fn.meta.programs_per_cta > 1
    fresh = [o for o in fn.walk() if o.op is SimtOp.THREAD_ID and o.attrs == simt.VolatileAttrs(True)]
    assert len(fresh) == 1
    users = [o for o in fn.walk() if fresh[0].result in o.operands]
    assert [(o.op, o.attrs.op) for o in users] == [(SimtOp.ELEMENTWISE, ir.TileOp.AND)]
    registers = {}
    monkeypatch.setattr(pipeline, "PACKED_THREADS_PER_SM", ())     # (a cap would hide the difference)
    for on in (False, True):
        monkeypatch.setattr(remat, "REMAT", on)
        fn = pipeline.compile_to_simt(tile, 1, pack=True)
        registers[on] = assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a").registers
    assert registers[True] < registers[False], registers


def test_a_store_mask_at_the_end_of_a_long_chain_of_math_is_fine():
    """A mask that ANDs a thread-derived bound with a test on data at the end of thousands of ops
    is left shared (not cheap to clone), and finding that out does not recurse through the chain."""
    lines = ["func @f() {", "  %0 = param {axis=0} : ptr<float32>", "  %1 = thread_id : int32",
             "  %2 = splat %1 : <4xint32>", "  %3 = constant {values=(True, True, True, True)} : <4xbool>",
             "  %4 = load_global %0, %2, %3 {vec=1, other=0} : <4xfloat32>"]
    last = 4
    for i in range(5, 3005):
        lines.append(f"  %{i} = elementwise %{last}, %{last} {{op=add}} : <4xfloat32>")
        last = i
    lines += [f"  %3005 = constant {{values=(0.0, 0.0, 0.0, 0.0)}} : <4xfloat32>",
              f"  %3006 = elementwise %{last}, %3005 {{op=gt}} : <4xbool>",
              "  %3008 = constant {values=(100, 100, 100, 100)} : <4xint32>",
              "  %3009 = elementwise %2, %3008 {op=lt} : <4xbool>",         # thread-derived: cheap
              "  %3007 = elementwise %3006, %3009 {op=and} : <4xbool>",     # but not with the data
              "  store_global %0, %2, %4, %3007 {vec=1, other=0}", "}"]
    fn = remat.remat_indices(simt.parse_function("\n".join(lines)))
    store = fn.body.ops[-1]
    assert store.operands[1] is not fn.body.ops[2].result             # the offsets are cloned
    mask = next(o for o in fn.walk() if store.operands[3] in o.results)
    assert mask.attrs.op is ir.TileOp.AND and mask.operands[0].type.dtype.is_bool
    assert sum(o.op is SimtOp.ELEMENTWISE and o.attrs.op is ir.TileOp.AND for o in fn.walk()) == 1   # kept, not cloned
    simt.verify(fn)


@pytest.mark.parametrize("cols,warps,dtype,pack,fresh", [
    (8192, 8, "float32", False, 0),     # three row loads of 32 registers: crowded, left alone
    (2048, 4, "float32", False, 0),     # three of 16: crowded
    (128, 1, "bfloat16", True, 1),      # three of 8: short rows, the store reads the thread id again
])
def test_layernorm_is_left_alone_only_when_its_three_rows_fill_the_registers(cols, warps, dtype, pack, fresh):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    x, w = np.zeros((4, cols), dt), np.zeros(cols, dt)
    fn = pipeline.compile_to_simt(tile_ir(layernorm.layernorm_kernel, (x, w, w, x, 1e-5), {"BLOCK": cols}), warps,
                                  pack=pack, persist=False)
    assert sum(o.op is SimtOp.THREAD_ID and o.attrs == simt.VolatileAttrs(True) for o in fn.walk()) == fresh


SCATTER = indexed("int32") + """  %8 = load_global %0, %5, %7 {vec=1, other=0} : <4xint32>
  %9 = elementwise %5 {op=cast} : <4xfloat32>
  %10 = constant {values=(3.5, 3.5, 3.5, 3.5)} : <4xfloat32>
  %11 = elementwise %9, %10 {op=lt} : <4xbool>
  store_global %0, %8, %8, %7 {vec=1, other=0}
  store_global %0, %5, %8, %11 {vec=1, other=0}
}"""


def test_only_cheap_integer_index_math_is_cloned():
    """A scatter's offsets come from a load (kept, never loaded twice) while its thread-derived
    mask is cloned; a mask through float math (a cast and a float compare) is kept as it is."""
    fn = remat.remat_indices(simt.parse_function(SCATTER))
    ops = fn.body.ops
    load = next(o for o in ops if o.op is SimtOp.LOAD_GLOBAL)
    scatter, second = [o for o in ops if o.op is SimtOp.STORE_GLOBAL]
    assert sum(o.op is SimtOp.LOAD_GLOBAL for o in ops) == 1
    assert scatter.operands[1] is load.result and scatter.operands[3] is not load.operands[2]
    clone = next(o for o in ops if scatter.operands[3] in o.results)
    assert clone.attrs.op is ir.TileOp.LT and ops.index(clone) > ops.index(load)
    assert sum(o.op is SimtOp.ELEMENTWISE and o.attrs.op is ir.TileOp.CAST for o in ops) == 1
    cast_lt = [o for o in ops if o.op is SimtOp.ELEMENTWISE and o.attrs.op is ir.TileOp.LT
               and o.operands[0].type.dtype.is_float]
    assert len(cast_lt) == 1 and second.operands[3] is cast_lt[0].result
    simt.verify(fn)


def test_four_row_loads_in_registers_are_crowded_too():
    n = remat.ROW_REGISTERS
    lines = ["func @f() {", "  %0 = param {axis=0} : ptr<float32>", "  %1 = thread_id : int32",
             f"  %2 = splat %1 : <{n}xint32>", f"  %3 = constant {{values=({', '.join(['True'] * n)})}} : <{n}xbool>"]
    for i in range(4):
        lines.append(f"  %{4 + i} = load_global %0, %2, %3 {{vec=1, other=0}} : <{n}xfloat32>")
    lines += [f"  store_global %0, %2, %7, %3 {{vec=1, other=0}}", "}"]
    text = "\n".join(lines)
    assert ir.print_function(remat.remat_indices(simt.parse_function(text))) == ir.print_function(simt.parse_function(text))
    two = "\n".join(l for l in lines if "%5 =" not in l and "%6 =" not in l)      # two loads: cloned
    assert sum(o.op is SimtOp.THREAD_ID for o in remat.remat_indices(simt.parse_function(two)).walk()) == 2


def test_an_atomics_offsets_and_mask_are_recomputed_too():
    text = KERNEL.replace("  store_global %0, %5, %9, %7 {vec=4, other=0}",
                          "  %10 = atomic_global %0, %5, %9, %7 {kind=add, sem=relaxed, scope=gpu, masked=False} : <4xfloat32>")
    fn = simt.parse_function(text)
    atomic = fn.body.ops[-1]
    assert atomic.op is SimtOp.ATOMIC_GLOBAL
    offsets, mask = atomic.operands[1], atomic.operands[3]
    fn = remat.remat_indices(fn)
    assert atomic.operands[1] is not offsets and atomic.operands[3] is not mask and len(atomic.operands) == 4
    assert sum(o.op is SimtOp.THREAD_ID for o in fn.walk()) == 2
    simt.verify(fn)


def test_a_softmax_spelled_with_several_rows_per_program_gets_it_too(monkeypatch):
    """Spelling-independence: two rows per program (a (2, BLOCK) tile) reach the same rewrite and
    keep fewer registers, as the one-row example does."""
    import ml_dtypes
    from test_warps import softmax_rows
    x = np.zeros((8, 4096), ml_dtypes.bfloat16)
    tile = tile_ir(softmax_rows, (x, x), {"R": 2, "BLOCK": 4096})
    registers = {}
    monkeypatch.setattr(pipeline, "PACKED_THREADS_PER_SM", ())     # (a cap would hide the difference)
    for on in (False, True):
        monkeypatch.setattr(remat, "REMAT", on)
        fn = pipeline.compile_to_simt(tile, 8, persist=False)
        fresh = [o for o in fn.walk() if o.op is SimtOp.THREAD_ID and o.attrs == simt.VolatileAttrs(True)]
        assert len(fresh) == on
        registers[on] = assemble_or_skip(codegen.compile_ptx(fn, "sm_90a"), "sm_90a").registers
    assert registers[True] < registers[False], registers
