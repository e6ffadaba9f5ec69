"""Lowering of DOT to tensor cores: operands in swizzled shared memory, ``ldmatrix`` fragments,
one ``mma.sync`` per (m16, n8, k) instruction tile of each warp's block of C.

A (M x K) and B (K x N) are kept row-major in shared memory with 16-byte chunks swizzled
(``mma_layouts.swizzled_offset``) so every 8-lane phase of an ``ldmatrix`` hits 8 different
bank groups.  A fragments come from ``ldmatrix.x4``; B fragments from ``ldmatrix.x4.trans``
for 16-bit types and from element loads packed into registers for tf32 / int8 (``.trans``
only moves 16-bit elements).  The operands get to shared memory either here (registers ->
``STORE_SHARED``; ``insert_barriers`` adds the barriers) or by ``cp.async`` into a pipelined
ring (``pipeline_loads``), which passes their slot address in ``staged``.

The accumulator stays in the mma C-fragment layout (``DotConfig.acc_layout``) from the DOT
through a loop's iter_args to the epilogue, so nothing is converted per iteration.
"""
from __future__ import annotations

from tilejit import dtypes as D
from tilejit import ir, simt
from tilejit.ir import TileOp
from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML
from tilejit.passes import wgmma
from tilejit.passes.wgmma import tile_coords
from tilejit.passes.assign_layouts import source_dot
from tilejit.passes.plans import DotFamily, SharedTile, Staged
from tilejit.passes.mma_tiling import DotConfig, a_in_registers, ldmatrix_a_layout, ldmatrix_b_layout, ldmatrix_b_nk_layout
from tilejit.simt import RegType, SimtOp

I32 = D.int32


def _log2(x: int) -> int:
    return x.bit_length() - 1


