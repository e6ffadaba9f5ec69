"""Hopper warpgroup mma (``wgmma.mma_async``, sm_90a) for the pipelined GEMM main loop.

    choose_wgmma(fn, num_warps, target) -> fn        (tile IR stage, before assign_layouts)
    lower_wgmma(lw, o, cfg, a_src, b_src) -> value     (SIMT lowering of one chosen DOT)

A DOT qualifies when it sits in a ``tj.range(..., stages>=2)`` loop and reads two tiles loaded
in that loop body (so both reach shared memory through cp.async rings, ``pipeline_loads``),
A is not transposed and B is plain (k rows of n: "N-major"), the inputs are fp16/bf16, and the
CTA tile is one 64-row warpgroup slice per four warps (M = 16 * num_warps) with N a multiple
of 64 up to 256 and K rows of 32, 64 or 128 bytes.  The accumulator keeps the mma.sync
C-fragment layout with warps (num_warps, 1) -- wgmma's D fragment is that layout -- so
everything after the DOT (epilogue, conversions) is shared with the mma.sync path.

Shared layouts (PTX ISA, "Shared Memory Matrix Layout" and "Matrix Descriptor Format"):
A (M x K) keeps the ldmatrix tile layout, rows of K swizzled on 16-byte chunks; with rows of
R = 32/64/128 bytes that is exactly the K-major SW32/64/128 layout (8-row groups 8R apart).
B (K x N) is stored as 64-column atoms: atom ``a`` holds columns 64a..64a+63 of all K rows,
128 bytes per row, SW128-swizzled, atoms ``K * 128`` bytes apart (the descriptor's LBO; SBO
is 1024, eight rows).  Tiles start on 1024-byte boundaries (the swizzle uses address bits).

Each DOT: ``wgmma.fence``, one ``wgmma`` per 16-wide k step (A's start moves 32 bytes inside
its rows, B's 16 rows), ``commit_group``, then ``wait_group 1`` when the ring has 3 or more
slots (one group stays in flight across iterations; ``pipeline_loads`` then copies a slot
less ahead) else ``wait_group 0``.  The ring's per-iteration barrier is preceded by
``fence.proxy.async`` so cp.async bytes are visible to the tensor cores.
``TILEJIT_WGMMA=0`` turns the path off (mma.sync with the same warp split is used instead).
"""
from __future__ import annotations

import dataclasses
import os

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import DotAttrs, TileOp
from tilejit.simt import RegType, SimtOp

I32 = D.int32
ATOM_BYTES = 128                # an N-major B atom row: 64 fp16/bf16 columns
A_ROW_BYTES = (32, 64, 128)     # K-major swizzle spans wgmma supports


def enabled(target: str) -> bool:
    return target == "sm_90a" and os.environ.get("TILEJIT_WGMMA", "1") != "0"


def _loaded_in(v: ir.Value, body: ir.Block, allow_trans: bool) -> bool:
    """``v`` is a LOAD of ``body`` seen through unit-dim reshapes (and a TRANS if allowed)."""
    while v.owner is not None and v.owner.op in (TileOp.RESHAPE, TileOp.TRANS):
        if v.owner.op is TileOp.TRANS and not allow_trans:
            return False
        v = v.owner.operands[0]
    return v.owner is not None and v.owner.op is TileOp.LOAD and v.owner in body.ops


