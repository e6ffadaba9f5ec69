"""IR infrastructure shared by the tile IR and the SIMT IR: values, operations, single-block
regions, functions, source locations and the stable text printer.

Each IR has its own op enum (``TileOp`` below; ``simt.SimtOp``) and its own types; an
``Operation`` is ``(op, operands, results, attrs, regions, loc)`` where ``attrs`` is a small
frozen dataclass (``Attrs`` subclasses below) or None.
"""
from __future__ import annotations

import ast
import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Iterator

from tilejit.dtypes import DType
from tilejit.errors import Loc  # noqa: F401  (ir.Loc: source locations live in errors, which needs them too)


# ---------------------------------------------------------------------------------------- locations
UNKNOWN_LOC = Loc("<unknown>", 0)


# -------------------------------------------------------------------------------------------- types
@dataclass(frozen=True)
class TileType:
    """A tile of ``shape`` (``()`` for a scalar) holding ``dtype`` values."""
    shape: tuple[int, ...]
    dtype: DType

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __str__(self) -> str:
        if not self.shape:
            return str(self.dtype)
        return f"tile<{'x'.join(map(str, self.shape))}x{self.dtype}>"


@dataclass(frozen=True)
class ArrayType:
    """A kernel array argument: data pointer plus runtime shape and strides (in elements)."""
    dtype: DType
    rank: int

    def __str__(self) -> str:
        return f"array<{self.rank}x{self.dtype}>"


def scalar(dtype: DType) -> TileType:
    return TileType((), dtype)


# ------------------------------------------------------------------------------------------- values
class Value:
    """An SSA value: an op result or a block argument. ``hint`` is a debugging name."""
    __slots__ = ("type", "hint", "owner")

    def __init__(self, type, hint: str = "", owner: "Operation | None" = None):
        self.type, self.hint, self.owner = type, hint, owner

    def __repr__(self) -> str:
        return f"Value({self.type}{', ' + self.hint if self.hint else ''})"


# -------------------------------------------------------------------------------------------- attrs
class Attrs:
    """Base of the per-op attribute records; printed as ``{field=value, ...}``."""

    def __str__(self) -> str:
        parts = [f"{f.name}={_fmt(getattr(self, f.name))}" for f in dataclasses.fields(self)]
        return "{" + ", ".join(parts) + "}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, enum.Enum):
        return v.name.lower()
    if isinstance(v, str) and not v.isidentifier():
        return repr(v)                   # a device_print prefix: quoted, so commas and braces parse
    return str(v)


@dataclass(frozen=True)
class ConstAttrs(Attrs):
    value: bool | int | float            # the (splatted) constant; inf/nan allowed


@dataclass(frozen=True)
class AxisAttrs(Attrs):
    axis: int


@dataclass(frozen=True)
class LoadAttrs(Attrs):
    other: bool | int | float = 0        # value read for elements outside the array


@dataclass(frozen=True)
class StoreAttrs(Attrs):
    masked: bool = False                 # a bool tile of the stored shape follows the tile


def gathers(o: "Operation") -> bool:
    """Whether a LOAD, STORE or ATOMIC takes an index tile for some dim (a gather / scatter):
    its offset operand there is an integer tile of the memory tile's shape, not a scalar."""
    rank = o.operands[0].type.rank
    return any(isinstance(x.type, TileType) and x.type.shape != () for x in o.operands[1:1 + rank])


ATOMIC_KINDS = ("add", "max", "min", "and", "or", "xor", "xchg", "cas")   # cas: a compared tile precedes the tile
ATOMIC_SEMS = ("relaxed", "acquire", "release", "acq_rel")
ATOMIC_SCOPES = ("gpu", "cta", "sys")


@dataclass(frozen=True)
class AtomicAttrs(Attrs):
    kind: str                            # one of ATOMIC_KINDS
    sem: str = "relaxed"                 # memory order (ATOMIC_SEMS)
    scope: str = "gpu"                   # who the order is with (ATOMIC_SCOPES)
    masked: bool = False                 # a bool tile of the tile's shape follows the tile