def swizzled_offsets(lw, layout: L.Layout, row_bytes: int, item: int):
    """(i32 vector of each register's byte offset in a swizzled row-major tile, numpy table of
    the same offsets per thread); the vector is computed once, in the prologue."""
    def make():
        p = lw.prologue
        n = layout.n
        row, col = tile_coords(lw, layout, item)

        def k(v):
            return lw.const(I32, [v] * n, p)
        rows_per_line = max(1, 128 // row_bytes)
        xor = lw.ew(TileOp.AND, [lw.ew(TileOp.SHR, [row, k(_log2(rows_per_line))], I32, p),
                                 k(min(8, row_bytes // ML.CHUNK) - 1)], I32, p)
        chunk = lw.ew(TileOp.XOR, [lw.ew(TileOp.SHR, [col, k(4)], I32, p), xor], I32, p)
        out = lw.ew(TileOp.ADD, [lw.ew(TileOp.SHL, [row, k(_log2(row_bytes))], I32, p),
                                 lw.ew(TileOp.SHL, [chunk, k(4)], I32, p)], I32, p)
        return lw.ew(TileOp.ADD, [out, lw.ew(TileOp.AND, [col, k(15)], I32, p)], I32, p)
    table = layout.table()
    offsets = ML.swizzled_offset(table[..., 0], table[..., 1] * item, row_bytes)
    return lw.geo(("swizzled", layout, row_bytes, item), make), offsets


def stage_registers(lw, v: ir.Value, cfg: DotConfig, tile: SharedTile, align: int = 128, half=None) -> Staged:
    """Store register tile ``v`` into a new shared tile laid out as ``tile``.  Replica threads
    (a tile smaller than the CTA) write to a private scratch chunk instead, so each byte has one
    writer.  ``align``: 128 (ldmatrix's bank spread) or 1024 (wgmma atoms).  ``half`` (an i32
    value, 0 or 1): the tile gets two buffers and goes to that one."""
    layout, item = lw.layout_of(v), cfg.ab_dtype.itemsize
    size = cfg.tile_bytes(tile)
    primary = lw.primary_thread(layout)
    threads = 32 * lw.num_warps
    copies = 1 if half is None else 2
    start, buf = lw.alloc_shared(copies * size + (16 * threads if primary is not None else 0), align=align)
    base = start if half is None else lw.ew(TileOp.ADD, [start, lw.ew(TileOp.MUL, [half, lw.const(I32, [size])], I32)],
                                            I32)
    if tile.atoms:
        offsets = wgmma.atom_offsets(lw, layout, item, layout.shape[0])
        t = layout.table()
        table = wgmma.atom_table(t[..., 0], t[..., 1] * item, layout.shape[0])
    else:
        offsets, table = swizzled_offsets(lw, layout, cfg.row_bytes(tile), item)
    vec = L.vector_width(table, item)
    addr = lw.ew(TileOp.ADD, [lw.splat(base, layout.n), offsets], I32)
    if primary is not None:             # replicas: a scratch chunk of their own past the tile(s)
        n, p = layout.n, lw.prologue
        scratch = lw.ew(TileOp.ADD, [lw.ew(TileOp.MUL, [lw.thread_id("tid"), lw.const(I32, [16], p)], I32, p),
                                     lw.const(I32, [copies * size], p)], I32, p)
        low = lw.ew(TileOp.AND, [offsets, lw.const(I32, [15] * n, p)], I32, p)
        away = lw.ew(TileOp.ADD, [lw.splat(lw.ew(TileOp.ADD, [start, scratch], I32), n), low], I32)
        addr = lw.ew(TileOp.WHERE, [lw.splat(primary, n), addr, away], I32)
    lw.emit(SimtOp.STORE_SHARED, [addr, lw.get(v, layout)], None, simt.SharedAttrs(vec, buf))
    return Staged(base, buf, tile)


def xor_add_form(offsets) -> tuple[list[int], list[int]] | None:
    """Constants ``(x, a)`` with ``offsets[:, i] == (offsets[:, 0] ^ x[i]) + a[i]`` in every
    thread, or None.  Register ``i`` of an ldmatrix address layout moves by whole 16-byte chunks
    and whole swizzle periods of rows, so its swizzled offset is register 0's with some chunk
    bits flipped (the XOR) plus a constant: one LOP3 and an immediate instead of a register
    per address held across the loop."""
    first = offsets[:, 0]
    xs, adds = [], []
    for i in range(offsets.shape[1]):
        x = int(offsets[0, i] ^ first[0]) & 0x70          # the swizzle's chunk bits (4-6)
        a = int(offsets[0, i] - (first[0] ^ x))
        if not ((first ^ x) + a == offsets[:, i]).all():
            return None
        xs.append(x)
        adds.append(a)
    return xs, adds


def _addresses(lw, base, layout: L.Layout, row_bytes: int, item: int):
    """Each register's ldmatrix row address in the swizzled tile at ``base`` (128-byte aligned,
    so XORing bits 4-6 commutes with adding it)."""
    def fit():
        table = layout.table()
        return xor_add_form(ML.swizzled_offset(table[..., 0], table[..., 1] * item, row_bytes))
    form = lw.geo(("xor_add", layout, row_bytes, item), fit)       # once per layout, not per k step
    if form is None:
        offsets, _ = swizzled_offsets(lw, layout, row_bytes, item)
        return lw.ew(TileOp.ADD, [lw.splat(base, layout.n), offsets], I32)
    first = L.Layout(layout.kind, layout.shape, layout.num_warps, layout.regs[:1], layout.terms)
    offset, _ = swizzled_offsets(lw, first, row_bytes, item)
    start = lw.splat(lw.ew(TileOp.ADD, [base, lw.gather(offset, [0])], I32), layout.n)
    xs, adds = form
    return lw.ew(TileOp.ADD, [lw.ew(TileOp.XOR, [start, lw.const(I32, xs)], I32), lw.const(I32, adds)], I32)


def _ldmatrix(lw, addr, index: int, num: int, trans: bool, buf: int):
    return lw.emit(SimtOp.LDMATRIX, [lw.gather(addr, [index])], RegType(I32, num),
                   simt.LdmatrixAttrs(num, trans, buf)).result


def a_fragments(lw, cfg: DotConfig, base, buf: int, kk: int) -> list[ir.Value]:
    """A fragments of k step ``kk``, per m tile: 4 packed registers each (one ldmatrix.x4)."""
    layout = ldmatrix_a_layout(cfg)
    addr = _addresses(lw, base, layout, cfg.row_bytes(SharedTile.A), cfg.ab_dtype.itemsize)
    return [_ldmatrix(lw, addr, kk * cfg.m_reps + mi, 4, False, buf) for mi in range(cfg.m_reps)]


def b_fragments(lw, cfg: DotConfig, base, buf: int, kk: int, n_major: bool = False) -> list[ir.Value]:
    """B fragments of k step ``kk``, per n tile: 2 packed registers each.  ``n_major``: the
    shared tile holds B^T (N x K, a ``k`` tile loaded for ``tj.dot(q, tj.trans(k))``), read
    with plain ``ldmatrix``; otherwise B itself (K x N)."""
    item = cfg.ab_dtype.itemsize
    if cfg.ldmatrix_b or n_major:
        layout = ldmatrix_b_nk_layout(cfg) if n_major else ldmatrix_b_layout(cfg)
        addr = _addresses(lw, base, layout, cfg.row_bytes(SharedTile.B_NK if n_major else SharedTile.B), item)
        pairs = -(-cfg.n_reps // 2)
        out = []
        for p in range(pairs):
            num = 4 if 2 * p + 1 < cfg.n_reps else 2
            regs = _ldmatrix(lw, addr, kk * pairs + p, num, not n_major, buf)
            out += [lw.gather(regs, [0, 1])] + ([lw.gather(regs, [2, 3])] if num == 4 else [])
        return out
    layout = ML.mma_layout(cfg.kind, ML.Operand.B, (cfg.k, cfg.n), cfg.warps)
    size = ML.fragment_size(cfg.kind, ML.Operand.B)
    step = slice(kk * cfg.n_reps * size, (kk + 1) * cfg.n_reps * size)   # this k step's registers
    layout = L.Layout(layout.kind, layout.shape, layout.num_warps, layout.regs[step], layout.terms)
    offsets, table = swizzled_offsets(lw, layout, cfg.row_bytes(SharedTile.B), item)
    addr = lw.ew(TileOp.ADD, [lw.splat(base, layout.n), offsets], I32)
    values = lw.emit(SimtOp.LOAD_SHARED, [addr], RegType(cfg.ab_dtype, layout.n),
                     simt.SharedAttrs(L.vector_width(table, item), buf)).result
    return [lw.emit(SimtOp.PACK, [lw.gather(values, range(ni * size, ni * size + size))],
                    RegType(I32, cfg.kind.b_regs)).result for ni in range(cfg.n_reps)]


def register_a_fragments(lw, a_v: ir.Value, cfg: DotConfig) -> list[list[ir.Value]] | None:
    """A fragments ``[kk][mi]`` taken from registers when ``a_in_registers``.  Two neighbouring
    n8 C tiles are one k16 A tile, so this only packs pairs of 16-bit values (attention's
    ``p``, no shared-memory round trip)."""
    if not a_in_registers(lw, a_v, cfg):
        return None
    src = lw.layouts.get(a_v)
    idx = L.same_elements(src, ML.mma_layout(cfg.kind, ML.Operand.A, (cfg.m, cfg.k), cfg.warps))
    values = lw.gather(lw.get(a_v), idx)
    size = ML.fragment_size(cfg.kind, ML.Operand.A)
    out = [[None] * cfg.m_reps for _ in range(cfg.k_steps)]
    for mi in range(cfg.m_reps):
        for kk in range(cfg.k_steps):
            first = (mi * cfg.k_steps + kk) * size
            out[kk][mi] = lw.emit(SimtOp.PACK, [lw.gather(values, range(first, first + size))],
                                  RegType(I32, cfg.kind.a_regs)).result
    return out


def register_b_fragments(lw, b_v: ir.Value, cfg: DotConfig) -> list[list[ir.Value]]:
    """B fragments ``[kk][ni]`` packed from registers in ``cfg.b_register_layout`` (B unpacked
    from 4-bit values: ``nibble_operands`` loads its bytes so that this is a renaming)."""
    values = lw.get(b_v, cfg.b_register_layout)
    size = ML.fragment_size(cfg.kind, ML.Operand.B)
    out = []
    for kk in range(cfg.k_steps):
        first = kk * cfg.n_reps * size
        out.append([lw.emit(SimtOp.PACK, [lw.gather(values, range(first + ni * size, first + ni * size + size))],
                            RegType(I32, cfg.kind.b_regs)).result for ni in range(cfg.n_reps)])
    return out


def operand_source(lw, v: ir.Value, cfg: DotConfig, tile: SharedTile, staged: dict) -> Staged:
    """Operand ``v``'s swizzled shared tile for ldmatrix: a pipelined load's ring slot or a tile
    staged before the loop (in ``staged``), else staged here as ``tile``."""
    if v in staged and not staged[v].tile.atoms:          # (ldmatrix cannot read atoms)
        return staged[v]
    return stage_registers(lw, v, cfg, tile)


def lower_dmma(lw, o: ir.Operation, cfg: DotConfig) -> ir.Value:
    """The float64 DOT ``o`` on DMMA (``mma.sync.aligned.m8n8k4.row.col.f64``): A, B and the
    accumulator taken in their fragment layouts (``mma_layouts.mma_layout``), whose register
    ``(rep0 * reps1 + rep1) * size + i`` is element ``i`` of instruction tile ``(rep0, rep1)``:
    one double of A (m8 x k4) and of B (k4 x n8) per lane and instruction, two of C."""
    a_v, b_v, acc_v = o.operands
    kind = cfg.kind
    a = lw.get(a_v, ML.mma_layout(kind, ML.Operand.A, (cfg.m, cfg.k), cfg.warps))
    b = lw.get(b_v, ML.mma_layout(kind, ML.Operand.B, (cfg.k, cfg.n), cfg.warps))
    acc = lw.get(acc_v, cfg.acc_layout)
    c = kind.c_regs
    pieces = [[lw.gather(acc, range((mi * cfg.n_reps + ni) * c, (mi * cfg.n_reps + ni + 1) * c))
               for ni in range(cfg.n_reps)] for mi in range(cfg.m_reps)]
    attrs = simt.MmaAttrs(kind.ab_type)
    for kk in range(cfg.k_steps):
        a_frags = [lw.gather(a, [mi * cfg.k_steps + kk]) for mi in range(cfg.m_reps)]
        b_frags = [lw.gather(b, [kk * cfg.n_reps + ni]) for ni in range(cfg.n_reps)]
        for mi in range(cfg.m_reps):
            for ni in range(cfg.n_reps):
                pieces[mi][ni] = lw.emit(SimtOp.MMA, [a_frags[mi], b_frags[ni], pieces[mi][ni]],
                                         RegType(cfg.acc_dtype, c), attrs).result
    return lw.concat([p for row in pieces for p in row])


def lower_dot(lw, o: ir.Operation, cfg: DotConfig, staged: dict) -> ir.Value:
    """The DOT ``o`` on tensor cores; ``staged`` maps an operand Value already in a swizzled
    shared tile to its ``Staged`` tile."""
    a_v, b_v, acc_v = o.operands
    if cfg.registers_only:
        return lower_dmma(lw, o, cfg)
    if lw.dot_plans.family(o) is DotFamily.WGMMA:
        first = None
        if not lw.pipelining:
            # a rotated loop's first product, before the loop (``wgmma.first_products``): A staged
            # here as the loop stages it (which then reads it from here); B K-major where it is a
            # transpose (attention's k.T, weights (N, K)), else below as a computed B
            if a_v not in staged and source_dot(a_v, a_v.type.shape) is None:
                lw.stage(a_v, stage_registers(lw, a_v, cfg, wgmma.ring_layout(SharedTile.A, cfg), align=1024))
            kt = wgmma.transposed(b_v)
            if kt is not None:
                first = stage_registers(lw, kt, cfg, wgmma.ring_layout(SharedTile.B_NK, cfg), align=1024)
        a_src = staged[a_v] if a_v in staged and staged[a_v].tile.wgmma_a else register_a_fragments(lw, a_v, cfg)
        b_src = first or (staged[b_v] if b_v in staged and staged[b_v].tile.wgmma_b else None)
        # B computed in the loop: staged N-major, which float8 wgmma cannot read (it takes mma.sync)
        if b_src is None and wgmma.COMPUTED_B and b_v not in staged and b_v.type.dtype not in wgmma.FP8:
            half = None                                # two buffers where its group stays in flight
            if lw.in_flight_after(o) and lw.trips and lw.trips[-1] is not None:
                half = lw.ew(TileOp.AND, [lw.trips[-1], lw.const(I32, [1])], I32)
            b_src = stage_registers(lw, b_v, cfg, SharedTile.B_ATOMS, align=1024, half=half)
        if a_src and b_src:
            return wgmma.lower_wgmma(lw, o, cfg, a_src, b_src)
    a_regs = None if a_v in staged else register_a_fragments(lw, a_v, cfg)
    a_src = None if a_regs else operand_source(lw, a_v, cfg, SharedTile.A, staged)
    b_regs = register_b_fragments(lw, b_v, cfg) if cfg.nibbles else None
    b_src = None if b_regs else operand_source(lw, b_v, cfg, SharedTile.B, staged)
    acc = lw.get(acc_v, cfg.acc_layout)
    pieces = [[lw.gather(acc, range((mi * cfg.n_reps + ni) * 4, (mi * cfg.n_reps + ni) * 4 + 4))
               for ni in range(cfg.n_reps)] for mi in range(cfg.m_reps)]
    attrs = simt.MmaAttrs(cfg.kind.ab_type)
    for kk in range(cfg.k_steps):            # fragments of one k step live at a time
        a_frags = a_regs[kk] if a_regs else a_fragments(lw, cfg, a_src.base, a_src.buffer, kk)
        b_frags = b_regs[kk] if b_regs else \
            b_fragments(lw, cfg, b_src.base, b_src.buffer, kk, n_major=b_src.tile is SharedTile.B_NK)
        for mi in range(cfg.m_reps):
            for ni in range(cfg.n_reps):
                pieces[mi][ni] = lw.emit(SimtOp.MMA, [a_frags[mi], b_frags[ni], pieces[mi][ni]],
                                         RegType(cfg.acc_dtype, 4), attrs).result
    return lw.concat([p for row in pieces for p in row])

