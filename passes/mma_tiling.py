"""Tensor-core plan of a ``tj.dot``: which mma instruction, how the CTA tile is split over warps,
and the layouts that follow (accumulator, swizzled shared-memory operand tiles).

    dot_config(op, num_warps, forced=None, target="sm_90a") -> DotConfig | None   (``plan_dots`` calls it once per DOT)

None means the DOT keeps the FMA fallback (``lower_shared.dot_fallback``): float32 without
``allow_tf32``, tiles that are not powers of two or too small for one m16n8 tile per warp,
or K not a multiple of the instruction's k.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import dtypes as D
from tilejit import ir
from tilejit.passes import layouts as L
from tilejit.passes import mma_layouts as ML
from tilejit.passes.plans import SharedTile


@dataclass(frozen=True)
class DotConfig:
    kind: ML.MmaKind
    m: int
    n: int
    k: int
    warps: tuple[int, int]          # (wm, wn): warp w computes C block (w % wm, w // wm)
    ab_dtype: D.DType
    acc_dtype: D.DType
    nibbles: bool = False           # B unpacked from 4-bit values: interleaved fragments (``nibble_operands``)

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.m // self.warps[0], self.n // self.warps[1]

    @property
    def num_warps(self) -> int:
        return self.warps[0] * self.warps[1]

    @property
    def k_steps(self) -> int:
        return self.k // self.kind.k

    @property
    def m_reps(self) -> int:
        return self.warp_tile[0] // self.kind.m

    @property
    def n_reps(self) -> int:
        return self.warp_tile[1] // self.kind.n

    @property
    def acc_layout(self) -> L.Layout:
        if self.nibbles:
            return ML.nibble_c_layout(self.kind, (self.m, self.n), self.warps)
        return ML.mma_layout(self.kind, ML.Operand.C, (self.m, self.n), self.warps)

    @property
    def b_register_layout(self) -> L.Layout:
        """The layout B's fragments are packed from when they come from registers."""
        if self.nibbles:
            return ML.nibble_b_layout(self.kind, (self.k, self.n), self.warps)
        return ML.mma_layout(self.kind, ML.Operand.B, (self.k, self.n), self.warps)

    @property
    def registers_only(self) -> bool:
        """DMMA (float64): A and B come from registers in the fragment layouts (a layout
        conversion puts them there), never from swizzled shared tiles, rings or ldmatrix."""
        return self.kind.bits == 64

    @property
    def ldmatrix_b(self) -> bool:
        """B (stored K x N row-major) is read with ``ldmatrix.trans`` (16-bit types); other
        types read their B fragments element by element."""
        return self.kind.bits == 16

    def row_bytes(self, tile: SharedTile) -> int:
        """Bytes per row of the ldmatrix form of shared tile ``tile``: A (M x K), B (K x N) or
        B stored N x K (B_NK)."""
        if tile is SharedTile.A_MN_ATOMS:           # K rows of M (no ldmatrix form)
            return self.m * self.ab_dtype.itemsize
        return (self.k if tile.k_major else self.n) * self.ab_dtype.itemsize

    def tile_bytes(self, tile: SharedTile) -> int:
        """Bytes of the shared tile ``tile`` (its atom form holds as many)."""
        rows = {SharedTile.A: self.m, SharedTile.B: self.k, SharedTile.B_NK: self.n,
                SharedTile.A_MN_ATOMS: self.k}[tile.ldmatrix]
        return rows * self.row_bytes(tile)


DEFAULT_STAGES = 3          # the ring depth of loops that do not say (sm_80 and sm_90a)


