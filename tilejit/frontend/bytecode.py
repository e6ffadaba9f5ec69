"""The one normalisation table of ``dis`` instructions across Python 3.11, 3.12 and 3.13.

Everything version-specific about CPython bytecode lives here; the tracer sees a small canonical
instruction set (``CANONICAL``) whose stack effects are the same on every supported version
(an instruction outside it becomes ``UNSUPPORTED``, a compile error naming it):

* ``CALL n`` / ``CALL_KW n`` pop ``n`` arguments (``CALL_KW`` also a keyword-name tuple on top)
  and then a *callable pair* of two slots, one of which may be ``NULL``; when neither is ``NULL``
  the first is the callable and the second its bound ``self``.  (3.11/3.12 push the NULL before
  the callable, 3.13 after it; the pair rule covers both.)
* ``LOAD_METHOD name`` pops an object and pushes its attribute plus ``NULL``.
* ``FOR_ITER target``: on exhaustion the iterator is popped and execution continues at
  ``target``, which is already past any ``END_FOR`` clean-up.
* Jump targets are indices into the canonical instruction list, not byte offsets.
"""
from __future__ import annotations

import dis
import sys
from dataclasses import dataclass
from types import CodeType

from tilejit.ir import Loc

PY = sys.version_info[:2]
# the Pythons whose bytecode this module knows; another one's kernels are refused (CodeInfo)
# rather than read with the wrong table
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13))

# the canonical instruction set the tracer implements (one ``op_<NAME>`` handler each)
CANONICAL = frozenset({
    "NOP", "UNSUPPORTED", "LOAD_FAST", "STORE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_DEREF",
    "PUSH_NULL", "POP_TOP", "COPY", "SWAP", "BUILD_TUPLE", "BUILD_LIST", "LIST_EXTEND",
    "BUILD_SLICE", "SUBSCR", "UNPACK_SEQUENCE", "GET_ITER", "FOR_ITER", "BINARY_OP", "COMPARE_OP",
    "IS_OP", "CONTAINS_OP", "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "UNARY_NOT",
    "LOAD_ATTR", "LOAD_METHOD", "CALL", "CALL_KW", "JUMP", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE",
    "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "RETURN_VALUE", "LOAD_ASSERTION_ERROR", "RAISE"})
# canonical ops that end a basic block and where control may go
JUMPS = frozenset({"JUMP"})
BRANCHES = frozenset({"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
                      "POP_JUMP_IF_NOT_NONE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP",
                      "FOR_ITER"})
TERMINATORS = frozenset({"RETURN_VALUE", "RAISE"})


@dataclass(frozen=True)
class Instr:
    """A canonical instruction: ``op`` from the table below, its decoded ``arg`` and source loc."""
    op: str
    arg: object
    loc: Loc
    offset: int                     # byte offset of the original instruction (for messages)
    target: int | None = None       # index of the jump target in the canonical list


# --- the table ------------------------------------------------------------------------------------
# original opname -> canonical opname (same stack effect, arg decoded by _decode_arg)
_RENAME = {
    "LOAD_FAST_CHECK": "LOAD_FAST",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP", "JUMP_BACKWARD_NO_INTERRUPT": "JUMP",
    "JUMP_ABSOLUTE": "JUMP",
    "BINARY_SUBSCR": "SUBSCR",
    "RAISE_VARARGS": "RAISE", "RERAISE": "RAISE",
}
# instructions with no effect on the abstract state
_NOPS = frozenset({"NOP", "RESUME", "CACHE", "PRECALL", "COPY_FREE_VARS",
                   "TO_BOOL", "END_FOR", "MAKE_CELL"})
# instructions that are a construct kernels do not support: the canonical op is UNSUPPORTED and its
# arg names the construct (the tracer raises when it meets one; ``scan_unsupported`` finds them early)
_UNSUPPORTED = {
    "SETUP_FINALLY": "`try` is", "PUSH_EXC_INFO": "`try` is", "CHECK_EXC_MATCH": "`try` is",
    "POP_EXCEPT": "`try` is", "SETUP_CLEANUP": "`try` is",
    "BEFORE_WITH": "`with` is", "BEFORE_ASYNC_WITH": "`with` is", "SETUP_WITH": "`with` is",
    "RETURN_GENERATOR": "generators (`yield`) are", "YIELD_VALUE": "generators (`yield`) are",
    "GET_AWAITABLE": "`await` is", "SEND": "generators (`yield`) are",
    "MAKE_FUNCTION": "defining functions, lambdas or comprehensions inside a kernel is",
    "LOAD_FAST_AND_CLEAR": "comprehensions are", "LIST_APPEND": "comprehensions are",
    "SET_ADD": "comprehensions are", "MAP_ADD": "comprehensions are",
    "CALL_FUNCTION_EX": "star-arguments (`*args`, `**kwargs`) in calls are",
    "DICT_MERGE": "star-arguments (`*args`, `**kwargs`) in calls are",
    "BUILD_MAP": "dicts are", "BUILD_CONST_KEY_MAP": "dicts are", "BUILD_SET": "sets are",
    "STORE_ATTR": "attribute assignment is", "DELETE_ATTR": "`del` is", "DELETE_FAST": "`del` is",
    "DELETE_SUBSCR": "`del` is", "DELETE_GLOBAL": "`del` is", "DELETE_NAME": "`del` is",
    "STORE_GLOBAL": "assignment to a global variable is", "STORE_NAME": "assignment to a global variable is",
    "STORE_DEREF": "assignment to a closure variable is", "STORE_SUBSCR": "item assignment is",
    "STORE_SLICE": "item assignment is", "IMPORT_NAME": "`import` is", "IMPORT_FROM": "`import` is",
    "FORMAT_VALUE": "f-strings are", "FORMAT_SIMPLE": "f-strings are", "BUILD_STRING": "f-strings are",
    "LOAD_CLOSURE": "defining functions, lambdas or comprehensions inside a kernel is",
    "UNPACK_EX": "starred assignment is", "LIST_TO_TUPLE": "star-arguments are",
    "CONVERT_VALUE": "f-strings are", "FORMAT_WITH_SPEC": "f-strings are",
    "GET_YIELD_FROM_ITER": "generators (`yield`) are", "GET_AITER": "`async for` is",
    "GET_ANEXT": "`async for` is", "CHECK_EG_MATCH": "`try` is", "WITH_EXCEPT_START": "`with` is",
    "LOAD_BUILD_CLASS": "defining classes inside a kernel is", "GET_LEN": "`match` is",
    "MATCH_CLASS": "`match` is", "MATCH_MAPPING": "`match` is", "MATCH_SEQUENCE": "`match` is",
    "MATCH_KEYS": "`match` is", "DICT_UPDATE": "dicts are", "DELETE_DEREF": "`del` is",
    "IMPORT_STAR": "`import` is",
}
_SUPERINSTRUCTIONS = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
                      "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
                      "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST")}