def qualifies(dot: ir.Operation, body: ir.Block, num_warps: int) -> bool:
    a, b = dot.operands[0].type, dot.operands[1].type
    if a.dtype != b.dtype or a.dtype not in (D.bfloat16, D.float16) or len(a.shape) != 2:
        return False
    (m, k), n = a.shape, b.shape[1]
    item = a.dtype.itemsize
    return (num_warps % 4 == 0 and m == 16 * num_warps and k % 16 == 0 and k * item in A_ROW_BYTES
            and n % (ATOM_BYTES // item) == 0 and n <= 256
            and _loaded_in(dot.operands[0], body, False) and _loaded_in(dot.operands[1], body, False))


def choose_wgmma(fn: ir.Function, num_warps: int, target: str) -> ir.Function:
    """Mark the DOTs that take the wgmma path: ``DotAttrs(wgmma=True, warps=(num_warps, 1))``."""
    if not enabled(target):
        return fn
    for o in fn.walk():
        if o.op is not TileOp.FOR or o.attrs is None or o.attrs.stages < 2:
            continue
        body = o.regions[0]
        for dot in body.ops:
            if dot.op is TileOp.DOT and qualifies(dot, body, num_warps):
                dot.attrs = dataclasses.replace(dot.attrs or DotAttrs(), warps=(num_warps, 1), wgmma=True)
    return fn


def b_atom_offsets(lw, layout, item: int, k_rows: int) -> ir.Value:
    """Byte offset in an N-major B slot of each register of the 2-D (k, n) ``layout`` (a
    prologue vector): atom ``col // 128`` (``k_rows * 128`` bytes each), row ``k`` of 128 bytes,
    16-byte chunk XOR ``k % 8`` (``b_atom_table`` is the NumPy twin)."""
    from tilejit.passes.lower_dot import tile_coords

    def make():
        p, n = lw.prologue, layout.n
        rows, cols = tile_coords(lw, layout, item)

        def k(v):
            return lw.const(I32, [v] * n, p)

        def ew(op, x, y):
            return lw.ew(op, [x, y], I32, p)
        inner = ew(TileOp.AND, cols, k(127))
        chunk = ew(TileOp.XOR, ew(TileOp.SHR, inner, k(4)), ew(TileOp.AND, rows, k(7)))
        out = ew(TileOp.ADD, ew(TileOp.MUL, ew(TileOp.SHR, cols, k(7)), k(k_rows * ATOM_BYTES)),
                 ew(TileOp.SHL, rows, k(7)))
        out = ew(TileOp.ADD, out, ew(TileOp.SHL, chunk, k(4)))
        return ew(TileOp.ADD, out, ew(TileOp.AND, inner, k(15)))
    return lw.geo(("b_atoms", layout, item, k_rows), make)


def b_atom_table(rows, cols_bytes, k_rows: int):
    """NumPy twin of ``b_atom_offsets`` (for tests and the emulator's checks)."""
    inner = cols_bytes & 127
    return (cols_bytes >> 7) * k_rows * ATOM_BYTES + rows * ATOM_BYTES + \
        (((inner >> 4) ^ (rows & 7)) << 4) + (inner & 15)


def lower_wgmma(lw, o: ir.Operation, cfg, a_src: tuple, b_src: tuple) -> ir.Value:
    """The DOT ``o`` as wgmma over its k steps; ``a_src`` / ``b_src`` are (base, buffer, _) of
    the ring slots holding A (K-major) and B (N-major atoms)."""
    item = cfg.ab_dtype.itemsize
    a_row = cfg.k * item
    acc = lw.get(o.operands[2], cfg.acc_layout)
    group = lw.ew(TileOp.SHR, [lw.thread_id("warp"), lw.const(I32, [2])], I32)   # warpgroup
    a_base = lw.ew(TileOp.ADD, [a_src[0], lw.ew(TileOp.MUL, [group, lw.const(I32, [64 * a_row])], I32)], I32)
    attrs = simt.WgmmaAttrs(cfg.ab_dtype.name.replace("bfloat16", "bf16").replace("float16", "f16"),
                            cfg.n, a_row, True, ATOM_BYTES, cfg.k * ATOM_BYTES, (a_src[1], b_src[1]))
    lw.emit(SimtOp.WGMMA_FENCE, [])
    for kk in range(cfg.k // 16):
        a = lw.ew(TileOp.ADD, [a_base, lw.const(I32, [kk * 16 * item])], I32)
        b = lw.ew(TileOp.ADD, [b_src[0], lw.const(I32, [kk * 16 * ATOM_BYTES])], I32)
        acc = lw.emit(SimtOp.WGMMA, [acc, a, b], RegType(D.float32, cfg.n // 2), attrs).result
    lw.emit(SimtOp.WGMMA_COMMIT, [])
    lw.emit(SimtOp.WGMMA_WAIT, [], None, simt.WaitAttrs(getattr(lw, "wgmma_in_flight", 0)))
    return acc