def atomic_compare(o: "Operation") -> "Value | None":
    """The tile an ``atomic_cas`` compares each old value with (it comes just before the tile)."""
    return o.operands[1 + o.operands[0].type.rank] if o.attrs.kind == "cas" else None


def stored_tile(o: "Operation") -> "Value":
    """The tile a STORE or ATOMIC writes (its mask, when it has one, comes after it)."""
    return o.operands[-2] if o.attrs is not None and o.attrs.masked else o.operands[-1]


def store_mask(o: "Operation") -> "Value | None":
    """The bool tile that says which elements a STORE or ATOMIC writes (None: every one in bounds)."""
    return o.operands[-1] if o.attrs is not None and o.attrs.masked else None


@dataclass(frozen=True)
class PermAttrs(Attrs):
    perm: tuple[int, ...]


class ReduceKind(enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


@dataclass(frozen=True)
class PrintAttrs(Attrs):
    prefix: str                          # the text after the program id (and element index)
    scalar: bool = False                 # scalars printed (as (1,) tiles): no element index
    rank: int = 0                        # in SIMT IR: how many coordinate operands follow the ids


def print_line(pid, index, prefix: str, values) -> str:
    """One line of ``tj.device_print`` (every backend prints this shape; C's ``%g`` and ``%d``)."""
    where = f"pid ({pid[0]}, {pid[1]}, {pid[2]})" + (f" idx ({', '.join(map(str, index))})" if index else "")
    shown = " ".join(("%g" % float(v)) if isinstance(v, float) else str(int(v)) for v in values)
    return f"{where} {prefix} {shown}".rstrip()


@dataclass(frozen=True)
class StashAttrs(Attrs):
    buffer: int                          # which stash (one per row load chunk_rows keeps)
    width: int                           # the whole row's last-axis size (the buffer holds rows x width)


@dataclass(frozen=True)
class ClusterAttrs(Attrs):
    ctas: int                            # the CTAs of a cluster (cluster_rows: one row split over them)
    kind: ReduceKind | None = None       # CLUSTER_REDUCE: how the CTAs' partial results combine


@dataclass(frozen=True)
class AssertAttrs(Attrs):
    msg: str                             # the user's message (may be empty)
    scalar: bool = False                 # a scalar condition (as a (1,) tile): no element index
    rank: int = 0                        # in SIMT IR: how many coordinate operands follow the ids


@dataclass(frozen=True)
class GridDependencyAttrs(Attrs):
    action: str                          # "wait" (griddepcontrol.wait) or "launch" (.launch_dependents)


GRID_DEPENDENCY_ACTIONS = ("wait", "launch")


def assert_message(pid, index, msg: str) -> str:
    """The text of a failed ``tj.device_assert`` (every backend reports this shape)."""
    where = f"program ({pid[0]}, {pid[1]}, {pid[2]})" + (f", element ({', '.join(map(str, index))})" if index else "")
    return f"device_assert failed in {where}" + (f": {msg}" if msg else "")


@dataclass(frozen=True)
class ScanAttrs(Attrs):
    kind: str                            # "sum" or "prod", or "sort" (``reverse``: descending)
    axis: int
    reverse: bool = False                # from the end of the axis (``tj.cumsum(..., reverse=True)``)


@dataclass(frozen=True)
class ReduceAttrs(Attrs):
    kind: ReduceKind
    axis: int
    keepdims: bool = False


@dataclass(frozen=True)
class DotAttrs(Attrs):
    allow_tf32: bool = False             # (the compiler's choices are in passes.plans.DotPlan)


@dataclass(frozen=True)
class ForAttrs(Attrs):
    stages: int = 0                      # pipelining depth from tj.range(stages=); 0: the compiler's choice
    unroll: bool = False


# --------------------------------------------------------------------------------------- tile ops
class TileOp(enum.Enum):
    # program and arguments
    PROGRAM_ID = enum.auto()    # () -> i32                               attrs AxisAttrs
    NUM_PROGRAMS = enum.auto()  # () -> i32                               attrs AxisAttrs
    DIM = enum.auto()           # (array) -> i32: the array's runtime size along attrs.axis
    # creation
    CONSTANT = enum.auto()      # () -> scalar or tile filled with attrs.value   ConstAttrs
    SPLAT = enum.auto()         # (scalar) -> tile of the result's shape
    ARANGE = enum.auto()        # () -> tile<(end-start,) x i32>; attrs ConstAttrs(start)
    # memory: offsets are one scalar per array dim; shape comes from the result/tile type
    LOAD = enum.auto()          # (array, *offsets) -> tile                LoadAttrs
    STORE = enum.auto()         # (array, *offsets, tile[, mask]) -> (): mask (StoreAttrs.masked) is a
    #                             bool tile of the tile's shape; elements where it is false are not written
    ATOMIC = enum.auto()        # (array, *offsets, tile[, mask]) -> the old values: an atomic
    #                             read-modify-write of each element (AtomicAttrs), masked like STORE
    # elementwise binary (operands already broadcast to one shape and one dtype)
    ADD = enum.auto(); SUB = enum.auto(); MUL = enum.auto()       # noqa: E702
    TRUEDIV = enum.auto(); FLOORDIV = enum.auto(); MOD = enum.auto(); POW = enum.auto()  # noqa: E702
    AND = enum.auto(); OR = enum.auto(); XOR = enum.auto(); SHL = enum.auto(); SHR = enum.auto()  # noqa: E702
    MAXIMUM = enum.auto(); MINIMUM = enum.auto()                  # noqa: E702
    # comparisons -> bool
    EQ = enum.auto(); NE = enum.auto(); LT = enum.auto(); LE = enum.auto(); GT = enum.auto(); GE = enum.auto()  # noqa: E702
    # elementwise unary
    NEG = enum.auto(); INVERT = enum.auto(); ABS = enum.auto()    # noqa: E702
    EXP = enum.auto(); EXP2 = enum.auto(); LOG = enum.auto(); LOG2 = enum.auto()  # noqa: E702
    SQRT = enum.auto(); RSQRT = enum.auto(); SIN = enum.auto(); COS = enum.auto()  # noqa: E702
    TANH = enum.auto(); SIGMOID = enum.auto(); ERF = enum.auto()  # noqa: E702
    FLOOR = enum.auto(); CEIL = enum.auto(); TRUNC = enum.auto(); ROUND = enum.auto()  # noqa: E702  (ROUND: half to even)
    ISNAN = enum.auto(); ISINF = enum.auto(); ISFINITE = enum.auto()  # noqa: E702  (float x -> bool)
    # other elementwise
    FMA = enum.auto()           # (a, b, c) -> a*b+c
    WHERE = enum.auto()         # (cond: bool, a, b) -> a if cond else b
    CAST = enum.auto()          # (x) -> x converted to the result dtype
    BITCAST = enum.auto()       # (x) -> x's bits as the result dtype (same width, not bool)
    # shape
    BROADCAST = enum.auto()     # (x) -> x broadcast to the result shape (same rank, 1 -> n)
    RESHAPE = enum.auto()       # (x) -> same elements, row-major order, result shape
    TRANS = enum.auto()         # (x) -> x transposed by attrs.perm         PermAttrs
    # reductions and matmul
    REDUCE = enum.auto()        # (x) -> reduced tile or scalar              ReduceAttrs
    SCAN = enum.auto()          # (x) -> running sums or products, or the sorted values, along attrs.axis  ScanAttrs
    PRINT = enum.auto()         # (pid0, pid1, pid2, *values) -> (): one line per element   PrintAttrs
    STASH = enum.auto()         # (tile, col: int32) -> (): the tile into the CTA's stash buffer at column col   StashAttrs
    UNSTASH = enum.auto()       # (col: int32) -> the tile STASH put there (chunk_rows: a row read again)       StashAttrs
    CLUSTER_RANK = enum.auto()  # () -> i32: this CTA's rank in its cluster of attrs.ctas (cluster_rows)   ClusterAttrs
    CLUSTER_REDUCE = enum.auto()  # (x) -> x combined (attrs.kind) over the cluster's CTAs, in rank order   ClusterAttrs
    CLUSTER_SOFTMAX = enum.auto()  # (m, s: float32) -> (M, S): M = max of the CTAs' m, S = sum of
    #                               s * exp(m - M) (M read as 0 where it is -inf), in rank order   ClusterAttrs
    ASSERT = enum.auto()        # (pid0, pid1, pid2, cond: bool) -> (): DeviceAssertError where cond is false
    #                             (removed by strip_asserts unless the kernel is compiled with debug)  AssertAttrs
    DOT = enum.auto()           # (a: MxK, b: KxN, acc: MxN f32/i32) -> MxN  DotAttrs
    GRID_DEPENDENCY = enum.auto()  # () -> (): programmatic dependent launch (sm_90+), in the kernel's
    #                               top-level block: attrs.action "wait" (memory written by the kernels
    #                               launched before this one on its stream is seen after it) or "launch"
    #                               (the next kernel may start launching)   GridDependencyAttrs
    # structured control flow (single-block regions; each region ends with YIELD)
    FOR = enum.auto()           # (lb, ub, step, *inits) -> results; region (iv, *iter_args)  ForAttrs
    IF = enum.auto()            # (cond) -> results; regions then, else
    WHILE = enum.auto()         # (*inits) -> results; region (*args) yields (cond, *next): do-while
    YIELD = enum.auto()         # (*values) terminator of a region


BINARY_OPS = frozenset({TileOp.ADD, TileOp.SUB, TileOp.MUL, TileOp.TRUEDIV, TileOp.FLOORDIV, TileOp.MOD,
                        TileOp.POW, TileOp.AND, TileOp.OR, TileOp.XOR, TileOp.SHL, TileOp.SHR,
                        TileOp.MAXIMUM, TileOp.MINIMUM})
COMPARE_OPS = frozenset({TileOp.EQ, TileOp.NE, TileOp.LT, TileOp.LE, TileOp.GT, TileOp.GE})
UNARY_OPS = frozenset({TileOp.NEG, TileOp.INVERT, TileOp.ABS, TileOp.EXP, TileOp.EXP2, TileOp.LOG,
                       TileOp.LOG2, TileOp.SQRT, TileOp.RSQRT, TileOp.SIN, TileOp.COS, TileOp.TANH,
                       TileOp.SIGMOID, TileOp.ERF, TileOp.FLOOR, TileOp.CEIL, TileOp.TRUNC, TileOp.ROUND,
                       TileOp.ISNAN, TileOp.ISINF, TileOp.ISFINITE})
PREDICATE_OPS = frozenset({TileOp.ISNAN, TileOp.ISINF, TileOp.ISFINITE})     # float tile -> bool tile
FLOAT_UNARY_OPS = UNARY_OPS - {TileOp.NEG, TileOp.INVERT, TileOp.ABS} - PREDICATE_OPS
ELEMENTWISE_OPS = BINARY_OPS | COMPARE_OPS | UNARY_OPS | {TileOp.FMA, TileOp.WHERE, TileOp.CAST, TileOp.BITCAST}
CONTROL_OPS = frozenset({TileOp.FOR, TileOp.IF, TileOp.WHILE})


# ----------------------------------------------------------------------------- operations, blocks
class Operation:
    __slots__ = ("op", "operands", "results", "attrs", "regions", "loc")

    def __init__(self, op, operands=(), result_types=(), attrs: Attrs | None = None,
                 regions: list["Block"] | None = None, loc: Loc = UNKNOWN_LOC):
        self.op, self.operands, self.attrs, self.loc = op, list(operands), attrs, loc
        self.results = [Value(t, owner=self) for t in result_types]
        self.regions = regions or []

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.op.name} has {len(self.results)} results"
        return self.results[0]

    def __repr__(self) -> str:
        return f"<{self.op.name} at {self.loc}>"


