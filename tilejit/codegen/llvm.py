"""LLVM emission: SIMT IR ``Function`` -> LLVM IR (llvmlite) -> PTX through the NVPTX target machine.

With its helpers in this package (``base``, ``elementwise``, ``floatmath``, ``memory``, ``mma``,
and ``host`` for CPU tests of the math) the only part of tilejit that imports llvmlite.  Each SIMT op maps to a few
LLVM instructions; a ``RegType(dtype, n)`` value is a Python list of n LLVM scalars, so
GATHER/CONCAT/SPLAT cost nothing.

Kernel ABI (how the runtime packs ``fn.meta.params``; ``tilejit.runtime.packing.param_format``
gives the ``struct`` code).  Every parameter is passed by value, in order, with its natural size:

    ParamDesc kind / dtype             LLVM / PTX param           C type (bytes)
    "ptr"   (any dtype)                ptr addrspace(1) / .u64    device pointer, uint64_t (8)
    "dim"   int32 | int64              i32 | i64                  int32_t (4) | int64_t (8)
    "stride" int32 | int64             i32 | i64                  int32_t (4) | int64_t (8)
    "scalar" bool                      i8 / .u8                   uint8_t 0 or 1 (1)
    "scalar" int8 | uint8              i8                         int8_t | uint8_t (1)
    "scalar" int16                     i16                        int16_t (2)
    "scalar" int32 | uint32            i32                        int32_t | uint32_t (4)
    "scalar" int64                     i64                        int64_t (8)
    "scalar" float16 | bfloat16        half | bfloat / .b8[2]    IEEE half / bf16 bits, uint16_t (2)
    "scalar" float32                   float / .f32               float (4)
    "scalar" float8e4m3 | float8e5m2   i8                         fp8 bits, uint8_t (1)
    "tensor_map" (the array's dtype)   ptr byval([128 x i8])      CUtensorMap (128, 64-aligned)
                                       "nvvm.grid_constant" / .param .align 64 .b8[128]

(``runtime/packing.py`` packs bool as '?' and float16 as 'e': the same bytes.)  The kernel
uses ``fn.meta.shared_bytes`` bytes of *dynamic* shared memory (pass it as
``sharedMemBytes`` at launch; above 48 KiB it also needs
``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``) and must be launched with
``fn.meta.cta_threads`` threads in x (``.maxntid`` in the PTX).
"""
from __future__ import annotations

import functools
import os
import re
import threading

import llvmlite.binding as llvm
from llvmlite import ir
from llvmlite.ir.values import ArgumentAttributes

from tilejit.abi import TENSOR_MAP_BYTES, ParamKind
from tilejit.codegen import mma, nibbles
from tilejit import dtypes as D
from tilejit import simt
from tilejit.codegen.base import GLOBAL, I8, I32, I64, Ctx, const, mem_type, reg_type
from tilejit.codegen.elementwise import elementwise
from tilejit.codegen.memory import (atomic_global, reduce_global, reduction_allowed, cp_async, device_assert, device_print, load_global, load_shared, pack, unpack, shared_pointer,
                                    store_global, store_shared, to_mem, to_reg)
from tilejit.errors import CompileError
from tilejit.ir import UNKNOWN_LOC, TileOp
from tilejit.simt import ParamDesc, RegType, SimtOp

TRIPLE = "nvptx64-nvidia-cuda"
# target name -> (LLVM cpu, PTX ISA feature, sm number). PTX 7.0 is the oldest ISA with sm_80
# (and what drivers since CUDA 11.0 accept); sm_90a needs PTX 8.0, and its float8 mma.sync 8.4
# (drivers since CUDA 12.4; the emitted PTX is otherwise the same as under 8.0).
TARGETS = {"sm_80": ("sm_80", "+ptx70", 80), "sm_90a": ("sm_90a", "+ptx84", 90)}
PTX_VERSION = {sm: int(features[4:]) for _, features, sm in TARGETS.values()}     # 80 -> 70, 90 -> 84


# ------------------------------------------------------------------------------------ kernel ABI
class _GridConstant(ArgumentAttributes):
    """A TMA descriptor parameter: 128 bytes by value, read in place (``__grid_constant__``;
    llvmlite cannot print ``byval`` of an opaque pointer itself)."""

    def _to_list(self, typ):
        return [f"byval([{TENSOR_MAP_BYTES} x i8])", "align 64", '"nvvm.grid_constant"']


def param_llvm_type(desc: ParamDesc) -> ir.Type:
    """The LLVM type of a kernel parameter (see the ABI table in the module docstring)."""
    if desc.kind is ParamKind.TENSOR_MAP:
        return ir.PointerType()
    if desc.kind in (ParamKind.PTR, ParamKind.WORKSPACE):
        return ir.PointerType(addrspace=GLOBAL)
    if desc.kind is ParamKind.DIM:
        return I64 if desc.dtype.bits == 64 else I32
    if desc.dtype.is_bool:
        return I8
    return reg_type(desc.dtype)


# -------------------------------------------------------------------------------- target machines
@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # 32-bit shared (and local, const) pointers: a shared address held across a loop takes one
    # register, not two, and needs no cvt.u64 before each access (ptxas, nvJitLink 13.5: the
    # causal attention D128 128x128x8 spills 360 bytes instead of 468, D64 64x128x4 244 registers
    # instead of 254)
    llvm.set_option("", "--nvptx-short-ptr")


