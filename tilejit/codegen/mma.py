"""LLVM emission of the tensor-core and async-copy instructions (``ldmatrix``, ``mma.sync``,
``cp.async`` and its groups) through the NVVM intrinsics listed in ``/work/shared/NVVM.md``.

Plain functions on an ``llvmlite.ir.IRBuilder`` positioned inside a ``ptx_kernel`` function:
they declare the intrinsic in the builder's module once and return LLVM values, so the SIMT
emitter can call them from its ``op_LDMATRIX`` / ``op_MMA`` / ``op_CP_ASYNC`` handlers.  Register
conventions match ``tilejit.backends.emulate_mma``: A/B fragments and ldmatrix results are ``i32``
values (packed 16/8-bit elements, low first), accumulators are ``float`` (f32) or ``i32`` (s32).
"""
from __future__ import annotations

from llvmlite import ir

I32, F16, F32, F64 = ir.IntType(32), ir.HalfType(), ir.FloatType(), ir.DoubleType()
HALF2 = ir.VectorType(F16, 2)
GLOBAL, SHARED = 1, 3                      # NVPTX address spaces


def _declare(builder: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The module's declaration of ``name`` (created on first use)."""
    module = builder.module
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name)


def _unpack(builder: ir.IRBuilder, value: ir.Value, count: int) -> list[ir.Value]:
    if count == 1 and not isinstance(value.type, ir.LiteralStructType):
        return [value]
    return [builder.extract_value(value, i) for i in range(count)]


def _check_pointer(ptr: ir.Value, addrspace: int, what: str) -> None:
    if not isinstance(ptr.type, ir.PointerType) or ptr.type.addrspace != addrspace:
        raise TypeError(f"{what} must be a ptr addrspace({addrspace}), got {ptr.type}")


# ------------------------------------------------------------------------------------- ldmatrix
def ldmatrix(builder: ir.IRBuilder, shared_ptr: ir.Value, num: int, trans: bool = False) -> list[ir.Value]:
    """``ldmatrix.sync.aligned.m8n8.x<num>{.trans}.shared.b16`` from this lane's row address
    ``shared_ptr`` (``ptr addrspace(3)``, 16-byte aligned); returns ``num`` i32 registers."""
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix .x{num}: only .x1, .x2, .x4 exist")
    _check_pointer(shared_ptr, SHARED, "ldmatrix address")
    name = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.b16.p3"
    ret = I32 if num == 1 else ir.LiteralStructType([I32] * num)
    call = builder.call(_declare(builder, name, ret, [shared_ptr.type]), [shared_ptr])
    return _unpack(builder, call, num)


# ------------------------------------------------------------------------------------------ mma
# A/B type -> (NVVM intrinsic as in NVVM.md, accumulator is s32).  Every kind takes 4 A, 2 B
# and 4 C registers (PTX ISA §9.7.14.5.7/8/10; ``passes.mma_layouts.MMA_KINDS`` holds the maps).
MMA_INTRINSICS = {
    "bf16": ("llvm.nvvm.mma.m16n8k16.row.col.bf16", False),
    "f16": ("llvm.nvvm.mma.m16n8k16.row.col.f32.f32", False),
    "tf32": ("llvm.nvvm.mma.m16n8k8.row.col.tf32", False),
    "s8": ("llvm.nvvm.mma.m16n8k32.row.col.s8", True),
    "e4m3": ("llvm.nvvm.mma.m16n8k32.row.col.f32.e4m3.e4m3.f32", False),
    "e5m2": ("llvm.nvvm.mma.m16n8k32.row.col.f32.e5m2.e5m2.f32", False),
}
DMMA_INTRINSIC = "llvm.nvvm.mma.m8n8k4.row.col.f64"      # float64, sm_80+ (PTX ISA §9.7.14.5.1)
# fp8 mma.m16n8k32 needs PTX ISA 8.4 (and sm_89+).  Under "+ptx80" -- tilejit's sm_90a target --
# LLVM 22 cannot select the intrinsic and *aborts the process* ("LLVM ERROR: Cannot select"),
# so ``mma`` refuses fp8 unless the caller says the target's PTX ISA is new enough.
FP8_MIN_PTX = 84
# The switch: True makes a consumer's arrival on its cluster partner's mbarrier (``passes.multicast``)
# a release at cluster scope; False (the default) the arrival's default semantics, as CUTLASS's
# and TileLang's multicast pipelines arrive.  The cluster-scope release halved the paired fp8
# blockwise GEMM (H100, session 24, 4096^3 / 8192^3: 483 / 512 TFLOP/s against 822 / 971 without it).
CLUSTER_SCOPE_RELEASE = False