def pipeline_stages(op: ir.Operation, default: int = DEFAULT_STAGES) -> int:
    """The ring depth of FOR ``op`` when it can be software-pipelined: ``tj.range(stages=S)``
    asks for S (1: off), a plain ``range`` gets ``default``; the step must be a positive
    constant.  Else 1.  The one rule ``plan_dots`` and ``plan_loops`` share."""
    if op.op is not ir.TileOp.FOR:
        return 1
    stages = (op.attrs.stages if op.attrs else 0) or default
    if stages < 2:
        return 1
    step = op.operands[2].owner
    if step is None or step.op is not ir.TileOp.CONSTANT or not isinstance(step.attrs.value, int) \
            or step.attrs.value <= 0:
        return 1
    return stages


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def choose_warps(m: int, n: int, num_warps: int, kind: ML.MmaKind) -> tuple[int, int] | None:
    """The (wm, wn) split of an m x n tile with the most square warp tiles (least operand
    traffic per mma); ties go to taller warp tiles (128x128 on 8 warps -> 2x4 of 64x32)."""
    best = None
    wm = 1
    while wm <= num_warps:
        wn = num_warps // wm
        if m % (kind.m * wm) == 0 and n % (kind.n * wn) == 0:
            key = (m // wm + n // wn, -(m // wm))
            if best is None or key < best[0]:
                best = (key, (wm, wn))
        wm *= 2
    return best[1] if best else None


def dot_config(o: ir.Operation, num_warps: int, forced: tuple[int, int] | None = None,
               target: str = "sm_90a") -> DotConfig | None:
    """The tensor-core config of DOT ``o``; ``forced``: the warp split ``plan_dots`` asks for
    (wgmma and chained DOTs), used where the tile divides evenly.  float8 operands take
    mma.sync m16n8k32 on sm_90a (sm_89+ and PTX ISA 8.4); on sm_80 they stay on FMA."""
    a, b = o.operands[0].type, o.operands[1].type
    kind = ML.mma_kind_for(a.dtype, o.attrs.allow_tf32 if o.attrs else False)
    if kind is None or a.dtype != b.dtype or (kind.ab_type in ("e4m3", "e5m2") and target == "sm_80"):
        return None
    (m, k), n = a.shape, b.shape[1]
    if not all(_pow2(x) for x in (m, n, k)) or k % kind.k:
        return None
    if n * a.dtype.itemsize < ML.CHUNK:      # a swizzled B row holds at least one 16-byte chunk
        return None
    warps = choose_warps(m, n, num_warps, kind)
    if forced is not None and forced[0] * forced[1] == num_warps \
            and m % (kind.m * forced[0]) == 0 and n % (kind.n * forced[1]) == 0:
        warps = forced
    if warps is None:
        return None
    acc = {"s32": D.int32, "f64": D.float64}.get(kind.acc_type, D.float32)
    return DotConfig(kind, m, n, k, warps, a.dtype, acc)


def no_tensor_cores(o: ir.Operation, num_warps: int, target: str = "sm_90a") -> str:
    """Why DOT ``o``, whose operands have a tensor-core dtype, runs on CUDA cores (FMA): ``""``
    where ``dot_config`` gives it a config or its dtype has no tensor-core instruction (float32
    without ``allow_tf32`` is FMA by design), else what to change (a user's warning)."""
    a, b = o.operands[0].type, o.operands[1].type
    tf32 = o.attrs.allow_tf32 if o.attrs else False
    kind = ML.mma_kind_for(a.dtype, tf32)
    if kind is None and ML.mma_kind_for(b.dtype, tf32) is None:
        return ""
    if a.dtype != b.dtype:
        return (f"its operands' dtypes differ ({a.dtype.name} and {b.dtype.name}): "
                f"convert one with .to() so both match")
    if kind.ab_type in ("e4m3", "e5m2") and target == "sm_80":
        return "float8 has no tensor-core instruction on sm_80"
    if dot_config(o, num_warps, None, target) is not None:
        return ""
    (m, k), n = a.shape, b.shape[1]
    if not all(_pow2(x) for x in (m, n, k)):
        return f"tensor cores take power-of-two tiles (M={m}, N={n}, K={k}): pad or split the odd one"
    if k % kind.k:
        return f"K={k} is not a multiple of the tensor-core step ({kind.k} for {a.dtype.name})"
    if n * a.dtype.itemsize < ML.CHUNK:
        return f"N={n} is under {ML.CHUNK // a.dtype.itemsize} columns"
    return f"a {m}x{n} tile does not split over {num_warps} warps in {kind.m}x{kind.n} steps: use fewer warps or a larger tile"


# ------------------------------------------------------------------------- address layouts
def _log2(x: int) -> int:
    return x.bit_length() - 1


def ldmatrix_a_layout(cfg: DotConfig) -> L.Layout:
    """Where each lane's ``ldmatrix.x4`` row address points in the A tile (M x K), one
    register per (k step, m tile): lanes 0-7 / 8-15 rows 0-7 / 8-15 of the first 16 bytes of
    K, lanes 16-31 the next 16 bytes (``mma_layouts.ldmatrix_rows("a")``)."""
    per16 = ML.CHUNK // cfg.ab_dtype.itemsize
    wm = cfg.warps[0]
    rows = (L.BitTerm("lane", 0, 3, 1), L.BitTerm("lane", 3, 1, 8)) + \
        ((L.BitTerm("warp", 0, _log2(wm), cfg.warp_tile[0]),) if wm > 1 else ())
    cols = (L.BitTerm("lane", 4, 1, per16),)
    regs = tuple((mi * cfg.kind.m, kk * cfg.kind.k) for kk in range(cfg.k_steps) for mi in range(cfg.m_reps))
    return L.Layout(L.LayoutKind.LDMATRIX_A, (cfg.m, cfg.k), cfg.num_warps, regs, (rows, cols))


def ldmatrix_b_layout(cfg: DotConfig) -> L.Layout:
    """Row addresses of ``ldmatrix.x4.trans`` into the B tile (K x N, 16-bit), one register per
    (k step, pair of n8 tiles); a lone last n8 tile uses ``.x2`` with the same addresses
    (``mma_layouts.ldmatrix_rows("b_kn")``)."""
    wm, wn = cfg.warps
    rows = (L.BitTerm("lane", 0, 3, 1), L.BitTerm("lane", 3, 1, 8))
    cols = (L.BitTerm("lane", 4, 1, 8),) + \
        ((L.BitTerm("warp", _log2(wm), _log2(wn), cfg.warp_tile[1]),) if wn > 1 else ())
    pairs = -(-cfg.n_reps // 2)
    regs = tuple((kk * 16, p * 16) for kk in range(cfg.k_steps) for p in range(pairs))
    return L.Layout(L.LayoutKind.LDMATRIX_B, (cfg.k, cfg.n), cfg.num_warps, regs, (rows, cols))


def ldmatrix_b_nk_layout(cfg: DotConfig) -> L.Layout:
    """Row addresses of plain ``ldmatrix.x4`` into B^T (N x K, stored n-major), one register
    per (k step, pair of n8 tiles), in the register order of ``ldmatrix_b_layout``: lanes 0-7
    n rows 0-7 / k bytes 0-15, lanes 8-15 the next 16 bytes of k, lanes 16-31 n rows 8-15
    (``mma_layouts.ldmatrix_rows("b_nk")``)."""
    per16 = ML.CHUNK // cfg.ab_dtype.itemsize
    wm, wn = cfg.warps
    rows = (L.BitTerm("lane", 0, 3, 1), L.BitTerm("lane", 4, 1, 8)) + \
        ((L.BitTerm("warp", _log2(wm), _log2(wn), cfg.warp_tile[1]),) if wn > 1 else ())
    cols = (L.BitTerm("lane", 3, 1, per16),)
    pairs = -(-cfg.n_reps // 2)
    regs = tuple((p * 16, kk * cfg.kind.k) for kk in range(cfg.k_steps) for p in range(pairs))
    return L.Layout(L.LayoutKind.LDMATRIX_B_NK, (cfg.n, cfg.k), cfg.num_warps, regs, (rows, cols))


def a_in_registers(lw, a_v: ir.Value, cfg: DotConfig) -> bool:
    """Every lane already holds its mma A elements of ``a_v``: (a cast of) another DOT's
    accumulator with the same rows per warp (``plan_dots.chained_dots``)."""
    src = lw.layouts.get(a_v)
    return src is not None and src.kind is L.LayoutKind.MMA_C and cfg.kind.bits == 16 and \
        L.same_elements(src, ML.mma_layout(cfg.kind, ML.Operand.A, (cfg.m, cfg.k), cfg.warps)) is not None