# CALL_INTRINSIC_1 (3.12+) argument names that we map to a canonical op
_INTRINSICS = {"INTRINSIC_UNARY_POSITIVE": "UNARY_POSITIVE"}
_NULL_BELOW_GLOBAL = PY < (3, 13)
# what FOR_ITER's exhaustion target points at before the loop's own clean-up is finished
_FOR_EXIT_CLEANUP = {(3, 11): (), (3, 12): ("END_FOR",), (3, 13): ("END_FOR", "POP_TOP")}


def _loc(ins: dis.Instruction, code: CodeType) -> Loc:
    pos = ins.positions
    line = (pos.lineno if pos is not None else None) or code.co_firstlineno
    col = pos.col_offset if pos is not None and pos.col_offset is not None else 0
    end_col = pos.end_col_offset if pos is not None and pos.end_lineno == line else None
    return Loc(code.co_filename, line, col, end_col, code.co_name)


def _expand(ins: dis.Instruction, code: CodeType, state: dict) -> list[tuple[str, object]]:
    """Canonical (op, arg) list for one original instruction; ``state`` carries KW_NAMES."""
    name = ins.opname
    if name == "EXTENDED_ARG":          # dis already folded it into the next instruction's arg
        return []
    if name in _NOPS:
        return [("NOP", None)]
    if name in _UNSUPPORTED:
        return [("UNSUPPORTED", _UNSUPPORTED[name])]
    if name in _SUPERINSTRUCTIONS:          # 3.13: two local accesses in one instruction
        (first, second), (a, b) = _SUPERINSTRUCTIONS[name], ins.argval
        return [(first, a), (second, b)]
    if name == "LOAD_GLOBAL":
        # low bit of arg: also push NULL, below the global before 3.13 and above it since
        if not ins.arg & 1:
            return [("LOAD_GLOBAL", ins.argval)]
        pair = [("PUSH_NULL", None), ("LOAD_GLOBAL", ins.argval)]
        return pair if _NULL_BELOW_GLOBAL else pair[::-1]
    if name == "LOAD_ATTR" and PY >= (3, 12) and ins.arg & 1:
        return [("LOAD_METHOD", ins.argval)]
    if name == "LOAD_SUPER_ATTR":
        return [("UNSUPPORTED", "`super()` is")]
    if name == "RETURN_CONST":
        return [("LOAD_CONST", ins.argval), ("RETURN_VALUE", None)]
    if name == "KW_NAMES":          # 3.11/3.12: names for the next CALL; 3.13 pushes them itself
        state["kw"] = True
        return [("LOAD_CONST", code.co_consts[ins.arg])]
    if name == "CALL":
        kw, state["kw"] = state.get("kw", False), False
        return [("CALL_KW" if kw else "CALL", ins.arg)]
    if name == "BINARY_SLICE":
        return [("BUILD_SLICE", 2), ("SUBSCR", None)]
    if name == "BINARY_OP":
        return [("BINARY_OP", ins.argrepr.rstrip("="))]
    if name == "COMPARE_OP":
        return [("COMPARE_OP", ins.argval)]
    if name == "CALL_INTRINSIC_1":
        op = _INTRINSICS.get(ins.argrepr)
        return [(op, None)] if op else [("UNSUPPORTED", "star-arguments are")]
    if name == "LOAD_DEREF":
        return [("LOAD_DEREF", ins.argval)]
    op = _RENAME.get(name, name)
    if op not in CANONICAL:
        return [("UNSUPPORTED", f"the Python operation {name} is")]
    return [(op, ins.argval)]