def mma(builder: ir.IRBuilder, a: list[ir.Value], b: list[ir.Value], c: list[ir.Value],
        kind, ptx_version: int = 80) -> list[ir.Value]:
    """``mma.sync.aligned.<shape>.row.col`` of ``kind`` (an A/B type name "bf16", "f16",
    "tf32", "s8", "e4m3", "e5m2", "f64", or a ``passes.mma_layouts.MmaKind``): ``a`` = 4 i32,
    ``b`` = 2 i32, ``c`` = 4 float (4 i32 for s8); returns the 4 accumulator values D ("f64":
    1 + 1 + 2 doubles, returns 2).  The f16
    intrinsic takes ``<2 x half>`` operands: the i32 registers are bitcast (same bits).  tf32
    operands are f32 bit patterns (round them with ``f32_to_tf32`` first; un-rounded bits are
    modelled as truncated by ``backends.emulate_mma``).  The fp8 kinds need sm_89+ and a target whose PTX
    ISA (``ptx_version``, e.g. 84 for "+ptx84") is at least ``FP8_MIN_PTX``."""
    ab_type = getattr(kind, "ab_type", kind)
    if ab_type == "f64":          # DMMA m8n8k4: one double of A and of B, two of C
        if (len(a), len(b), len(c)) != (1, 1, 2):
            raise ValueError(f"{DMMA_INTRINSIC} takes 1 + 1 + 2 doubles, got {len(a)} + {len(b)} + {len(c)}")
        fn = _declare(builder, DMMA_INTRINSIC, ir.LiteralStructType([F64] * 2), [F64] * 4)
        return _unpack(builder, builder.call(fn, [*a, *b, *c]), 2)
    name, int_acc = MMA_INTRINSICS[ab_type]
    if ab_type in ("e4m3", "e5m2") and ptx_version < FP8_MIN_PTX:
        raise ValueError(f"{name} needs PTX ISA {FP8_MIN_PTX / 10:.1f} (+ptx{FP8_MIN_PTX}); "
                         f"the target has {ptx_version / 10:.1f}")
    if (len(a), len(b), len(c)) != (4, 2, 4):
        raise ValueError(f"{name} takes 4 + 2 + 4 registers, got {len(a)} + {len(b)} + {len(c)}")
    acc = I32 if int_acc else F32
    if ab_type == "f16":
        a = [_as(builder, x, HALF2) for x in a]
        b = [_as(builder, x, HALF2) for x in b]
    else:
        a = [_as(builder, x, I32) for x in a]
        b = [_as(builder, x, I32) for x in b]
    c = [_as(builder, x, acc) for x in c]
    fn = _declare(builder, name, ir.LiteralStructType([acc] * 4), [x.type for x in (*a, *b, *c)])
    return _unpack(builder, builder.call(fn, [*a, *b, *c]), 4)


def _as(builder: ir.IRBuilder, x: ir.Value, ty: ir.Type) -> ir.Value:
    """``x`` as ``ty`` (a bitcast between same-width types; no-op when already ``ty``)."""
    return x if x.type == ty else builder.bitcast(x, ty)