# LLVM's optimisation level on the IR (``optimize``); the switch for measuring it.  O1 would take
# ~20% off the attention's LLVM stage (340 -> 269 ms with emission, build machine, 2026-12-06)
# with the same PTX for the sm_90a attention and GEMM kernels, but it changes 21 of the 50
# ``ptx_snapshot.py`` kernels (layernorm / softmax rows unrolled less): 3 until timed on a GPU.
IR_OPT = 3
# The NVPTX back end's optimisation level for emitting PTX (the IR is optimised at O3 either way).
# 2 emits the same PTX as 3 for the 50 kernels of scripts/ptx_snapshot.py and for the 43 modules
# the tests of W4A16, decode attention, float8, dot_scaled, attention backward, stream-K, row
# rings and packed 4-bit data assemble, and skips 3's extra machine-IR passes: emission 24% faster
# (attention D128: 86 -> 62 ms; its cold compile 598-601 -> 572-583 ms, build machine, 2026-12-05).
CODEGEN_OPT = 2
# The switch: True makes the wgmma descriptors of one tile's k steps (``base + c``) one descriptor
# and an add each (``KernelEmitter._descriptor``) instead of each computed from its address (the
# mask keeps LLVM from folding them: ~13 SASS instructions a wgmma in the fp8 blockwise loop).
# Off until measured on the GPU.
DESCRIPTOR_OFFSETS = False
# The switch: True pins (``mma.fence_registers``) an accumulator that a loop body computes from a
# waited wgmma product before the body issues its next wgmma group (``KernelEmitter._pin_promoted``):
# LLVM otherwise sinks a promotion's FMAs (``acc0 = fma(p0, s, acc0)``) to the loop's latch, past
# the next group, where both products are live.  ptxas still moves about half of them past the
# next group's first wgmma (its own latency hiding): a 256 x 128 fp8 block-scaled tile as two
# 128-row halves spills 912 bytes either way at 232 registers a consumer thread (696 at 240), so
# 256-wide fp8 tiles do not fit yet (2026-12-05, build machine, ptxas 13).
PIN_PROMOTED = True
# The switch: True issues a wgmma whose accumulator input is a zero constant (a product's first k
# step) with ``scale-d`` false and no accumulator inputs (``mma.wgmma(acc=None)``), instead of
# moving zeros into the registers first.
ZERO_PRODUCTS = True


def _zeros(v) -> bool:
    """Whether SIMT value ``v`` is a CONSTANT whose every value is zero."""
    o = v.owner
    return o is not None and o.op is SimtOp.CONSTANT and all(x == 0 for x in o.attrs.values)


@functools.cache
def target_machine(target: str, opt: int = 3) -> llvm.TargetMachine:
    """The (cached: creating one is slow) NVPTX target machine for ``sm_80`` or ``sm_90a`` at
    back-end optimisation level ``opt``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")
    _init_llvm()
    cpu, features, _ = TARGETS[target]
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=cpu, features=features, opt=opt)


class _KernelAttributes(ir.values.FunctionAttributes):
    """Function attributes that also accept LLVM string attributes (``"nvvm.maxntid"="128"``),
    which llvmlite's attribute set rejects."""

    def add(self, name: str):
        if name.startswith('"'):
            return set.add(self, name)
        return super().add(name)


# ---------------------------------------------------------------------------------------- emission
def kernel_name(fn: simt.Function) -> str:
    """The PTX entry name: the kernel's name with anything PTX rejects replaced by '_'."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(fn.meta.name))
    return name if name and not name[0].isdigit() else "k_" + name


class LineInfo:
    """Debug line info (what ``nvcc -lineinfo`` gives): a compile unit that emits only ``.loc``
    and ``.file`` directives, a subprogram at the kernel's ``def`` line, and a ``DILocation``
    on every instruction from the location of the SIMT op it implements, so ptxas, ncu and
    compute-sanitizer name the user's source line.  Code is the same with or without it."""

    def __init__(self, module: ir.Module, func: ir.Function, loc):
        self.module = module
        self.files: dict[str, object] = {}
        self.scopes: dict[str, object] = {}
        self.locations: dict[tuple, object] = {}
        path = loc.file if loc.line else "<tilejit>"
        unit = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"), "file": self.file(path), "producer": "tilejit",
            "runtimeVersion": 0, "isOptimized": True, "emissionKind": ir.DIToken("DebugDirectivesOnly")},
            is_distinct=True)
        self.subprogram = module.add_debug_info("DISubprogram", {
            "name": func.name, "file": self.file(path), "line": loc.line, "scopeLine": loc.line,
            "type": module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])}),
            "isLocal": False, "isDefinition": True, "unit": unit,
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized")}, is_distinct=True)
        self.scopes[path] = self.subprogram
        func.set_metadata("dbg", self.subprogram)
        module.add_named_metadata("llvm.dbg.cu", unit)
        for flag, value in (("Debug Info Version", 3), ("Dwarf Version", 4)):
            module.add_named_metadata("llvm.module.flags", module.add_metadata([I32(2), flag, I32(value)]))

    def file(self, path: str):
        if path not in self.files:
            directory, name = os.path.split(path)
            self.files[path] = self.module.add_debug_info("DIFile", {"filename": name, "directory": directory})
        return self.files[path]

    def scope(self, path: str):
        """The subprogram, or a lexical block of it in another file (an inlined ``@tj.func``)."""
        if path not in self.scopes:
            self.scopes[path] = self.module.add_debug_info("DILexicalBlockFile", {
                "scope": self.subprogram, "file": self.file(path), "discriminator": 0})
        return self.scopes[path]

    def location(self, loc):
        """The ``DILocation`` of a source location (None for an unknown one)."""
        if loc is None or not loc.line:
            return None
        key = (loc.file, loc.line, loc.col)
        if key not in self.locations:
            self.locations[key] = self.module.add_debug_info("DILocation", {
                "line": loc.line, "column": loc.col + 1, "scope": self.scope(loc.file)})
        return self.locations[key]