def _cleanup_nops(raw: list[dis.Instruction]) -> set[int]:
    """Offsets of instructions that only finish a for loop's exit (made NOPs, see FOR_ITER)."""
    pattern = _FOR_EXIT_CLEANUP.get(PY, ("END_FOR", "POP_TOP"))
    out: set[int] = set()
    for i, ins in enumerate(raw):
        if pattern and ins.opname == pattern[0]:
            names = [r.opname for r in raw[i:i + len(pattern)]]
            if tuple(names) == pattern:
                out.update(r.offset for r in raw[i:i + len(pattern)])
    return out


def normalize(code: CodeType) -> list[Instr]:
    """Decode ``code`` into canonical instructions with jump targets as list indices."""
    raw = list(dis.get_instructions(code))
    cleanup = _cleanup_nops(raw)
    staged: list[tuple[str, object, Loc, int, int | None]] = []
    first_index: dict[int, int] = {}
    state: dict = {}
    for ins in raw:
        first_index[ins.offset] = len(staged)
        loc = _loc(ins, code)
        jump = ins.argval if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs else None
        parts = [("NOP", None)] if ins.offset in cleanup else _expand(ins, code, state)
        for op, arg in parts:
            is_jump = jump is not None and (op in JUMPS or op in BRANCHES)
            staged.append((op, None if is_jump else arg, loc, ins.offset, jump if is_jump else None))
    out = []
    for op, arg, loc, offset, jump in staged:
        target = None if jump is None else first_index[jump]
        out.append(Instr(op, arg, loc, offset, target))
    return out


def scan_unsupported(code: CodeType, instrs: list[Instr]) -> tuple[str, Loc] | None:
    """The first construct in ``code`` kernels never support: (message, where), if any.

    Instructions CPython places on the ``def`` line (a generator's RETURN_GENERATOR) are
    reported at a later occurrence of the construct when there is one; a ``try`` is reported at
    the first instruction its exception-table entry protects."""
    bad = [i for i in instrs if i.op == "UNSUPPORTED"]
    if bad:
        later = [i for i in bad if i.loc.line != code.co_firstlineno]
        first = (later or bad)[0]
        if first.arg != "`try` is":
            return f"{first.arg} not supported in kernels", first.loc
    entries = getattr(dis.Bytecode(code), "exception_entries", [])
    if entries:
        start = min(e.start for e in entries)
        protected = [i for i in instrs if i.offset >= start]
        before = [i for i in instrs if i.offset < start and i.op == "NOP"]
        where = before[-1] if before and before[-1].loc.line < protected[0].loc.line else protected[0]
        return "`try` is not supported in kernels", where.loc
    return None