def f32_pair_to_16(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value, kind: str, out: ir.Type) -> tuple:
    """Two f32 rounded to ``kind`` ("bf16" or "f16") by one ``cvt.rn.{kind}x2.f32`` (inline PTX,
    so LLVM does not split it again), as two ``out`` values.  ptxas serialises every wgmma of a
    loop that keeps a group in flight when the accumulators are read by scalar 16-bit
    conversions after it (its C7514 note), but not by the paired form."""
    fnty = ir.FunctionType(I32, [F32, F32])
    word = builder.asm(fnty, f"cvt.rn.{kind}x2.f32 $0, $2, $1;", "=r,f,f", [lo, hi], side_effect=False)
    i16 = ir.IntType(16)
    halves = builder.trunc(word, i16), builder.trunc(builder.lshr(word, ir.Constant(I32, 16)), i16)
    return tuple(builder.bitcast(h, out) for h in halves)


def f32_to_tf32(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``cvt.rna.tf32.f32``: an f32 rounded to tf32 (ties away from zero), as the i32 register
    an mma tf32 operand takes (``llvm.nvvm.f2tf32.rna``)."""
    return builder.call(_declare(builder, "llvm.nvvm.f2tf32.rna", I32, [F32]), [x])


# ------------------------------------------------------------------------------------- cp.async
def cp_async_16(builder: ir.IRBuilder, shared_ptr: ir.Value, global_ptr: ir.Value,
                src_bytes: ir.Value | None = None) -> None:
    """``cp.async.cg.shared.global [shared_ptr], [global_ptr], 16{, src_bytes}``: an async
    16-byte copy (both addresses 16-byte aligned).  With ``src_bytes`` (an i32, 0..16) only
    that many bytes are read and the rest of the 16 are zero-filled, so ``src_bytes = 0`` is a
    masked copy that writes zeros without touching global memory."""
    _check_pointer(shared_ptr, SHARED, "cp.async destination")
    _check_pointer(global_ptr, GLOBAL, "cp.async source")
    args = [shared_ptr, global_ptr]
    name = "llvm.nvvm.cp.async.cg.shared.global.16"
    if src_bytes is not None:
        name += ".s"
        args.append(src_bytes)
    builder.call(_declare(builder, name, ir.VoidType(), [x.type for x in args]), args)


def cp_async_commit_group(builder: ir.IRBuilder) -> None:
    """``cp.async.commit_group``."""
    builder.call(_declare(builder, "llvm.nvvm.cp.async.commit.group", ir.VoidType(), []), [])


def cp_async_wait_group(builder: ir.IRBuilder, n: int) -> None:
    """``cp.async.wait_group n``; ``n`` is an immediate (a Python int), as PTX requires."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"cp.async.wait_group needs a non-negative constant, got {n!r}")
    fn = _declare(builder, "llvm.nvvm.cp.async.wait.group", ir.VoidType(), [I32])
    builder.call(fn, [ir.Constant(I32, n)])


def cp_async_wait_all(builder: ir.IRBuilder) -> None:
    """``cp.async.wait_all`` (commit + wait for every group)."""
    builder.call(_declare(builder, "llvm.nvvm.cp.async.wait.all", ir.VoidType(), []), [])


# ---------------------------------------------------------------------------- wgmma (sm_90a)
I64 = ir.IntType(64)
SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}      # descriptor bits 62-63 for a swizzle span in bytes


def matrix_descriptor(builder: ir.IRBuilder, shared_ptr: ir.Value, lbo: int, sbo: int,
                      swizzle_bytes: int) -> ir.Value:
    """The 64-bit wgmma shared-memory matrix descriptor of the tile at ``shared_ptr``: start
    address, leading and stride byte offsets (each >> 4, 14 bits) in bits 0, 16 and 32, base
    offset 0 (tiles start on a 1024-byte boundary) and the swizzle mode in bits 62-63 (PTX ISA
    "Matrix Descriptor Format" of the asynchronous warpgroup mma)."""
    _check_pointer(shared_ptr, SHARED, "wgmma operand")
    addr = builder.zext(builder.ptrtoint(shared_ptr, I32), I64)
    start = builder.and_(builder.lshr(addr, ir.Constant(I64, 4)), ir.Constant(I64, 0x3FFF))
    fixed = ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | SWIZZLE_MODE[swizzle_bytes] << 62
    return builder.or_(start, ir.Constant(I64, fixed))