class KernelEmitter:
    """Translates one SIMT kernel into an llvmlite module, op by op (``op_<NAME>`` handlers)."""

    def __init__(self, fn: simt.Function, target: str):
        self.fn = fn
        self.module = ir.Module(name=fn.name)
        self.module.triple = TRIPLE
        self.module.data_layout = str(target_machine(target).target_data)
        params = fn.meta.params
        fnty = ir.FunctionType(ir.VoidType(), [param_llvm_type(p) for p in params])
        func = ir.Function(self.module, fnty, kernel_name(fn))
        func.calling_convention = "ptx_kernel"
        for arg, p in zip(func.args, params):
            if p.kind is ParamKind.TENSOR_MAP:
                arg.attributes = _GridConstant()
        func.attributes = _KernelAttributes()
        func.attributes.add(f'"nvvm.maxntid"="{fn.meta.cta_threads}"')
        if fn.meta.max_registers:             # setmaxnreg needs the kernel's own register count
            func.attributes.add(f'"nvvm.maxnreg"="{fn.meta.max_registers}"')
        if fn.meta.cluster_ctas > 1:          # .reqnctapercluster: launched in clusters along x
            func.attributes.add(f'"nvvm.cluster_dim"="{fn.meta.cluster_ctas},1,1"')
        if fn.meta.min_ctas_per_sm:           # caps registers so that many CTAs fit an SM
            func.attributes.add(f'"nvvm.minctasm"="{fn.meta.min_ctas_per_sm}"')
        self.ctx = Ctx(self.module, func, TARGETS[target][2], fn.meta.name)
        self.ctx.division_without_calls = any(o.op is simt.SimtOp.WGMMA for o in fn.walk())
        self.ctx.fast_math = bool(fn.meta.fast_math)
        self.lines = LineInfo(self.module, func, fn.meta.loc or UNKNOWN_LOC)
        self.b.debug_metadata = self.lines.location(fn.meta.loc)
        self.values: dict[int, list] = {}
        self.descriptors: dict = {}           # wgmma descriptors of tile bases, per basic block (_descriptor)
        self.wgmma_skip = None                # an open guarded wgmma group: [block before, join, acc, last]
        self.asserts = simt.assert_sites(fn)  # op_ASSERT numbers them; the runtime maps numbers back
        self.used = {id(v) for o in fn.walk() for v in o.operands}     # values some op reads

    @property
    def b(self) -> ir.IRBuilder:
        return self.ctx.builder

    def emit(self) -> ir.Module:
        self.region(self.fn.body, [])
        self.b.ret_void()
        return self.module

    # --- values and regions
    def get(self, v) -> list:
        return self.values[id(v)]

    def set(self, v, regs: list) -> None:
        self.values[id(v)] = regs

    def region(self, block, arg_values: list[list]) -> list[list]:
        """Emit a region's ops with its args bound; returns the values its YIELD passes on."""
        for a, regs in zip(block.args, arg_values):
            self.set(a, regs)
        pinned: set = set()
        for op in block.ops:
            if op.op == SimtOp.YIELD:
                return [self.get(v) for v in op.operands]
            if op.op is SimtOp.WGMMA_FENCE and PIN_PROMOTED:
                self._pin_promoted(block, op, pinned)
            self.ctx.loc = op.loc
            self.b.debug_metadata = self.lines.location(op.loc) or self.b.debug_metadata
            handler = getattr(self, f"op_{op.op.name}", None)
            if handler is None:
                raise CompileError(f"LLVM emission does not support SIMT op {op.op.name}",
                                   op.loc, self.ctx.kernel)
            handler(op)
        return []

    def _pin_promoted(self, block, fence, pinned: set) -> None:
        """Before ``fence`` (a wgmma group's start) in a loop body ``block``, pass through
        ``fence_registers`` each value the body yields that it computed so far from a waited wgmma
        product and that has the product's register count (a block-scaled GEMM's promoted
        accumulator): its FMAs then run before the group is issued, not at the latch with the
        group's product live beside the earlier one.  Smaller values (attention's row statistics)
        are left to move."""
        if not block.ops or block.ops[-1].op is not SimtOp.YIELD:
            return
        yielded = {id(v) for v in block.ops[-1].operands}
        derived: dict[int, int] = {}           # value id -> the register count of its product
        for o in block.ops[:block.ops.index(fence)]:
            if o.op is SimtOp.WGMMA_WAIT:
                for r in o.results:
                    derived[id(r)] = r.type.n
                continue
            sizes = [derived[id(x)] for x in o.operands if id(x) in derived]
            if not sizes:
                continue
            for r in o.results:
                derived[id(r)] = max(sizes)
                if id(r) in yielded and id(r) not in pinned and isinstance(r.type, RegType) \
                        and r.type.dtype == D.float32 and r.type.n == max(sizes) >= 16:
                    pinned.add(id(r))
                    self.set(r, mma.fence_registers(self.b, self.get(r)))

    # --- thread geometry and parameters
    def _sreg(self, name: str):
        return self.ctx.call(f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])

    def op_THREAD_ID(self, op):
        if op.attrs is not None and op.attrs.volatile:     # read here: loop-invariant code stays in the loop
            fnty = ir.FunctionType(I32, [])
            self.set(op.result, [self.b.asm(fnty, "mov.u32 $0, %tid.x;", "=r", [], side_effect=True)])
            return
        self.set(op.result, [self._sreg("tid.x")])

    def op_BLOCK_ID(self, op):
        self.set(op.result, [self._sreg("ctaid." + "xyz"[op.attrs.axis])])

    def op_GRID_DIM(self, op):
        self.set(op.result, [self._sreg("nctaid." + "xyz"[op.attrs.axis])])

    def op_PARAM(self, op):
        desc = self.fn.meta.params[op.attrs.axis]
        arg = self.ctx.func.args[op.attrs.axis]
        if desc.kind is ParamKind.SCALAR and desc.dtype.is_bool:
            arg = self.b.icmp_unsigned("!=", arg, ir.Constant(I8, 0))
        self.set(op.result, [arg])

    # --- register vectors
    def op_CONSTANT(self, op):
        rt: RegType = op.result.type
        values = op.attrs.values if len(op.attrs.values) == rt.n else op.attrs.values * rt.n
        made: dict = {}                # one object a value: ELEMENTWISE shares lanes by identity
        regs = []
        for v in values:
            if (reg := made.get(repr(v))) is None:
                reg = made[repr(v)] = const(rt.dtype, v)
            regs.append(reg)
        self.set(op.result, regs)

    def op_SPLAT(self, op):
        self.set(op.result, self.get(op.operands[0])[:1] * op.result.type.n)

    def op_GATHER(self, op):
        regs = self.get(op.operands[0])
        self.set(op.result, [regs[i] for i in op.attrs.indices])

    def op_CONCAT(self, op):
        self.set(op.result, [r for v in op.operands for r in self.get(v)])

    def op_ELEMENTWISE(self, op):
        out: RegType = op.result.type
        operands = [self.get(v) for v in op.operands]
        dtypes = [v.type.dtype for v in op.operands]
        source = op.operands[0].owner
        if op.attrs.op is TileOp.CAST and dtypes[0] == D.float32 and out.dtype in (D.bfloat16, D.float16) \
                and out.n % 2 == 0 and source is not None and source.op is simt.SimtOp.WGMMA_WAIT:
            # wgmma accumulators rounded in pairs (mma.f32_pair_to_16: no serialised wgmma)
            kind, ty = ("bf16", reg_type(D.bfloat16)) if out.dtype == D.bfloat16 else ("f16", reg_type(D.float16))
            self.set(op.result, [x for i in range(0, out.n, 2)
                                 for x in mma.f32_pair_to_16(self.b, operands[0][i], operands[0][i + 1], kind, ty)])
            return
        if op.attrs.op is TileOp.CAST and (pairs := nibbles.cast_pairs(self.ctx, operands[0], dtypes[0], out.dtype)):
            self.set(op.result, pairs)         # tj.unpack's nibbles converted two at a time
            return
        if op.attrs.op in (TileOp.ADD, TileOp.SUB) and (pairs := self._offset_nibbles(op, operands, dtypes)):
            self.set(op.result, pairs)         # nibbles converted plus a constant: one subtraction a pair
            return
        regs = []
        self.ctx.inline_division = out.n == 1
        done: dict = {}                # lanes with the same operands (a row index broadcast along
        for i in range(out.n):         # a row, a mask's bounds) share one instruction: a smaller IR
            args = [o[i] if len(o) > 1 else o[0] for o in operands]
            key = tuple(map(id, args))
            if (reg := done.get(key)) is None:
                reg = done[key] = elementwise(self.ctx, op.attrs.op, args, dtypes, out.dtype)
            regs.append(reg)
        self.ctx.inline_division = False
        self.set(op.result, regs)

    def _offset_nibbles(self, op, operands: list, dtypes: list) -> list | None:
        """``x + c``, ``c + x`` or ``x - c`` where ``x`` is a CAST's nibble pairs
        (``nibbles.cast_pairs``) and ``c`` one constant of the same dtype (``nibbles.offset_pairs``)."""
        out = op.result.type.dtype
        if dtypes[0] != out or dtypes[1] != out:
            return None
        sides = ((0, 1), (1, 0)) if op.attrs.op is TileOp.ADD else ((0, 1),)
        for x, c in sides:
            consts = operands[c]
            if not all(isinstance(r, ir.Constant) for r in consts) or len({repr(r) for r in consts}) != 1 \
                    or len(operands[x]) != op.result.type.n:
                continue
            value = float(consts[0].constant)
            return nibbles.offset_pairs(self.ctx, operands[x], value if op.attrs.op is TileOp.ADD else -value, out)
        return None

    # --- warp shuffles
    def _shuffle(self, x, dt: D.DType, kind: str, lane):
        b = self.b
        if dt.bits == 64:
            halves = [b.trunc(b.lshr(b.bitcast(x, I64), ir.Constant(I64, s)), I32) for s in (0, 32)]
            lo, hi = (b.zext(self._shfl(kind, h, lane), I64) for h in halves)
            word = b.or_(lo, b.shl(hi, ir.Constant(I64, 32)))
            return b.bitcast(word, reg_type(dt)) if dt.is_float else word
        width = ir.IntType(max(dt.bits, 1))
        bits = b.bitcast(x, width) if dt.is_float and dt.bits >= 16 else x
        word = bits if dt.bits == 32 else b.zext(bits, I32)
        out = self._shfl(kind, word, lane)
        out = out if dt.bits == 32 else b.trunc(out, width)
        return b.bitcast(out, reg_type(dt)) if dt.is_float and dt.bits >= 16 else out

    def _shfl(self, kind: str, word, lane):
        full = ir.Constant(I32, -1)
        return self.ctx.call(f"llvm.nvvm.shfl.sync.{kind}.i32", I32, [full, word, lane, ir.Constant(I32, 31)])

    def op_SHUFFLE_XOR(self, op):
        dt, mask = op.result.type.dtype, ir.Constant(I32, op.attrs.mask)
        self.set(op.result, [self._shuffle(x, dt, "bfly", mask) for x in self.get(op.operands[0])])

    def op_SHUFFLE_IDX(self, op):
        dt, lane = op.result.type.dtype, self.get(op.operands[1])[0]
        self.set(op.result, [self._shuffle(x, dt, "idx", lane) for x in self.get(op.operands[0])])

    # --- memory
    def op_LOAD_GLOBAL(self, op):
        ptr, offsets = self.get(op.operands[0])[0], self.get(op.operands[1])
        masks = self.get(op.operands[2]) if len(op.operands) > 2 else None
        dt = op.result.type.dtype
        self.set(op.result, load_global(self.ctx, ptr, offsets, masks, dt, op.attrs.vec, op.attrs.other,
                                        op.attrs.prefix))

    def op_STORE_GLOBAL(self, op):
        ptr, offsets, values = (self.get(v) for v in op.operands[:3])
        masks = self.get(op.operands[3]) if len(op.operands) > 3 else None
        dt = op.operands[2].type.dtype
        store_global(self.ctx, ptr[0], offsets, values, masks, dt, op.attrs.vec, op.attrs.prefix)

    def op_PRINT(self, op):
        rank = op.attrs.rank
        regs = [self.get(v) for v in op.operands]
        values = op.operands[3 + rank:-1]
        device_print(self.ctx, [regs[i][0] for i in range(3)], regs[3:3 + rank], regs[3 + rank:-1], regs[-1],
                     [v.type.dtype for v in values], op.attrs)

    def op_GRID_DEPENDENCY(self, op):
        """griddepcontrol on sm_90+; nothing before (launches there never overlap)."""
        if self.ctx.sm >= 90:
            mma.grid_dependency(self.b, op.attrs.action)

    def op_ASSERT(self, op):
        """Number ``i`` of the function's ASSERT ops in walk order (``assert_sites``)."""
        rank = op.attrs.rank
        regs = [self.get(v) for v in op.operands]
        ident = next(i for i, o in enumerate(self.asserts) if o is op)
        device_assert(self.ctx, ident, [regs[i][0] for i in range(3)], regs[3:3 + rank], regs[-1])

    def op_ATOMIC_GLOBAL(self, op):
        ptr, offsets, values, masks = (self.get(v) for v in op.operands[:4])
        cmps = self.get(op.operands[4]) if len(op.operands) > 4 else None
        dt = op.result.type.dtype
        if id(op.result) not in self.used and cmps is None and reduction_allowed(op.attrs, dt):
            reduce_global(self.ctx, ptr[0], offsets, values, masks, dt, op.attrs)     # nobody reads the old values
            return
        self.set(op.result, atomic_global(self.ctx, ptr[0], offsets, values, masks, op.result.type.dtype, op.attrs, cmps))

    def op_LOAD_SHARED(self, op):
        rt: RegType = op.result.type
        vec = op.attrs.vec if op.attrs is not None else 1
        masks = self.get(op.operands[1]) if len(op.operands) > 1 else None
        self.set(op.result, load_shared(self.ctx, self.get(op.operands[0]), rt.n, rt.dtype, vec, masks,
                                        getattr(op.attrs, "other", 0)))

    def op_LOAD_SHARED_CLUSTER(self, op):
        dt = op.result.type.dtype
        rank = self.get(op.operands[1])[0]
        on = self.b.zext(self.get(op.operands[2])[0], I32)
        other = to_mem(self.ctx, const(dt, op.attrs.other), dt)           # as the integer the load gives
        other = self.b.zext(other, ir.IntType(16)) if dt.itemsize == 1 else self.b.bitcast(other, ir.IntType(8 * dt.itemsize))
        out = []
        for addr in self.get(op.operands[0]):
            bits = mma.load_shared_cluster(self.b, shared_pointer(self.ctx, addr), rank, on, other, 8 * dt.itemsize)
            if dt.itemsize == 1:
                bits = self.b.trunc(bits, ir.IntType(8))
            value = self.b.bitcast(bits, mem_type(dt)) if mem_type(dt) != bits.type else bits
            out.append(to_reg(self.ctx, value, dt))
        self.set(op.result, out)

    def op_CLUSTER_BARRIER(self, op):
        mma.cluster_barrier(self.b)

    def op_STORE_SHARED(self, op):
        vec = op.attrs.vec if op.attrs is not None else 1
        store_shared(self.ctx, self.get(op.operands[0]), self.get(op.operands[1]),
                     op.operands[1].type.dtype, vec)

    # --- tensor cores and async copies (intrinsics from codegen.mma)
    def op_LDMATRIX(self, op):
        ptr = shared_pointer(self.ctx, self.get(op.operands[0])[0])
        self.set(op.result, mma.ldmatrix(self.b, ptr, op.attrs.num, op.attrs.trans))

    def op_MMA(self, op):
        a, b, c = (self.get(v) for v in op.operands)
        self.set(op.result, mma.mma(self.b, a, b, c, op.attrs.kind, PTX_VERSION[self.ctx.sm]))

    def op_PACK(self, op):
        self.set(op.result, pack(self.ctx, self.get(op.operands[0]), op.operands[0].type.dtype))

    def op_UNPACK(self, op):
        self.set(op.result, unpack(self.ctx, self.get(op.operands[0]), op.result.type.dtype))

    def op_CP_ASYNC(self, op):
        ptr = self.get(op.operands[0])[0]
        offsets, addrs, sizes = (self.get(v) for v in op.operands[1:4])
        if len(op.operands) == 4:
            cp_async(self.ctx, ptr, offsets, addrs, sizes, op.operands[0].type.dtype)
            return
        with self.b.if_then(self.get(op.operands[4])[0]):       # replicas issue nothing
            cp_async(self.ctx, ptr, offsets, addrs, sizes, op.operands[0].type.dtype)

    def op_CP_ASYNC_COMMIT(self, op):
        mma.cp_async_commit_group(self.b)

    def op_CP_ASYNC_WAIT(self, op):
        mma.cp_async_wait_group(self.b, op.attrs.n)

    def op_WGMMA(self, op):
        acc, a, b = (self.get(v) for v in op.operands[:3])
        at = op.attrs
        if not at.a_regs:         # K-major A: LBO unused (16), SBO eight rows; M-major A: one
            # 64-row atom per warpgroup (LBO, the next atom along M, unused), SBO eight k rows
            a = self._descriptor(op.operands[1], 16, 8 * at.a_row_bytes, at.a_row_bytes)
        lbo = at.b_atom_bytes if at.b_n_major else 16   # N-major: one 64-column atom to the next
        desc_b = self._descriptor(op.operands[2], lbo, 8 * at.b_row_bytes, at.b_row_bytes)
        self._guard_wgmma(op, None if ZERO_PRODUCTS and _zeros(op.operands[0]) else acc)
        self.set(op.result, mma.wgmma(self.b, None if ZERO_PRODUCTS and _zeros(op.operands[0]) else acc, a, desc_b,
                                      at.kind, at.n, at.b_n_major, at.a_m_major))
        if self.wgmma_skip is not None:
            self.wgmma_skip[3] = op.result

    def _descriptor(self, address, lbo: int, sbo: int, swizzle: int) -> ir.Value:
        """The wgmma descriptor of the tile at SIMT i32 ``address``.  With ``DESCRIPTOR_OFFSETS``,
        an address ``base + c`` (``c`` a constant multiple of 16: a k step into the tile) is the
        descriptor of ``base``, made once in this basic block, plus ``c >> 4``: the start field
        holds ``addr >> 4`` whole (shared addresses are below 2**18) and the fixed fields sit
        above bit 16, so the sum carries nowhere (PTX ISA "Matrix Descriptor Format")."""
        owner = address.owner
        if DESCRIPTOR_OFFSETS and owner is not None and owner.op is SimtOp.ELEMENTWISE \
                and owner.attrs.op is TileOp.ADD and address.type.n == 1:
            base, c = owner.operands
            if c.owner is None or c.owner.op is not SimtOp.CONSTANT:
                base, c = c, base
            k = c.owner.attrs.values[0] if c.owner is not None and c.owner.op is SimtOp.CONSTANT else None
            if isinstance(k, int) and k % 16 == 0 and 0 <= k < 1 << 18:
                key = (id(base), lbo, sbo, swizzle, id(self.b.block))
                if (start := self.descriptors.get(key)) is None:
                    start = self.descriptors[key] = mma.matrix_descriptor(
                        self.b, shared_pointer(self.ctx, self.get(base)[0]), lbo, sbo, swizzle)
                return self.b.add(start, ir.Constant(I64, k >> 4)) if k else start
        return mma.matrix_descriptor(self.b, shared_pointer(self.ctx, self.get(address)[0]), lbo, sbo, swizzle)

    def op_WGMMA_FENCE(self, op):
        mma.wgmma_fence(self.b)

    def _guard_wgmma(self, op, acc) -> None:
        """A guarded WGMMA (a 4th operand, ``passes.wgmma.ahead_guard``) opens a branch on the
        guard around the group's wgmmas, which the COMMIT closes: one uniform branch around
        straight-line wgmmas (a guard on each, ``@g wgmma``, makes ptxas branch around each
        and wait for each: serialised).  Skipped, the accumulators keep their inputs (undefined
        where the first wgmma starts from zero) and the commit makes an empty group (which
        ptxas fills with a wgmma of its own after the join: ``lower_wgmma`` waits down to 2)."""
        if len(op.operands) < 4 or self.wgmma_skip is not None:
            return
        guard = self.get(op.operands[3])[0]
        if guard.type != ir.IntType(1):
            guard = self.b.icmp_unsigned("!=", guard, ir.Constant(guard.type, 0))
        fn = self.b.function
        on, done = fn.append_basic_block("wgmma_on"), fn.append_basic_block("wgmma_done")
        self.wgmma_skip = [self.b.block, done, acc, None]
        self.b.cbranch(guard, on, done)
        self.b.position_at_end(on)

    def op_WGMMA_COMMIT(self, op):
        if self.wgmma_skip is not None:          # close the guarded group's branch
            before, done, acc, last = self.wgmma_skip
            self.wgmma_skip = None
            values = self.get(last)
            self.b.branch(done)
            end = self.b.block
            self.b.position_at_end(done)
            joined = []
            for i, v in enumerate(values):
                phi = self.b.phi(v.type)
                phi.add_incoming(v, end)
                phi.add_incoming(acc[i] if acc is not None and i < len(acc) else ir.Constant(v.type, ir.Undefined),
                                 before)
                joined.append(phi)
            self.set(last, joined)
        mma.wgmma_commit_group(self.b)

    def op_WGMMA_WAIT(self, op):
        if op.attrs.hold:
            mma.hold_point(self.b)
        mma.wgmma_wait_group(self.b, op.attrs.n)
        for a, r in zip(op.operands, op.results):      # the registers pass through the wait
            self.set(r, mma.fence_registers(self.b, self.get(a)))

    def op_FENCE_PROXY_ASYNC(self, op):
        mma.fence_proxy_async_shared(self.b)

    def _issued(self, op, emit) -> None:
        """``emit()`` in the thread whose ``issue`` operand (the op's second) holds."""
        with self.b.if_then(self.get(op.operands[1])[0]):
            emit()

    def _bar(self, op):
        return shared_pointer(self.ctx, self.get(op.operands[0])[0])

    def op_MBARRIER_INIT(self, op):
        self._issued(op, lambda: mma.mbarrier_init(self.b, self._bar(op), op.attrs.n))

    def op_MBARRIER_EXPECT_TX(self, op):
        self._issued(op, lambda: mma.mbarrier_expect_tx(self.b, self._bar(op), op.attrs.n))

    def op_MBARRIER_INVAL(self, op):
        self._issued(op, lambda: mma.mbarrier_inval(self.b, self._bar(op)))

    def op_MBARRIER_ARRIVE(self, op):
        rank = self.get(op.operands[2])[0] if len(op.operands) > 2 else None
        self._issued(op, lambda: mma.mbarrier_arrive(self.b, self._bar(op), rank))

    def op_SETMAXNREG(self, op):
        mma.setmaxnreg(self.b, op.attrs.n, op.attrs.inc)

    def op_MBARRIER_WAIT(self, op):
        mma.mbarrier_wait(self.b, self._bar(op), self.get(op.operands[1])[0])

    def op_FENCE_MBARRIER_INIT(self, op):
        mma.fence_mbarrier_init(self.b)

    def op_TMA_LOAD(self, op):
        tmap, dst, bar, issue = (self.get(v)[0] for v in op.operands[:4])
        coords = [self.get(v)[0] for v in reversed(op.operands[4:])]      # innermost first
        with self.b.if_then(issue):
            mma.tma_load(self.b, tmap, shared_pointer(self.ctx, dst), shared_pointer(self.ctx, bar), coords,
                         op.attrs.multicast)

    def op_TMA_STORE(self, op):
        tmap, src, issue = (self.get(v)[0] for v in op.operands[:3])
        coords = [self.get(v)[0] for v in reversed(op.operands[3:])]      # innermost first
        with self.b.if_then(issue):
            mma.tma_store(self.b, tmap, shared_pointer(self.ctx, src), coords)

    def op_TMA_STORE_WAIT(self, op):
        with self.b.if_then(self.get(op.operands[0])[0]):
            mma.tma_store_wait(self.b)

    def op_BARRIER(self, op):
        if op.operands:          # one program's warps of a CTA that holds several (pack_programs)
            self.ctx.call("llvm.nvvm.barrier.cta.sync.aligned.count", ir.VoidType(),
                          [self.get(op.operands[0])[0], ir.Constant(I32, op.attrs.threads)])
            return
        self.ctx.call("llvm.nvvm.barrier.cta.sync.aligned.all", ir.VoidType(), [ir.Constant(I32, 0)])

    def op_BARRIER_ARRIVE(self, op):
        self.ctx.call("llvm.nvvm.barrier.cta.arrive.aligned.count", ir.VoidType(),
                      [self.get(op.operands[0])[0], ir.Constant(I32, op.attrs.threads)])

    # --- structured control flow
    def _phis(self, values: list[list]) -> list[list]:
        return [[self.b.phi(r.type) for r in regs] for regs in values]

    @staticmethod
    def _add_incoming(phis: list[list], values: list[list], block) -> None:
        for phi_regs, regs in zip(phis, values):
            for phi, r in zip(phi_regs, regs):
                phi.add_incoming(r, block)

    def op_FOR(self, op):
        if op.attrs is not None and getattr(op.attrs, "unroll", False):
            return self._for_by_two(op)
        lb, step, head, iv, args, inits, pre, loop_test = self._for_head(op)
        body, done = self.ctx.block("for.body"), self.ctx.block("for.done")
        self.b.cbranch(loop_test(iv), body, done)
        self.b.position_at_end(body)
        self._back_edge(op, head, iv, iv, step, args, (lb, inits, pre))
        self.b.position_at_end(done)
        for res, regs in zip(op.results, args):
            self.set(res, regs)

    def _back_edge(self, op, head, iv, at, step, values, entry, args=None) -> None:
        """The body once more at iteration ``at`` with ``values``, then the branch back to
        ``head``, whose phis (``iv``, ``args``, default ``values``) take ``entry`` = (lb, inits,
        the block before the loop) from outside and the body's results from the latch."""
        args = values if args is None else args
        nexts = self.region(op.regions[0], [[at]] + values)
        iv_next = self.b.add(at, step)
        latch = self.b.block
        self.b.branch(head)
        lb, inits, pre = entry
        iv.add_incoming(lb, pre)
        iv.add_incoming(iv_next, latch)
        self._add_incoming(args, inits, pre)
        self._add_incoming(args, nexts, latch)

    def _for_head(self, op):
        """A FOR's loop head, built and positioned in: ``(lb, step, the head block, the iv phi,
        the carried phis, their inits, the block before the loop, iv -> the loop condition)``."""
        lb, ub, step = (self.get(v)[0] for v in op.operands[:3])
        inits = [self.get(v) for v in op.operands[3:]]
        ub, step = (self._int_like(v, lb.type) for v in (ub, step))
        pre = self.b.block
        head = self.ctx.block("for.head")
        self.b.branch(head)
        self.b.position_at_end(head)
        iv = self.b.phi(lb.type)
        return lb, step, head, iv, self._phis(inits), inits, pre, lambda i: self._loop_condition(i, ub, step)

    def _for_by_two(self, op):
        """A FOR unrolled by two (``ForAttrs.unroll``, set for a wgmma product carried in flight,
        ``passes.wgmma.carried_products``): two copies of the body per trip of the back edge, the
        second run when its iteration is in range, so each copy's product lives in registers of
        its own and nothing is copied at the back edge while a wgmma writes it.  Both exits
        retire the wgmma groups (``wait_group 0``) before the results are merged."""
        lb, step, head, iv, args, inits, pre, loop_test = self._for_head(op)
        first, second = self.ctx.block("for2.first"), self.ctx.block("for2.second")
        exit0, exit1, done = (self.ctx.block(f"for2.{n}") for n in ("exit0", "exit1", "done"))
        self.b.cbranch(loop_test(iv), first, exit0)
        self.b.position_at_end(first)
        mid = self.region(op.regions[0], [[iv]] + args)
        iv_mid = self.b.add(iv, step)
        self.b.cbranch(loop_test(iv_mid), second, exit1)
        self.b.position_at_end(second)
        self._back_edge(op, head, iv, iv_mid, step, mid, (lb, inits, pre), args)
        for bb in (exit0, exit1):
            self.b.position_at_end(bb)
            mma.wgmma_wait_group(self.b, 0)
            self.b.branch(done)
        self.b.position_at_end(done)
        results = self._phis(inits)
        self._add_incoming(results, args, exit0)
        self._add_incoming(results, mid, exit1)
        for res, regs in zip(op.results, results):
            self.set(res, regs)

    def _int_like(self, v, ty):
        if v.type == ty:
            return v
        return self.b.sext(v, ty) if v.type.width < ty.width else self.b.trunc(v, ty)

    def _loop_condition(self, iv, ub, step):
        """Python range: ``iv < ub`` for a positive step, ``iv > ub`` for a negative one."""
        if isinstance(step, ir.Constant):
            return self.b.icmp_signed("<" if int(step.constant) > 0 else ">", iv, ub)
        up, down = self.b.icmp_signed("<", iv, ub), self.b.icmp_signed(">", iv, ub)
        positive = self.b.icmp_signed(">", step, ir.Constant(step.type, 0))
        return self.b.select(positive, up, down)

    def op_IF(self, op):
        cond = self.get(op.operands[0])[0]
        then_bb, else_bb, join = self.ctx.block("if.then"), self.ctx.block("if.else"), self.ctx.block("if.join")
        self.b.cbranch(cond, then_bb, else_bb)
        arms = []
        for bb, region in zip((then_bb, else_bb), list(op.regions) + [None]):
            self.b.position_at_end(bb)
            values = self.region(region, []) if region is not None else []
            arms.append((values, self.b.block))
            self.b.branch(join)
        self.b.position_at_end(join)
        for i, res in enumerate(op.results):
            regs = []
            for j, first in enumerate(arms[0][0][i]):
                phi = self.b.phi(first.type)
                for values, end in arms:
                    phi.add_incoming(values[i][j], end)
                regs.append(phi)
            self.set(res, regs)

    def op_WHILE(self, op):
        """Do-while: run the region, continue with ``next`` while ``cond``; results = last next."""
        inits = [self.get(v) for v in op.operands]
        pre = self.b.block
        body, done = self.ctx.block("while.body"), self.ctx.block("while.done")
        self.b.branch(body)
        self.b.position_at_end(body)
        args = self._phis(inits)
        cond, *nexts = self.region(op.regions[0], args)
        latch = self.b.block
        self.b.cbranch(cond[0], body, done)
        self._add_incoming(args, inits, pre)
        self._add_incoming(args, nexts, latch)
        self.b.position_at_end(done)
        for res, regs in zip(op.results, nexts):
            self.set(res, regs)


