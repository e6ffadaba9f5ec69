"""Control-flow graph over canonical instructions: basic blocks, loops and post-dominators, and
``CodeInfo``: a Python function prepared for tracing (its instructions and CFG).

The tracer uses the immediate post-dominator of a branch as the point where the two arms of a
runtime ``if`` meet again, and the natural loop of each back edge to know a loop's extent.
Blocks are identified by the index of their first instruction; ``EXIT`` is the virtual exit.
"""
from __future__ import annotations

import functools
from types import CodeType

from tilejit.errors import CompileError
from tilejit.frontend import bytecode
from tilejit.frontend.bytecode import BRANCHES, JUMPS, TERMINATORS, Instr, normalize, scan_unsupported
from tilejit.ir import Loc

EXIT = -1


class CFG:
    def __init__(self, instrs: list[Instr]):
        self.instrs = instrs
        self.starts = self._leaders()
        ends = self.starts[1:] + [len(instrs)]
        self._ends = {b: e - 1 for b, e in zip(self.starts, ends)}
        self.block_of = self._block_index()
        self.succs = {b: self._successors(b) for b in self.starts}
        self.preds: dict[int, list[int]] = {b: [] for b in self.starts}
        for b, ss in self.succs.items():
            for s in ss:
                if s != EXIT:
                    self.preds[s].append(b)
        self.ipdom = self._immediate_post_dominators()
        self.loops = self._natural_loops()

    # --- blocks ---------------------------------------------------------------------------------
    def _leaders(self) -> list[int]:
        leaders = {0}
        for i, ins in enumerate(self.instrs):
            if ins.target is not None:
                leaders.add(ins.target)
            if ins.op in JUMPS or ins.op in BRANCHES or ins.op in TERMINATORS:
                if i + 1 < len(self.instrs):
                    leaders.add(i + 1)
        return sorted(leaders)

    def _block_index(self) -> list[int]:
        out, current = [], 0
        leaders = set(self.starts)
        for i in range(len(self.instrs)):
            if i in leaders:
                current = i
            out.append(current)
        return out

    def end_of(self, block: int) -> int:
        """Index of the last instruction of ``block``."""
        return self._ends[block]

    def _successors(self, block: int) -> list[int]:
        last = self.end_of(block)
        ins = self.instrs[last]
        if ins.op in TERMINATORS:
            return [EXIT]
        if ins.op in JUMPS:
            return [ins.target]
        nxt = [last + 1] if last + 1 < len(self.instrs) else [EXIT]
        if ins.op in BRANCHES:
            return nxt + [ins.target]
        return nxt

    # --- post-dominators -------------------------------------------------------------------------
    def _immediate_post_dominators(self) -> dict[int, int]:
        nodes = list(self.starts)
        everything = frozenset(nodes) | {EXIT}
        pdom: dict[int, frozenset] = {b: everything for b in nodes}
        pdom[EXIT] = frozenset({EXIT})
        changed = True
        while changed:
            changed = False
            for b in reversed(nodes):
                sets = [pdom[s] for s in self.succs[b]]
                new = frozenset({b}) | (frozenset.intersection(*sets) if sets else frozenset())
                if new != pdom[b]:
                    pdom[b], changed = new, True
        # strict post-dominators form a chain; the nearest one has the largest pdom set
        return {b: max(pdom[b] - {b}, key=lambda d: len(pdom[d]), default=EXIT) for b in nodes}

    # --- loops -------------------------------------------------------------------------------------
    def _natural_loops(self) -> dict[int, frozenset[int]]:
        """Loop header block -> the blocks of its natural loop (a backward jump is a back edge)."""
        loops: dict[int, set[int]] = {}
        for b in self.starts:
            for s in self.succs[b]:
                if s != EXIT and s <= b:
                    body = loops.setdefault(s, {s})
                    work = [b]
                    while work:
                        n = work.pop()
                        if n not in body:
                            body.add(n)
                            work.extend(self.preds[n])
        return {h: frozenset(body) for h, body in loops.items()}

    def loop_instrs(self, header: int) -> frozenset[int]:
        """Indices of every instruction inside the loop headed by ``header``."""
        out = set()
        for b in self.loops[header]:
            out.update(range(b, self.end_of(b) + 1))
        return frozenset(out)


@functools.lru_cache(maxsize=512)
def _analyse(code: CodeType, filename: str) -> tuple[list[Instr], CFG]:
    """Canonical instructions and CFG of ``code`` (code objects compare equal across files, so
    the file name, which every Loc carries, is part of the key)."""
    instrs = normalize(code)
    return instrs, CFG(instrs)


class CodeInfo:
    """A Python function prepared for tracing: canonical instructions, CFG, globals, closure."""

    def __init__(self, fn, is_kernel: bool):
        self.fn, self.code, self.is_kernel = fn, fn.__code__, is_kernel
        if bytecode.PY not in bytecode.SUPPORTED_PYTHONS:
            known = ", ".join(f"{a}.{b}" for a, b in bytecode.SUPPORTED_PYTHONS)
            raise CompileError(f"tilejit reads the bytecode of Python {known}, and this is Python "
                               f"{bytecode.PY[0]}.{bytecode.PY[1]}, whose bytecode it does not know: run "
                               f"'{fn.__name__}' on one of those", Loc(self.code.co_filename, self.code.co_firstlineno,
                                                                       0, None, fn.__name__))
        self.instrs, self.cfg = _analyse(self.code, self.code.co_filename)
        self.globals = fn.__globals__
        self.cells = dict(zip(self.code.co_freevars, fn.__closure__ or ()))
        self.while_headers = frozenset(h for h in self.cfg.loops if self.instrs[h].op != "FOR_ITER")

    def check_supported(self) -> None:
        bad = scan_unsupported(self.code, self.instrs)
        if bad is not None:
            raise CompileError(*bad)
