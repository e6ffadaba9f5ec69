"""Global and shared memory access for LLVM emission: masked, vectorised loads and stores.

A group of ``vec`` registers that the SIMT IR marks contiguous and ``vec * itemsize`` aligned
becomes one vector access (``ld.global.v4.b32`` for four floats) when all its masks are true,
and per-element predicated accesses otherwise; masked-off loads read ``GlobalAttrs.other``.
Vector accesses are at most 16 bytes (the widest PTX load), so longer groups are split.
"""
from __future__ import annotations

import math

from llvmlite import ir

from tilejit.abi import ASSERT_SYMBOL, ASSERT_WORDS
from tilejit.codegen import mma
from tilejit.codegen.base import I8, I32, I64, SHARED, Ctx, const, mem_type, reg_type
from tilejit.dtypes import DType

SHARED_SYMBOL = "tj_smem"        # the kernel's dynamic shared memory buffer
ZEROS_SYMBOL = "tj_zeros"        # 16 zero bytes in global memory: where a masked-off vector load reads
# The switch: True loads a masked vector group without a branch where its masks are a prefix of
# the group (``GlobalAttrs.prefix``): the address is the group's where it is whole, else
# ``ZEROS_SYMBOL``'s (a select, then one unconditional vector load), and the group reads ``other``
# where not whole; only a group the array's edge cuts (some masks true, not all) branches to the
# element-wise loads.  So a tile's vector loads are straight-line code that ptxas can schedule
# together, not each inside its own branch (W4A16 decode: 6 LDG.128 a K tile, each behind a
# branch).  False: the vector load sits in a branch taken where the group is whole.  Off: on the
# H100 (2026-12-06, scripts/gpu_s25b.sh, alternating) W4A16 M1 measured 39.7 / 116.8 us on against
# 39.4-39.6 / 115.5-116.1 off (N 8192 / 28672), and with tiled weights 37.8-38.0 / 117.1-117.6
# against 35.4 / 106.3: the loop is not bound by the branches; correct on the GPU (25 tests).
BRANCH_FREE_LOADS = False


def to_reg(ctx: Ctx, v, dt: DType):
    """A loaded element as a register (bool bytes become i1)."""
    return ctx.builder.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.is_bool else v


def to_mem(ctx: Ctx, v, dt: DType):
    """A register as the element to store (i1 becomes a 0/1 byte)."""
    return ctx.builder.zext(v, I8) if dt.is_bool else v