# ------------------------------------------------------------------------------------- public API
HOPPER_ONLY = (simt.SimtOp.WGMMA, simt.SimtOp.WGMMA_FENCE, simt.SimtOp.WGMMA_COMMIT,
               simt.SimtOp.WGMMA_WAIT, simt.SimtOp.FENCE_PROXY_ASYNC, simt.SimtOp.TMA_LOAD,
               simt.SimtOp.MBARRIER_INIT, simt.SimtOp.MBARRIER_EXPECT_TX, simt.SimtOp.MBARRIER_WAIT,
               simt.SimtOp.MBARRIER_INVAL, simt.SimtOp.FENCE_MBARRIER_INIT, simt.SimtOp.MBARRIER_ARRIVE,
               simt.SimtOp.SETMAXNREG, *simt.TMA_STORE_OPS)


def emit_module(simt_fn: simt.Function, target: str = "sm_90a") -> ir.Module:
    """The llvmlite.ir module of a SIMT kernel."""
    if target != "sm_90a" and any(o.op in HOPPER_ONLY for o in simt_fn.walk()):
        # LLVM aborts the process on an NVVM intrinsic the target lacks: refuse first
        raise ValueError(f"the SIMT IR uses wgmma or TMA (sm_90a only) but the target is {target}: "
                         f"lower it with compile_to_simt(..., target={target!r})")
    return KernelEmitter(simt_fn, target).emit()