@dataclass
class Block:
    """A single-block region: arguments plus an op list (ending with YIELD inside control ops)."""
    args: list[Value] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)

    def walk(self) -> Iterator[Operation]:
        """Every op in this block and nested regions, pre-order."""
        for o in self.ops:
            yield o
            for r in o.regions:
                yield from r.walk()


@dataclass
class Function:
    """A kernel after the frontend: array/scalar arguments and a body block.

    ``arg_names`` are the user's parameter names of the runtime (non-constexpr) arguments, in
    order; ``meta`` carries compile-time facts later stages need: for a tile function a dict
(specs, constexprs, and the analyses' typed tables: layouts, dot_plans, loop_plans), for a
SIMT function a ``simt.SimtMeta``."""
    name: str
    body: Block
    arg_names: list[str]
    meta: dict = field(default_factory=dict)      # (a simt.SimtMeta on SIMT functions)

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def walk(self) -> Iterator[Operation]:
        return self.body.walk()


def clone_function(fn: Function) -> Function:
    """A deep copy of ``fn``'s ops, blocks and values (types, attrs and locs are shared)."""
    values: dict[Value, Value] = {}

    def value(v: Value) -> Value:
        return values.get(v, v)

    def block(b: Block) -> Block:
        args = []
        for a in b.args:
            values[a] = Value(a.type, a.hint)
            args.append(values[a])
        ops = []
        for o in b.ops:
            regions = [block(r) for r in o.regions]
            new = Operation(o.op, [value(x) for x in o.operands], [r.type for r in o.results],
                           o.attrs, regions, o.loc)
            for r, nr in zip(o.results, new.results):
                nr.hint = r.hint
                values[r] = nr
            ops.append(new)
        return Block(args, ops)

    return Function(fn.name, block(fn.body), list(fn.arg_names), dict(fn.meta))