def wgmma(builder: ir.IRBuilder, acc: list[ir.Value] | None, a: ir.Value | list[ir.Value], desc_b: ir.Value,
          kind: str, n: int, b_n_major: bool, a_m_major: bool = False) -> list[ir.Value]:
    """``wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<kind>.<kind>``, D = A @ B + D, B from shared
    memory (a descriptor) and A from shared memory (``a`` a descriptor) or registers (``a`` four
    i32, the mma.sync A fragment of the warp's 16 rows).  LLVM 22 has no intrinsic for it
    (NVVM.md), so it is inline PTX with the accumulators tied in and out; ``imm-trans-b`` is 1
    for an N-major B, ``imm-trans-a`` 1 for an M-major A.  ``acc`` None: D = A @ B (``scale-d``
    false), the accumulators outputs only, so no zeros are moved into them first (ptxas injects
    a ``warpgroup.arrive`` (C7519) where such moves sit between two wgmma groups)."""
    fp8 = kind in ("e4m3", "e5m2")     # k32, both operands K-major: no transpose operands
    k = n // 2
    if (acc is not None and len(acc) != k) or kind not in ("bf16", "f16", "e4m3", "e5m2"):
        raise ValueError(f"wgmma m64n{n}k{32 if fp8 else 16} .{kind}: needs {k} f32 accumulators, got {len(acc)}")
    if fp8 and (b_n_major or a_m_major or isinstance(a, list)):
        raise ValueError(f"wgmma .{kind} reads both operands K-major from shared memory")
    tied = [] if acc is None else [str(i) for i in range(k)]          # the inputs tied to the outputs
    regs = ", ".join(f"${i}" for i in range(k))
    a_regs = isinstance(a, list)
    a_ops = [_as(builder, x, I32) for x in a] if a_regs else [a]
    first = k + len(tied)
    if a_regs:
        a_text = "{" + ", ".join(f"${first + i}" for i in range(4)) + "}"
        b_text, tail = f"${first + 4}", f"p, 1, 1, {int(b_n_major)}"
    else:
        a_text, b_text = f"${first}", f"${first + 1}"
        tail = "p, 1, 1" if fp8 else f"p, 1, 1, {int(a_m_major)}, {int(b_n_major)}"
    asm = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, {0 if acc is None else 1}, 0;\n"
           f"wgmma.mma_async.sync.aligned.m64n{n}k{32 if fp8 else 16}.f32.{kind}.{kind} {{{regs}}}, {a_text}, {b_text}, "
           f"{tail};\n}}")
    constraints = ",".join(["=f"] * k + tied + (["r"] * 4 if a_regs else ["l"]) + ["l"])
    fnty = ir.FunctionType(_f32_struct(builder, k), [F32] * len(tied) + [x.type for x in a_ops] + [I64])
    call = builder.asm(fnty, asm, constraints, [*(acc or []), *a_ops, desc_b], side_effect=True)
    return _unpack(builder, call, k)


def _f32_struct(builder: ir.IRBuilder, k: int) -> ir.BaseStructType:
    """The module's named struct of ``k`` floats (a wgmma's accumulator registers): each of the
    k ``extractvalue`` that unpack a wgmma names it in a few characters instead of spelling out
    k fields (an attention kernel's LLVM IR: 850 KB of text, 510 KB of it those types)."""
    struct = builder.module.context.get_identified_type(f"tj.f32x{k}")
    if struct.is_opaque:
        struct.set_body(*[F32] * k)
    return struct


def wgmma_fence(builder: ir.IRBuilder) -> None:
    builder.call(_declare(builder, "llvm.nvvm.wgmma.fence.sync.aligned", ir.VoidType(), []), [])


def wgmma_commit_group(builder: ir.IRBuilder) -> None:
    builder.call(_declare(builder, "llvm.nvvm.wgmma.commit_group.sync.aligned", ir.VoidType(), []), [])


def wgmma_wait_group(builder: ir.IRBuilder, n: int) -> None:
    fn = _declare(builder, "llvm.nvvm.wgmma.wait_group.sync.aligned", ir.VoidType(), [I64])
    builder.call(fn, [ir.Constant(I64, n)])