def _groups(n: int, vec: int, dt: DType) -> list[tuple[int, int]]:
    """(first register, size) of each vector group; sizes are powers of two of at most 16 bytes."""
    size = max(1, min(vec, 16 // dt.itemsize))
    if n % size or size * dt.itemsize < 2 or size & (size - 1):
        size = 1
    return [(i, size) for i in range(0, n, size)]


def _vector_load(ctx: Ctx, ptr, dt: DType, size: int) -> list:
    b = ctx.builder
    if size == 1:
        return [to_reg(ctx, b.load(ptr, typ=mem_type(dt), align=dt.itemsize), dt)]
    vty = ir.VectorType(mem_type(dt), size)
    vector = b.load(ptr, typ=vty, align=size * dt.itemsize)
    return [to_reg(ctx, b.extract_element(vector, ir.Constant(I32, j)), dt) for j in range(size)]


def _vector_store(ctx: Ctx, ptr, values: list, dt: DType) -> None:
    b = ctx.builder
    if len(values) == 1:
        b.store(to_mem(ctx, values[0], dt), ptr, align=dt.itemsize)
        return
    vector = ir.Constant(ir.VectorType(mem_type(dt), len(values)), None)
    for j, v in enumerate(values):
        vector = b.insert_element(vector, to_mem(ctx, v, dt), ir.Constant(I32, j))
    b.store(vector, ptr, align=len(values) * dt.itemsize)


def _element_ptr(ctx: Ctx, base, offset, dt: DType):
    return ctx.builder.gep(base, [offset], source_etype=mem_type(dt))


def _group_ptrs(ctx: Ctx, base, first_offset, size: int, dt: DType) -> list:
    """The pointers of the first ``size`` elements of a vector group (its offsets are consecutive:
    ``vec`` says so; an unmasked group needs only the first): the first from the offset, the rest
    a constant step from it.  (One pointer per element from its own offset gave the NVPTX back
    end's strength reduction dozens of same-base addresses to compare pairwise: a sixth of a big
    kernel's compile.)"""
    first = _element_ptr(ctx, base, first_offset, dt)
    return [first] + [ctx.builder.gep(first, [ir.Constant(I32, j)], source_etype=mem_type(dt)) for j in range(1, size)]


def _all_true(ctx: Ctx, masks: list):
    acc = masks[0]
    for m in masks[1:]:
        acc = ctx.builder.and_(acc, m)
    return acc


def _any_true(ctx: Ctx, masks: list):
    acc = masks[0]
    for m in masks[1:]:
        acc = ctx.builder.or_(acc, m)
    return acc


def _if_else(ctx: Ctx, cond, then_fn, else_fn, name: str):
    """Emit ``cond ? then_fn() : else_fn()`` as branches; both return lists of equal types."""
    b = ctx.builder
    then_bb, else_bb, join_bb = ctx.block(f"{name}.then"), ctx.block(f"{name}.else"), ctx.block(f"{name}.join")
    b.cbranch(cond, then_bb, else_bb)
    b.position_at_end(then_bb)
    then_vals, then_end = then_fn(), b.block
    b.branch(join_bb)
    b.position_at_end(else_bb)
    else_vals, else_end = else_fn(), b.block
    b.branch(join_bb)
    b.position_at_end(join_bb)
    merged = []
    for tv, ev in zip(then_vals, else_vals):
        phi = b.phi(tv.type)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(ev, else_end)
        merged.append(phi)
    return merged


def _masked_load(ctx: Ctx, ptr, mask, dt: DType, other):
    return _if_else(ctx, mask, lambda: _vector_load(ctx, ptr, dt, 1), lambda: [other], "ld")[0]


def _whole_and_any(ctx: Ctx, masks: list, prefix: bool):
    """(every mask holds, some mask holds) of a group; ``prefix``: the true masks are a prefix
    of the group (``GlobalAttrs.prefix``), so its last and first tell.  A masked vector group
    takes the vector access where whole, skips where none holds, else goes element by element
    (measured on the H100 against one AND of every mask then element by element: the same
    speed at W4A16 decode, 2026-12-05)."""
    if prefix:
        return masks[-1], masks[0]
    return _all_true(ctx, masks), _any_true(ctx, masks)


def load_global(ctx: Ctx, base, offsets: list, masks: list | None, dt: DType, vec: int, other,
                prefix: bool = False) -> list:
    """Registers read from ``base[offsets[i]]``; where ``masks[i]`` is false, ``other``."""
    other_value = const(dt, other)
    out, cuts = [], []
    for first, size in _groups(len(offsets), vec, dt):
        ptrs = _group_ptrs(ctx, base, offsets[first], size if masks is not None else 1, dt)
        if masks is None:
            out += _vector_load(ctx, ptrs[0], dt, size)
            continue
        group_masks = masks[first:first + size]

        def slow(ptrs=ptrs, group_masks=group_masks):
            return [_masked_load(ctx, p, m, dt, other_value) for p, m in zip(ptrs, group_masks)]
        if size == 1:
            out += slow()
            continue
        # the branches merge the raw memory vector and the registers are unpacked after the join:
        # a conversion inside the branch (bf16 -> f32) would wait for the load there and keep
        # the next group's load from being issued until this one lands
        vty = ir.VectorType(mem_type(dt), size)

        def fast(ptr=ptrs[0], vty=vty, size=size):
            return [ctx.builder.load(ptr, typ=vty, align=size * dt.itemsize)]

        def gather(values, vty=vty):
            vector = ir.Constant(vty, None)
            for j, v in enumerate(values):
                vector = ctx.builder.insert_element(vector, to_mem(ctx, v, dt), ir.Constant(I32, j))
            return [vector]

        whole, some = _whole_and_any(ctx, group_masks, prefix)
        if BRANCH_FREE_LOADS and prefix:
            zero_bits = other == 0 and math.copysign(1.0, float(other)) > 0       # the zeros read as other
            vector, cut = _branch_free_group(ctx, ptrs[0], vty, whole, some, gather, dt,
                                             None if zero_bits else other_value, size)
            cuts.append((len(out), vector, cut, slow, gather, size))
            out += [None] * size
            continue

        def partial(slow=slow, some=some, size=size):
            # a group wholly outside (a decode tile's padding rows: 15 of 16 at M = 1) costs one
            # test instead of a branch per element
            return _if_else(ctx, some, lambda: gather(slow()), lambda: gather([other_value] * size), "vpart")
        vector = _if_else(ctx, whole, fast, partial, "vld")[0]
        out += [to_reg(ctx, ctx.builder.extract_element(vector, ir.Constant(I32, j)), dt) for j in range(size)]
    # the groups the array's edge cuts, after every group's load: the loads stay one block
    for at, vector, cut, slow, gather, size in cuts:
        vector = _if_else(ctx, cut, lambda slow=slow, gather=gather: gather(slow()), lambda v=vector: [v], "vcut")[0]
        out[at:at + size] = [to_reg(ctx, ctx.builder.extract_element(vector, ir.Constant(I32, j)), dt)
                             for j in range(size)]
    return out


def _zeros_pointer(ctx: Ctx):
    """The module's 16 zero bytes in global memory (``ZEROS_SYMBOL``), as a generic global pointer."""
    existing = ctx.module.globals.get(ZEROS_SYMBOL)
    if existing is None:
        kind = ir.ArrayType(I32, 4)
        existing = ir.GlobalVariable(ctx.module, kind, ZEROS_SYMBOL, addrspace=1)
        existing.global_constant = True
        existing.linkage = "internal"
        existing.initializer = ir.Constant(kind, [ir.Constant(I32, 0)] * 4)
        existing.align = 16
    return existing


def _branch_free_group(ctx: Ctx, ptr, vty, whole, some, gather, dt: DType, other_value, size: int):
    """One masked vector group (masks a prefix) as ``BRANCH_FREE_LOADS`` describes: (the vector
    where the group is whole or wholly masked off, whether the array's edge cuts it);
    ``other_value`` None: ``other`` is all zero bits, as the zeros read."""
    b = ctx.builder
    zeros = b.bitcast(_zeros_pointer(ctx), ptr.type)
    vector = b.load(b.select(whole, ptr, zeros), typ=vty, align=size * dt.itemsize)
    if other_value is not None:
        vector = b.select(whole, vector, gather([other_value] * size)[0])
    return vector, b.and_(some, b.not_(whole))


def store_global(ctx: Ctx, base, offsets: list, values: list, masks: list | None, dt: DType, vec: int,
                 prefix: bool = False) -> None:
    """``base[offsets[i]] = values[i]`` where ``masks[i]`` is true."""
    for first, size in _groups(len(offsets), vec, dt):
        ptrs = _group_ptrs(ctx, base, offsets[first], size if masks is not None else 1, dt)
        group = values[first:first + size]
        if masks is None:
            _vector_store(ctx, ptrs[0], group, dt)
            continue
        group_masks = masks[first:first + size]

        def slow(ptrs=ptrs, group=group, group_masks=group_masks):
            for p, v, m in zip(ptrs, group, group_masks):
                _if_else(ctx, m, lambda p=p, v=v: _vector_store(ctx, p, [v], dt) or [], lambda: [], "st")
            return []
        if size == 1:
            slow()
        else:
            whole, some = _whole_and_any(ctx, group_masks, prefix)
            _if_else(ctx, whole, lambda ptrs=ptrs, group=group: _vector_store(ctx, ptrs[0], group, dt) or [],
                     lambda slow=slow, some=some: _if_else(ctx, some, slow, lambda: [], "vspart"), "vst")


_ATOM_OPS = {"add": "add", "max": "max", "min": "min", "and": "and", "or": "or", "xor": "xor", "xchg": "exch",
             "cas": "cas"}


def _atom_type(kind: str, dt: DType) -> str:
    """The PTX type suffix of ``atom.kind`` on ``dt`` (bitwise ops and exch take .b, min/max the
    signedness, add .u for either sign, its bits being the same)."""
    if dt.is_float:
        return f".f{dt.bits}" if kind == "add" else f".b{dt.bits}"
    if kind in ("and", "or", "xor", "xchg", "cas"):
        return f".b{dt.bits}"
    if kind in ("max", "min"):
        return f".{'s' if dt.kind == 'i' else 'u'}{dt.bits}"
    return f".u{dt.bits}"


REDUCTION_KINDS = ("add", "max", "min", "and", "or", "xor")     # what ``red`` does (not exch, cas)


def reduction_allowed(attrs, dt: DType) -> bool:
    """Whether an atomic whose old values nobody reads may be a ``red`` (no result register, no
    wait for the old value): the kinds and orders ``red`` has (not acquire: nothing is read)."""
    return (attrs.kind in REDUCTION_KINDS and attrs.sem in ("relaxed", "release")
            and not (attrs.kind in ("max", "min") and dt.is_float))


def reduce_global(ctx: Ctx, base, offsets: list, values: list, masks: list, dt: DType, attrs) -> None:
    """One ``red.{sem}.{scope}.global`` per element where its mask holds: an atomic update whose
    old value is not returned (``reduction_allowed``)."""
    b = ctx.builder
    reg = reg_type(dt)
    letter = "f" if dt.is_float else "l" if dt.bits == 64 else "r"
    asm = f"red.{attrs.sem}.{attrs.scope}.global.{_ATOM_OPS[attrs.kind]}{_atom_type(attrs.kind, dt)} [$0], $1;"
    fnty = ir.FunctionType(ir.VoidType(), [I64, reg])
    for offset, value, mask in zip(offsets, values, masks):
        address = b.ptrtoint(_element_ptr(ctx, base, offset, dt), I64)
        with b.if_then(mask):
            b.asm(fnty, asm, f"l,{letter},~{{memory}}", [address, value], side_effect=True)


def atomic_global(ctx: Ctx, base, offsets: list, values: list, masks: list, dt: DType, attrs,
                  cmps: list | None = None) -> list:
    """One ``atom.{sem}.{scope}.global`` per element where its mask holds (the old value; 0
    elsewhere), as inline PTX: LLVM's atomicrmw cannot say the scope.  ``cmps``: atomic_cas's
    compared values (``atom.cas d, [a], cmp, new``)."""
    b = ctx.builder
    reg = reg_type(dt)
    letter = "f" if dt.is_float else "l" if dt.bits == 64 else "r"
    inputs = "$2, $3" if cmps is not None else "$2"
    asm = f"atom.{attrs.sem}.{attrs.scope}.global.{_ATOM_OPS[attrs.kind]}{_atom_type(attrs.kind, dt)} $0, [$1], {inputs};"
    n_in = 2 if cmps is not None else 1
    fnty = ir.FunctionType(reg, [I64] + [reg] * n_in)
    constraints = f"={letter},l," + ",".join([letter] * n_in) + ",~{memory}"
    out = []
    for i, (offset, value, mask) in enumerate(zip(offsets, values, masks)):
        address = b.ptrtoint(_element_ptr(ctx, base, offset, dt), I64)
        args = [address] + ([cmps[i]] if cmps is not None else []) + [value]
        out += _if_else(ctx, mask, lambda args=args: [b.asm(fnty, asm, constraints, args, side_effect=True)],
                        lambda: [ir.Constant(reg, 0)], "atom")
    return out


def device_print(ctx: Ctx, pids: list, coords: list, values: list, masks: list, dtypes: list, attrs) -> None:
    """One ``vprintf`` per register whose mask holds: ``pid (x, y, z) idx (i, j) prefix v...``
    (the format of ``ir.print_line``: floats as ``%g`` of a double, integers as ``%lld``)."""
    b = ctx.builder
    where = "pid (%d, %d, %d)" + ("" if attrs.scalar else " idx (" + ", ".join(["%d"] * len(coords)) + ")")
    shown = " ".join("%g" if dt.is_float else "%llu" if dt.kind == "u" else "%lld" for dt in dtypes)
    text = (f"{where} {attrs.prefix.replace('%', '%%')} {shown}".rstrip() + "\n").encode() + b"\0"
    fmt = ir.GlobalVariable(ctx.module, ir.ArrayType(I8, len(text)), ctx.module.get_unique_name("fmt"), addrspace=1)
    fmt.global_constant, fmt.linkage = True, "internal"
    fmt.initializer = ir.Constant(ir.ArrayType(I8, len(text)), bytearray(text))
    generic = b.addrspacecast(fmt, ir.PointerType())
    vprintf = ctx.intrinsic("vprintf", I32, [ir.PointerType(), ir.PointerType()])
    fields = [I32] * (3 + (0 if attrs.scalar else len(coords))) + [ir.DoubleType() if dt.is_float else I64 for dt in dtypes]
    record = ir.LiteralStructType(fields)
    for r, mask in enumerate(masks):
        def emit(r=r):
            slot = b.alloca(record)
            items = list(pids) + ([] if attrs.scalar else [c[r] for c in coords])
            for dt, v in zip(dtypes, values):
                x = v[r]
                if dt.is_float:
                    items.append(x if x.type == ir.DoubleType() else b.fpext(x, ir.DoubleType()))
                elif x.type.width == 64:
                    items.append(x)
                else:
                    items.append(b.zext(x, I64) if dt.kind in "ub" else b.sext(x, I64))
            for i, item in enumerate(items):
                b.store(item, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
            b.call(vprintf, [generic, b.bitcast(slot, ir.PointerType())])
            return []
        _if_else(ctx, mask, emit, lambda: [], "print")




def device_assert(ctx: Ctx, ident: int, pids: list, coords: list, failed: list) -> None:
    """Record the first failing register of the whole launch in the module's global
    ``ASSERT_SYMBOL``: word 0 goes from 0 to ``ident + 1`` by compare-and-swap, and only the
    thread that swapped writes the program id and the element's coordinates after it."""
    b = ctx.builder
    record = ctx.module.globals.get(ASSERT_SYMBOL)
    if record is None:
        record = ir.GlobalVariable(ctx.module, ir.ArrayType(I32, ASSERT_WORDS), ASSERT_SYMBOL, addrspace=1)
        record.initializer = ir.Constant(ir.ArrayType(I32, ASSERT_WORDS), [0] * ASSERT_WORDS)
        record.align = 16

    def word(i):
        return b.gep(record, [ir.Constant(I32, 0), ir.Constant(I32, i)])

    for r, bad in enumerate(failed):
        def report(r=r):
            old = b.cmpxchg(word(0), ir.Constant(I32, 0), ir.Constant(I32, ident + 1), "monotonic", "monotonic")

            def fill():
                items = list(pids) + [c[r] for c in coords][:ASSERT_WORDS - 4]
                for i, item in enumerate(items):
                    b.store(item, word(1 + i))
                return []
            _if_else(ctx, b.extract_value(old, 1), fill, lambda: [], "assert.first")
            return []
        _if_else(ctx, bad, report, lambda: [], "assert")


# ---------------------------------------------------------------------------------- shared memory
def shared_buffer(ctx: Ctx) -> ir.GlobalVariable:
    """The kernel's one dynamic shared buffer: ``extern __shared__ __align__(16) char[]``."""
    existing = ctx.module.globals.get(SHARED_SYMBOL)
    if existing is not None:
        return existing
    buf = ir.GlobalVariable(ctx.module, ir.ArrayType(I8, 0), SHARED_SYMBOL, addrspace=SHARED)
    buf.linkage = "external"
    buf.type = ir.PointerType(addrspace=SHARED)   # opaque, like LLVM's own (llvmlite types it)
    buf.align = 1024      # wgmma swizzle atoms (passes.wgmma) start on 1024-byte boundaries
    return buf


def _shared_ptr(ctx: Ctx, addr):
    return ctx.builder.gep(shared_buffer(ctx), [addr], source_etype=I8)


def shared_pointer(ctx: Ctx, addr):
    """``ptr addrspace(3)`` to shared byte address ``addr`` (an i32)."""
    return _shared_ptr(ctx, addr)


def load_shared(ctx: Ctx, addrs: list, n: int, dt: DType, vec: int, masks: list | None = None,
                other=0) -> list:
    """Registers read from shared byte addresses ``addrs`` (one per register); with ``masks``,
    ``other`` where a mask is false.  Every address is read whatever its mask; one branch per
    access skips the selects when all of the thread's masks hold."""
    if masks is None:
        out = []
        for first, size in _groups(n, vec, dt):
            out += _vector_load(ctx, _shared_ptr(ctx, addrs[first]), dt, size)
        return out
    b, groups = ctx.builder, _groups(n, vec, dt)
    types = [ir.VectorType(mem_type(dt), size) if size > 1 else mem_type(dt) for _, size in groups]
    raw = [b.load(_shared_ptr(ctx, addrs[first]), typ=ty, align=size * dt.itemsize)
           for (first, size), ty in zip(groups, types)]
    fill = to_mem(ctx, const(dt, other), dt)

    def selected():
        out = []
        for (first, size), v in zip(groups, raw):
            if size == 1:
                out.append(b.select(masks[first], v, fill))
                continue
            for j in range(size):
                e = b.select(masks[first + j], b.extract_element(v, ir.Constant(I32, j)), fill)
                v = b.insert_element(v, e, ir.Constant(I32, j))
            out.append(v)
        return out
    merged = _if_else(ctx, _all_true(ctx, masks), lambda: raw, selected, "lds")
    out = []
    for (first, size), v in zip(groups, merged):
        out += [to_reg(ctx, v, dt)] if size == 1 else \
            [to_reg(ctx, b.extract_element(v, ir.Constant(I32, j)), dt) for j in range(size)]
    return out


def store_shared(ctx: Ctx, addrs: list, values: list, dt: DType, vec: int) -> None:
    """Write ``values`` to shared byte addresses ``addrs`` (one per register)."""
    for first, size in _groups(len(values), vec, dt):
        _vector_store(ctx, _shared_ptr(ctx, addrs[first]), values[first:first + size], dt)



# ------------------------------------------------------------------------ tensor-core helpers
def pack(ctx: Ctx, values: list, dt: DType) -> list:
    """Consecutive ``dt`` registers packed into i32 registers, lowest element in the low bits."""
    per = 32 // dt.bits
    out = []
    for first in range(0, len(values), per):
        group = values[first:first + per]
        if per == 1:
            out.append(ctx.builder.bitcast(group[0], I32) if group[0].type != I32 else group[0])
            continue
        vector = ir.Constant(ir.VectorType(mem_type(dt), per), None)
        for j, v in enumerate(group):
            vector = ctx.builder.insert_element(vector, v, ir.Constant(I32, j))
        out.append(ctx.builder.bitcast(vector, I32))
    return out


def unpack(ctx: Ctx, words: list, dt: DType) -> list:
    """i32 registers split into ``dt`` registers, the low bits first (the inverse of ``pack``)."""
    per = 32 // dt.bits
    out = []
    for w in words:
        if per == 1:
            out.append(ctx.builder.bitcast(w, mem_type(dt)) if w.type != mem_type(dt) else w)
            continue
        vector = ctx.builder.bitcast(w, ir.VectorType(mem_type(dt), per))
        out += [ctx.builder.extract_element(vector, ir.Constant(I32, j)) for j in range(per)]
    return out


def cp_async(ctx: Ctx, base, offsets: list, addrs: list, sizes: list, dt: DType) -> None:
    """One 16-byte ``cp.async.cg`` (zero-filling past ``sizes[i]`` bytes) per register."""
    for offset, addr, size in zip(offsets, addrs, sizes):
        mma.cp_async_16(ctx.builder, _shared_ptr(ctx, addr),
                                _element_ptr(ctx, base, offset, dt), size)