def clone_ops(ops: list[Operation], subst: dict) -> list[Operation]:
    """Copies of region-free ``ops`` (in order), their operands mapped through ``subst``, which
    each copy's results are added to (old result -> new), so later copies read earlier ones."""
    out = []
    for o in ops:
        c = Operation(o.op, [subst.get(x, x) for x in o.operands], [r.type for r in o.results], o.attrs, None, o.loc)
        for r, n in zip(o.results, c.results):
            subst[r] = n
        out.append(c)
    return out


def users(root: "Block | Function") -> dict[Value, list[Operation]]:
    """Every value used in ``root`` (a Function or a Block, nested regions included) -> the ops
    that use it, in pre-order (an op using a value twice appears twice)."""
    found: dict[Value, list[Operation]] = {}
    for o in root.walk():
        for x in o.operands:
            found.setdefault(x, []).append(o)
    return found


class Builder:
    """Appends ops at the end of a block; ``at(block)`` switches the insertion block."""

    def __init__(self, block: Block | None = None, loc: Loc = UNKNOWN_LOC):
        self.block, self.loc = block, loc

    def create(self, op, operands=(), result_types=(), attrs=None, regions=None, loc=None) -> Operation:
        o = Operation(op, operands, result_types, attrs, regions, loc or self.loc)
        self.block.ops.append(o)
        return o

    def at(self, block: Block) -> "Builder":
        return Builder(block, self.loc)