def hold_point(builder: ir.IRBuilder) -> None:
    """A point ptxas does not move instructions across: a branch on a condition it cannot decide
    (``%nctaid.x == 0``, never true) around a ``nanosleep``.  Before a ``wgmma.wait_group`` it keeps
    the wait there: without it ptxas hoists the wait above the work between the wgmma and the wait
    (an accumulation in flight under attention's softmax: ``defer_products``), as soon as the
    threads' next writes of the registers the wgmma reads would otherwise have to wait for it."""
    _void_asm(builder, "{\n.reg .pred %p;\n.reg .b32 %tjn;\nmov.u32 %tjn, %nctaid.x;\nsetp.eq.u32 %p, %tjn, 0;\n"
              "@!%p bra TJ_HOLD_${:uid};\nnanosleep.u32 0;\nTJ_HOLD_${:uid}:\n}", "~{memory}", [])


def fence_registers(builder: ir.IRBuilder, regs: list) -> list:
    """``regs`` through an empty asm that reads and writes them: code after it cannot be moved
    above it (CUTLASS's ``warpgroup_fence_operand``), so no accumulator is read before the
    ``wgmma.wait_group`` just emitted retires it."""
    out = []
    for r in regs:
        code = "r" if isinstance(r.type, ir.IntType) else "f"
        out.append(builder.asm(ir.FunctionType(r.type, [r.type]), "", f"={code},0", [r], side_effect=True))
    return out


def fence_proxy_async_shared(builder: ir.IRBuilder) -> None:
    builder.call(_declare(builder, "llvm.nvvm.fence.proxy.async.shared_cta", ir.VoidType(), []), [])


# --- Hopper mbarriers and TMA (inline PTX: one form on every LLVM the project supports) ------------
def _void_asm(builder: ir.IRBuilder, text: str, constraints: str, args: list) -> None:
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    builder.asm(fnty, text, constraints, args, side_effect=True)


def grid_dependency(builder: ir.IRBuilder, action: str) -> None:
    """Programmatic dependent launch (sm_90+, PTX 7.8): ``griddepcontrol.wait`` (the prior grids
    have ended and their writes are visible) or ``.launch_dependents``; a memory clobber keeps
    LLVM from moving loads across it."""
    text = {"wait": "griddepcontrol.wait;", "launch": "griddepcontrol.launch_dependents;"}[action]
    _void_asm(builder, text, "~{memory}", [])


def mbarrier_init(builder: ir.IRBuilder, bar: ir.Value, count: int) -> None:
    _void_asm(builder, f"mbarrier.init.shared::cta.b64 [$0], {count};", "r,~{memory}", [bar])


def mbarrier_expect_tx(builder: ir.IRBuilder, bar: ir.Value, nbytes: int) -> None:
    _void_asm(builder, f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {nbytes};", "r,~{memory}", [bar])


def mbarrier_wait(builder: ir.IRBuilder, bar: ir.Value, parity: ir.Value) -> None:
    """Spin on ``mbarrier.try_wait.parity`` (each try already suspends for a while)."""
    text = ("{\n.reg .pred %p;\nTJ_WAIT_${:uid}:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 %p, [$0], $1;\n"
            "@!%p bra TJ_WAIT_${:uid};\n}")
    _void_asm(builder, text, "r,r,~{memory}", [bar, parity])


def mbarrier_inval(builder: ir.IRBuilder, bar: ir.Value) -> None:
    _void_asm(builder, "mbarrier.inval.shared::cta.b64 [$0];", "r,~{memory}", [bar])


def fence_mbarrier_init(builder: ir.IRBuilder) -> None:
    _void_asm(builder, "fence.mbarrier_init.release.cluster;", "~{memory}", [])


def tma_load(builder: ir.IRBuilder, tensor_map: ir.Value, dst: ir.Value, bar: ir.Value, coords: list,
             multicast: int = 0) -> None:
    """``cp.async.bulk.tensor`` global -> shared of one box at ``coords`` (innermost first);
    with ``multicast`` (a mask of cluster CTA ranks) into each of those CTAs' shared memory at
    ``dst``, completing on each one's mbarrier at ``bar``."""
    rank = len(coords)
    places = ", ".join(f"${3 + i}" for i in range(rank))
    text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            f"{'.multicast::cluster' if multicast else ''} [$0], [$1, {{{places}}}], [$2]")
    if multicast:
        text = "{\n.reg .b16 %tj_mask;\n" + f"mov.b16 %tj_mask, {multicast};\n" + text + ", %tj_mask;\n}"
    else:
        text += ";"
    _void_asm(builder, text, "r,l,r" + ",r" * rank + ",~{memory}", [dst, tensor_map, bar, *coords])