def _parse_verified(llvm_ir: str) -> llvm.ModuleRef:
    _init_llvm()
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    return module


# The module emit_llvm last parsed to verify, per thread, kept for the ptx_from_llvm of that same
# text (the cuda backend's next stage): a big kernel's IR is parsed once, not twice (attention
# D128: 27 ms of its ~0.8 s cold compile on the build machine)
_parsed = threading.local()


def emit_llvm(simt_fn: simt.Function, target: str = "sm_90a") -> str:
    """Verified LLVM IR text of a SIMT kernel (before optimisation)."""
    text = str(emit_module(simt_fn, target))
    _parsed.last = (text, _parse_verified(text))
    return text


# LLVM's SLP vectorizer in the pipeline: pairs of 16-bit float ops become bf16x2 / f16x2
# instructions (half the issue slots of a dequantising loop); the switch for switch_probe.py
SLP_VECTORIZE = True


def optimize(module: llvm.ModuleRef, target: str, level: int = 3) -> None:
    """Run LLVM's standard O<level> pipeline on a parsed module, in place."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=level)
    tuning.slp_vectorization = SLP_VECTORIZE
    builder = llvm.create_pass_builder(target_machine(target), tuning)
    builder.getModulePassManager().run(module, builder)


# the cached target machines are shared; LLVM does not promise they are safe to use from
# two threads at once (autotuning may compile in threads)
_LLVM_LOCK = threading.Lock()


def ptx_from_llvm(llvm_ir: str, target: str = "sm_90a", opt_level: int | None = None) -> str:
    """PTX text for LLVM IR text (verified, optimised at ``opt_level`` (default ``IR_OPT``)
    unless 0)."""
    if opt_level is None:
        opt_level = IR_OPT
    last = getattr(_parsed, "last", None)
    _parsed.last = None                 # optimize changes the module: it serves one call
    module = last[1] if last is not None and last[0] is llvm_ir else _parse_verified(llvm_ir)
    with _LLVM_LOCK:
        if opt_level:
            optimize(module, target, opt_level)
        return target_machine(target, CODEGEN_OPT).emit_assembly(module)


def compile_ptx(simt_fn: simt.Function, target: str = "sm_90a", opt_level: int | None = None) -> str:
    """PTX for ``target`` ("sm_80" or "sm_90a") of a SIMT kernel."""
    return ptx_from_llvm(str(emit_module(simt_fn, target)), target, opt_level)