# ------------------------------------------------------------------------------------------ printer
class Printer:
    """Stable text form: ``%3 = add %1, %2 : tile<16x16xfloat32>  # file.py:12:9``.

    Values are numbered in definition order, so two structurally equal functions print the same."""

    def __init__(self, with_locs: bool = False):
        self.names: dict[int, str] = {}
        self.with_locs = with_locs

    def name(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            self.names[key] = f"%{len(self.names)}"
        return self.names[key]

    def function(self, fn: Function) -> str:
        args = ", ".join(f"{self.name(a)}: {a.type}" for a in fn.args)
        lines = [f"func @{fn.name}({args}) {{"]
        self._block(fn.body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    def _block(self, block: Block, depth: int, lines: list[str]) -> None:
        for o in block.ops:
            self._op(o, depth, lines)

    def _op(self, o: Operation, depth: int, lines: list[str]) -> None:
        pad = "  " * depth
        res = ", ".join(self.name(r) for r in o.results)
        text = f"{res} = " if res else ""
        text += o.op.name.lower()
        if o.operands:
            text += " " + ", ".join(self.name(v) for v in o.operands)
        if o.attrs is not None:
            text += " " + str(o.attrs)
        if o.results:
            text += " : " + ", ".join(str(r.type) for r in o.results)
        if self.with_locs and o.loc is not UNKNOWN_LOC:
            text += f"  # {o.loc}"
        if not o.regions:
            lines.append(pad + text)
            return
        lines.append(pad + text + " {")
        for i, region in enumerate(o.regions):
            if i:
                lines.append(pad + "} {")
            if region.args:
                lines.append(pad + "  ^(" + ", ".join(f"{self.name(a)}: {a.type}" for a in region.args) + "):")
            self._block(region, depth + 1, lines)
        lines.append(pad + "}")


def print_function(fn: Function, with_locs: bool = False) -> str:
    return Printer(with_locs).function(fn)


# ------------------------------------------------------------------------------------------- parser
class ParseError(ValueError):
    """Text that is not the printed form of a tile-IR function (the message names the line)."""


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside parentheses, brackets and angle brackets."""
    out, depth, start, quote = [], 0, 0, None
    for i, ch in enumerate(text):
        if quote:                                # inside a quoted string attribute
            if ch == quote and text[i - 1] != "\\":
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return out + [tail] if tail or out else out


def parse_type(text: str):
    """``int32``, ``tile<16x16xfloat32>`` or ``array<2xbfloat16>`` back to its type."""
    from tilejit.dtypes import BY_NAME
    text = text.strip()
    try:
        if text.startswith("tile<") and text.endswith(">"):
            *dims, dtype = text[5:-1].split("x")
            return TileType(tuple(int(d) for d in dims), BY_NAME[dtype])
        if text.startswith("array<") and text.endswith(">"):
            rank, dtype = text[6:-1].split("x", 1)
            return ArrayType(BY_NAME[dtype], int(rank))
        return TileType((), BY_NAME[text])
    except (KeyError, ValueError):
        raise ParseError(f"not a type: {text!r}") from None


@dataclass(frozen=True)
class Dialect:
    """What ``parse_function`` needs to read one IR's text: its op enum, its type parser, its
    attribute records (told apart by their field names), the enums their fields name, and the
    ``meta`` a parsed function starts with (from its name)."""
    ops: type
    parse_type: Any                        # text -> type
    attrs: tuple                           # the Attrs subclasses
    enums: dict                            # field annotation -> enum type
    new_meta: Any = lambda name: {}

    def attrs_for(self, fields: frozenset):
        """The record with exactly ``fields``; else (text written before a field was added) the one
        with the fewest more, all of them defaulted."""
        exact = next((c for c in self.attrs if frozenset(f.name for f in dataclasses.fields(c)) == fields), None)
        if exact is not None:
            return exact
        wider = [c for c in self.attrs if fields < frozenset(f.name for f in dataclasses.fields(c))
                 and all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
                         for f in dataclasses.fields(c) if f.name not in fields)]
        return min(wider, key=lambda c: len(dataclasses.fields(c)), default=None)


def _attr_value(text: str, annotation: str, enums: dict):
    text = text.strip()
    if text.startswith("("):
        return tuple(_attr_value(x, "", enums) for x in _split_top(text[1:-1]) if x)
    if annotation == "str":
        return ast.literal_eval(text) if text[:1] in "'\"" else text
    literals = {"True": True, "False": False, "None": None, "inf": float("inf"), "-inf": float("-inf"),
                "nan": float("nan")}
    if text in literals:
        return literals[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    enum_type = enums.get(annotation)
    if enum_type is not None and text.upper() in enum_type.__members__:
        return enum_type[text.upper()]
    raise ParseError(f"not an attribute value: {text!r}")


def _parse_attrs(text: str, dialect: Dialect) -> Attrs:
    items = dict(item.split("=", 1) for item in _split_top(text[1:-1]))
    cls = dialect.attrs_for(frozenset(items))
    if cls is None:
        raise ParseError(f"no attribute record has the fields {sorted(items)}")
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    return cls(**{k: _attr_value(v, str(fields[k]), dialect.enums) for k, v in items.items()})


def parse_function(text: str, dialect: Dialect | None = None) -> Function:
    """The ``Function`` that ``print_function`` printed as ``text`` (loc comments are dropped):
    a pass test can then read as IR text in -> IR text out.  ``dialect``: the tile IR's
    (``TILE_DIALECT``) unless given (``simt.DIALECT`` reads SIMT IR)."""
    dialect = dialect or TILE_DIALECT
    lines = [ln.split("  # ")[0].rstrip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    values: dict[str, Value] = {}
    pos = 0

    def fail(message: str):
        raise ParseError(f"line {pos + 1}: {message}: {lines[min(pos, len(lines) - 1)].strip()!r}")

    def define(name: str, type_) -> Value:
        if name in values:
            fail(f"{name} is defined twice")
        values[name] = Value(type_)
        return values[name]

    def use(name: str) -> Value:
        if name not in values:
            fail(f"{name} is used before it is defined")
        return values[name]

    def args_of(text: str) -> list[Value]:
        return [define(n.strip(), dialect.parse_type(t)) for n, t in (a.split(":", 1) for a in _split_top(text) if a)]

    def block(args: list[Value]) -> Block:
        nonlocal pos
        out = Block(args, [])
        while pos < len(lines):
            line = lines[pos].strip()
            if line == "}" or line == "} {":
                return out
            pos += 1
            out.ops.append(operation(line))
        fail("missing '}'")

    def operation(line: str) -> Operation:
        nonlocal pos
        opens = line.endswith(" {")
        line = line[:-2].rstrip() if opens else line
        results, _, rest = line.partition(" = ") if line.startswith("%") else ("", "", line)
        rest, _, types = rest.partition(" : ")
        attrs = None
        if rest.endswith("}") and "{" in rest:
            rest, brace, attr_text = rest.partition(" {")
            attrs = _parse_attrs(brace.strip() + attr_text, dialect)
        name, _, operand_text = rest.strip().partition(" ")
        try:
            op = dialect.ops[name.upper()]
        except KeyError:
            fail(f"unknown op {name!r}")
        operands = [use(n) for n in _split_top(operand_text) if n]
        result_types = [dialect.parse_type(t) for t in _split_top(types) if t]
        result_names = [n.strip() for n in results.split(",") if n.strip()]
        if len(result_names) != len(result_types):
            fail("as many result types as results are needed")
        o = Operation(op, operands, result_types, attrs)
        regions = []
        while opens:
            region_args = []
            if pos < len(lines) and lines[pos].strip().startswith("^("):
                region_args = args_of(lines[pos].strip()[2:-2])
                pos += 1
            regions.append(block(region_args))
            opens = lines[pos].strip() == "} {"
            pos += 1
        o.regions = regions
        for r_name, r in zip(result_names, o.results):
            if r_name in values:
                fail(f"{r_name} is defined twice")
            values[r_name] = r
        return o

    head = lines[0].strip() if lines else ""
    if not (head.startswith("func @") and head.endswith(") {")):
        fail("expected 'func @name(...) {'")
    name, _, arg_text = head[6:-3].partition("(")
    pos = 1
    body = block(args_of(arg_text))
    if pos != len(lines) - 1:
        fail("text after the function's closing '}'")
    return Function(name, body, [f"a{i}" for i in range(len(body.args))], dialect.new_meta(name))


TILE_DIALECT = Dialect(TileOp, parse_type, (ConstAttrs, AxisAttrs, LoadAttrs, PermAttrs, ReduceAttrs, DotAttrs,
                                            ForAttrs, StoreAttrs, AtomicAttrs, ScanAttrs, PrintAttrs, AssertAttrs, StashAttrs, ClusterAttrs), {"ReduceKind": ReduceKind})