def tma_store(builder: ir.IRBuilder, tensor_map: ir.Value, src: ir.Value, coords: list) -> None:
    """``cp.async.bulk.tensor`` shared -> global of one box at ``coords`` (innermost first), in
    this thread's current bulk group."""
    rank = len(coords)
    places = ", ".join(f"${2 + i}" for i in range(rank))
    text = f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [$0, {{{places}}}], [$1];"
    _void_asm(builder, text, "l,r" + ",r" * rank + ",~{memory}", [tensor_map, src, *coords])


def tma_store_wait(builder: ir.IRBuilder) -> None:
    """Commit this thread's bulk copies as a group and wait until they have read shared memory."""
    _void_asm(builder, "cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;", "~{memory}", [])


def mbarrier_arrive(builder: ir.IRBuilder, bar: ir.Value, rank: ir.Value | None = None) -> None:
    """Arrive on the mbarrier at ``bar``; with ``rank``, on the one at that address in the
    cluster's CTA ``rank`` (a consumer releasing its partner's slot: its reads of the slot are
    done, retired by ``wgmma.wait`` or by its loads' values; the arrival's default release
    semantics, as CUTLASS's and TileLang's pipelines use, unless ``CLUSTER_SCOPE_RELEASE``)."""
    if rank is None:
        _void_asm(builder, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [bar])
        return
    sem = ".release.cluster" if CLUSTER_SCOPE_RELEASE else ""
    text = ("{\n.reg .b32 %tj_remote;\nmapa.shared::cluster.u32 %tj_remote, $0, $1;\n"
            f"mbarrier.arrive{sem}.shared::cluster.b64 _, [%tj_remote];\n}}")
    _void_asm(builder, text, "r,r,~{memory}", [bar, rank])


def cluster_barrier(builder: ir.IRBuilder) -> None:
    """Every thread of the cluster's CTAs arrives (release) and waits (acquire)."""
    _void_asm(builder, "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;",
              "~{memory}", [])


def load_shared_cluster(builder: ir.IRBuilder, addr: ir.Value, rank: ir.Value, on: ir.Value, other: ir.Value,
                        bits: int) -> ir.Value:
    """The ``bits``-wide integer at shared byte address ``addr`` of the cluster's CTA ``rank``
    where ``on`` (an i32, nonzero) holds, else ``other`` (8-bit values travel in an i16).  The
    result is early-clobber: ``other`` is moved into it before the address and rank are read."""
    width = max(bits, 16)
    reg, kind = {16: ("h", "b16" if bits == 16 else "u8"), 32: ("r", "b32"), 64: ("l", "b64")}[width]
    text = ("{\n.reg .pred %tj_on;\n.reg .b32 %tj_remote;\n"
            "setp.ne.b32 %tj_on, $3, 0;\n"
            f"mov.b{width} $0, $4;\n"
            "@%tj_on mapa.shared::cluster.u32 %tj_remote, $1, $2;\n"
            f"@%tj_on ld.shared::cluster.{kind} $0, [%tj_remote];\n}}")
    fnty = ir.FunctionType(ir.IntType(width), [addr.type, rank.type, on.type, other.type])
    return builder.asm(fnty, text, f"=&{reg},r,r,r,{reg},~{{memory}}", [addr, rank, on, other], side_effect=True)


def setmaxnreg(builder: ir.IRBuilder, n: int, inc: bool) -> None:
    _void_asm(builder, f"setmaxnreg.{'inc' if inc else 'dec'}.sync.aligned.u32 {n};", "~{memory}", [])
