"""Structured control flow recovered while tracing: runtime ``if`` (both arms traced to the
branch's immediate post-dominator, then merged into an IF with results), ``for`` over runtime
ranges (FOR with iter-args) and ``while`` loops (WHILE, do-while form: Python compiles
``while c: body`` as ``if c: do body while c``).

Loop-carried variables are found by tracing the body with the candidates as region arguments
and comparing what comes out: unchanged ones are dropped, Python numbers that change are
promoted to runtime values, and a change of type is a compile error.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilejit import dtypes
from tilejit.frontend import semantics
from tilejit.errors import CompileError
from tilejit.frontend.cfg import EXIT
from tilejit.frontend.values import StaticIter, Undefined, is_runtime
from tilejit.ir import Block, ForAttrs, TileOp, TileType, Value

_MAX_LOOP_RETRACES = 8


@dataclass
class Returned:
    """The traced code returned ``value``."""
    value: object


class _Pending:
    """Placeholder for an IF result while the arms' values are being collected."""

    def __init__(self, index: int):
        self.index = index


def _same(a, b) -> bool:
    if a is b:
        return True
    if is_runtime(a) or is_runtime(b) or type(a) is not type(b):
        return False
    if isinstance(a, StaticIter):
        return a.items == b.items and a.pos == b.pos
    try:
        return bool(a == b)
    except Exception:
        return False


def _joinable(x) -> bool:
    return (isinstance(x, Value) and isinstance(x.type, TileType)) or semantics.is_number(x)


def _join_type(a, b) -> TileType | str:
    """Common type of two branch values, or a message saying why there is none."""
    if isinstance(a, Value) and isinstance(b, Value):
        if a.type != b.type:
            return f"has type {a.type} in one branch and {b.type} in the other"
        return a.type
    if isinstance(a, Value) or isinstance(b, Value):
        v, w = (a, b) if isinstance(a, Value) else (b, a)
        dt = dtypes.weak_promote(v.type.dtype, w)        # a Python number is weak (NEP 50)
        if not isinstance(w, float) and not dtypes.fits(w, dt):
            return f"is {w} in one branch, which does not fit the {v.type} of the other"
        return TileType(v.type.shape, dt)
    dt = dtypes.promote(dtypes.python_scalar_dtype(a), dtypes.python_scalar_dtype(b))
    return TileType((), dt)


class _Joiner:
    """Pairs up the values two branches left in the same slot; differing runtime-typable ones
    become IF results (``pairs``), resolved once the IF exists (``results``)."""

    def __init__(self):
        self.pairs: list[tuple[object, object, TileType]] = []
        self.results: list[Value] = []

    def join(self, a, b, what: str):
        if _same(a, b):
            return a.copy() if isinstance(a, StaticIter) else a
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            return a if isinstance(a, Undefined) else b
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
            return tuple(self.join(x, y, what) for x, y in zip(a, b))
        if _joinable(a) and _joinable(b):
            t = _join_type(a, b)
            if isinstance(t, str):
                return Undefined(f"{what} {t} of a runtime if")
            self.pairs.append((a, b, t))
            return _Pending(len(self.pairs) - 1)
        return Undefined(f"{what} has different compile-time values in the branches of a runtime if")

    def resolve(self, x):
        if isinstance(x, _Pending):
            return self.results[x.index]
        if isinstance(x, tuple):
            return tuple(self.resolve(y) for y in x)
        return x


class ControlFlow:
    """Mixin of the Tracer: branches, IF merging, FOR and WHILE emission."""

    # --- if ----------------------------------------------------------------------------------------
    def branch(self, frame, ins, cond, jump_when: bool, keep: bool):
        """A conditional jump; ``keep``: the value stays on the stack when the jump is taken."""
        if not is_runtime(cond):
            if isinstance(cond, Undefined):
                raise CompileError(cond.reason, ins.loc)
            if bool(cond) == jump_when:
                frame.pc = ins.target
            elif keep:
                frame.pop()
            return None
        c = semantics.condition(frame.b, cond)
        jumped = (ins.target, False)
        fell = (frame.pc, keep)
        return self.fork(frame, ins, c, *((jumped, fell) if jump_when else (fell, jumped)))

    def fork(self, frame, ins, cond: Value, then_arm, else_arm):
        cfg, instrs = frame.info.cfg, frame.info.instrs
        merge = cfg.ipdom[cfg.block_of[frame.pc - 1]]
        if frame.loop_body is not None and (merge == EXIT or merge not in frame.loop_body):
            raise CompileError("`break` and `return` are not supported inside loops with runtime "
                               "bounds (only tj.static_range loops may exit early)", ins.loc)
        if any(instrs[pc].op == "LOAD_ASSERTION_ERROR" for pc, _ in (then_arm, else_arm)):
            raise CompileError("assert on a runtime value is not supported "
                               "(asserts are checked at compile time)", ins.loc)
        arms = []
        for pc, pop in (then_arm, else_arm):
            arm = frame.fork(pc, Block())
            if pop:
                arm.pop()
            arms.append((arm, self.trace(arm, merge)))
        return self.merge_if(frame, ins, cond, arms, merge)

    def merge_if(self, frame, ins, cond: Value, arms, merge: int):
        """Join the two arms' states: values that differ become results of one IF op."""
        (ft, rt), (fe, re) = arms
        if (rt is None) != (re is None) or len(ft.stack) != len(fe.stack):
            raise CompileError("this control flow cannot be expressed as a structured if", ins.loc)
        joiner = _Joiner()
        merged_locals = {}
        for n in dict.fromkeys(list(ft.locals) + list(fe.locals)):
            if n in ft.locals and n in fe.locals:
                merged_locals[n] = joiner.join(ft.locals[n], fe.locals[n], f"variable '{n}'")
            else:
                merged_locals[n] = Undefined(f"variable '{n}' is assigned in only one branch of a "
                                             "runtime if")
        merged_stack = [joiner.join(a, b, "a value") for a, b in zip(ft.stack, fe.stack)]
        merged_ret = joiner.join(rt.value, re.value, "the return value") if rt is not None else None
        joiner.results = self._emit_if(frame, ins, cond, (ft, fe), joiner.pairs)
        frame.locals = {n: joiner.resolve(v) for n, v in merged_locals.items()}
        frame.stack = [joiner.resolve(v) for v in merged_stack]
        frame.pc = merge
        return Returned(joiner.resolve(merged_ret)) if rt is not None else None

    def _emit_if(self, frame, ins, cond, arm_frames, pairs) -> list[Value]:
        regions = []
        for side, arm in enumerate(arm_frames):
            arm.b.loc = ins.loc
            vals = [semantics.convert(arm.b, p[side], p[2].dtype, p[2].shape) for p in pairs]
            arm.b.create(TileOp.YIELD, vals)
            regions.append(arm.b.block)
        op = frame.b.create(TileOp.IF, [cond], [p[2] for p in pairs], regions=regions, loc=ins.loc)
        return op.results

    # --- loops -------------------------------------------------------------------------------------
    def _stored_names(self, frame, body: frozenset[int]) -> list[str]:
        instrs = frame.info.instrs
        return list(dict.fromkeys(instrs[i].arg for i in sorted(body) if instrs[i].op == "STORE_FAST"))

    def _trace_loop(self, frame, loc, stored: list[str], trace_body):
        """Settle the loop-carried variables; returns (names, types, inits, body frame, block).

        ``trace_body(names, args, poisoned)`` traces the body once with ``args`` bound to
        ``names`` and returns the body frame at the end of the body and its block."""
        carry = {n: (v, v.type) for n in stored
                 if isinstance(v := frame.locals.get(n), Value) and isinstance(v.type, TileType)}
        poisoned: set[str] = set()
        for _ in range(_MAX_LOOP_RETRACES):
            names = [n for n in stored if n in carry]
            args = [Value(carry[n][1], n) for n in names]
            body_frame, block = trace_body(names, args, poisoned)
            if not self._reconcile(frame, body_frame, loc, stored, carry, dict(zip(names, args)),
                                   poisoned):
                return names, [carry[n] for n in names], body_frame, block, poisoned
        raise CompileError("could not settle the types of the variables carried by this loop", loc)

    def _reconcile(self, frame, body_frame, loc, stored, carry, args, poisoned) -> bool:
        """Compare each variable's value at the end of the body with its start; True: retrace."""
        retrace = False
        for n in stored:
            end = body_frame.locals.get(n)
            if n in carry:
                init, t = carry[n]
                if end is args[n]:
                    del carry[n]                      # never changed: not loop-carried
                    retrace = True
                elif isinstance(end, Undefined):
                    raise CompileError(end.reason, loc)
                elif not _joinable(end):
                    raise CompileError(f"loop-carried variable '{n}' must stay a tile or scalar, "
                                       f"got {semantics.describe(end)}", loc)
                elif isinstance(end, Value) and end.type != t:
                    if isinstance(init, Value):
                        raise CompileError(f"loop-carried variable '{n}' changes type from {t} to "
                                           f"{end.type} inside the loop", loc)
                    carry[n], retrace = (init, end.type), True    # re-promote a Python number
                continue
            init = frame.locals.get(n)
            if init is None and n not in frame.locals or isinstance(init, Undefined) \
                    or n in poisoned or _same(init, end):
                continue
            if _joinable(init) and _joinable(end):
                if isinstance(init, Value):
                    t = init.type                                # changes after all: carry it
                else:
                    t = end.type if isinstance(end, Value) else _join_type(init, end)
                carry[n], retrace = (init, t), True              # promote to a runtime value
            else:
                poisoned.add(n)
                retrace = True
        return retrace

    def _after_loop(self, frame, stored, names, results, poisoned, iv_name=None):
        for n in stored:
            if n in names:
                continue
            if n == iv_name or n not in frame.locals or n in poisoned \
                    or isinstance(frame.locals[n], Undefined):
                frame.locals[n] = Undefined(f"variable '{n}' is assigned inside a runtime loop and "
                                            "cannot be used after it")
        for n, r in zip(names, results):
            frame.locals[n] = r

    def _loop_body_frame(self, frame, pc, block, body, names, args, poisoned):
        bf = frame.fork(pc, block)
        bf.loop_body = body
        bf.locals.update(zip(names, args))
        for n in poisoned:
            bf.locals[n] = Undefined(f"variable '{n}' changes its compile-time value inside a "
                                     "runtime loop")
        return bf

    def emit_for(self, frame, ins, rng):
        header = frame.pc - 1
        cfg, instrs = frame.info.cfg, frame.info.instrs
        body = cfg.loop_instrs(header)
        target = instrs[header + 1]
        if target.op != "STORE_FAST":
            raise CompileError("the target of a runtime loop must be a single variable", ins.loc)
        b = frame.b
        bounds = (rng.start, rng.stop, rng.step)
        iv_dt = semantics.result_dtype(b, list(bounds))
        stored = [n for n in self._stored_names(frame, body) if n != target.arg]

        def trace_body(names, args, poisoned):
            block = Block([Value(TileType((), iv_dt), target.arg)] + args)
            bf = self._loop_body_frame(frame, header + 1, block, body, names, args, poisoned)
            bf.push(block.args[0])
            if self.trace(bf, header) is not None:
                raise CompileError("`return` inside a loop with runtime bounds is not supported", ins.loc)
            return bf, block

        names, carried, bf, block, poisoned = self._trace_loop(frame, ins.loc, stored, trace_body)
        self._yield(bf, ins, names, carried)
        b.loc = ins.loc
        lb, ub, step = (semantics.convert(b, v, iv_dt, ()) for v in bounds)
        inits = [semantics.convert(b, v, t.dtype, t.shape) for v, t in carried]
        op = b.create(TileOp.FOR, [lb, ub, step, *inits], [t for _, t in carried],
                      ForAttrs(stages=rng.stages), regions=[block])
        frame.pop()                                  # the range iterator
        frame.pc = ins.target
        self._after_loop(frame, stored + [target.arg], names, op.results, poisoned, target.arg)

    def _yield(self, body_frame, ins, names, carried, cond=None):
        body_frame.b.loc = ins.loc
        vals = [semantics.convert(body_frame.b, body_frame.locals[n], t.dtype, t.shape)
                for n, (_, t) in zip(names, carried)]
        body_frame.b.create(TileOp.YIELD, ([cond] if cond is not None else []) + vals)

    # --- while ---------------------------------------------------------------------------------------
    def _while_test(self, frame, header: int, body: frozenset[int]) -> tuple[int, int]:
        """Where the loop's exit test starts and the pc the loop exits to.

        A rotated ``while`` ends with its condition: one or more conditional jumps (``and``/``or``
        give several) that leave for one exit pc or go back to the header.  That trailing test
        must not assign variables or loop; an exit anywhere else is a ``break``/``return``."""
        instrs, cfg = frame.info.instrs, frame.info.cfg
        exits, outs = [], set()
        for i in sorted(body):
            ins = instrs[i]
            if ins.op == "RETURN_VALUE":
                raise CompileError("`return` inside a while loop is not supported", ins.loc)
            succ = ([ins.target] if ins.target is not None else []) + \
                ([i + 1] if ins.op != "JUMP" and ins.op != "RAISE" else [])
            leaving = [s for s in succ if s not in body]
            if leaving:
                exits.append(i)
                outs.update(leaving)
        if not exits:
            back_edge = max(i for i in body if instrs[i].target == header)
            raise CompileError("this while loop never exits (`while True` needs a condition)",
                               instrs[back_edge].loc)
        test, line = exits[0], instrs[exits[0]].loc.line
        # back over the condition's own instructions (the while line), across the blocks an `or`
        # makes (its first test jumps back to the header, so the first exit is the last test)
        while test > header and instrs[test - 1].loc.line == line \
                and instrs[test - 1].op != "STORE_FAST":
            test -= 1                       # the condition's own instructions (the while line)
        pure = all(instrs[i].op not in ("STORE_FAST", "FOR_ITER", "RETURN_VALUE")
                   and (instrs[i].target is None or instrs[i].target > i or instrs[i].target == header)
                   for i in body if i >= test)
        if len(outs) != 1 or not pure:
            raise CompileError("`break` and `return` are not supported inside while loops",
                               instrs[exits[0]].loc)
        return test, outs.pop()

    def _eval_test(self, frame, header: int, exit_pc: int):
        """Run the loop's exit test from ``frame.pc``: True/False or a bool Value (continue?)."""
        instrs = frame.info.instrs
        while frame.pc not in (header, exit_pc):
            ins = instrs[frame.pc]
            frame.b.loc = ins.loc
            frame.pc += 1
            if ins.op == "JUMP":
                frame.pc = ins.target
                continue
            if ins.op not in ("POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "JUMP_IF_FALSE_OR_POP",
                              "JUMP_IF_TRUE_OR_POP"):
                getattr(self, "op_" + ins.op)(frame, ins)
                continue
            cond = frame.pop()
            jump_when = ins.op.endswith("TRUE") or ins.op == "JUMP_IF_TRUE_OR_POP"
            keep = ins.op.endswith("_OR_POP")          # `a and b` as a value: a stays when it jumps
            if not is_runtime(cond):
                if bool(cond) == jump_when:
                    if keep:
                        frame.push(cond)
                    frame.pc = ins.target
                continue
            c = semantics.condition(frame.b, cond)
            arms = [frame.fork(pc, Block()) for pc in
                    ((ins.target, frame.pc) if jump_when else (frame.pc, ins.target))]
            if keep:
                arms[0 if jump_when else 1].push(cond)
            values = [self._eval_test(arm, header, exit_pc) for arm in arms]
            if not any(arm.b.block.ops for arm in arms) and all(isinstance(v, bool) for v in values):
                return c if values[0] else semantics.unary(frame.b, "not", c) if values[1] else False
            for arm, v in zip(arms, values):
                arm.b.create(TileOp.YIELD, [semantics.to_bool(arm.b, v)])
            return frame.b.create(TileOp.IF, [c], [c.type], regions=[a.b.block for a in arms]).result
        return frame.pc == header

    def emit_while(self, frame):
        header = frame.pc
        cfg, instrs = frame.info.cfg, frame.info.instrs
        body = cfg.loop_instrs(header)
        test, exit_pc = self._while_test(frame, header, body)
        ins = instrs[test]
        stored = self._stored_names(frame, body)
        conds = []

        def trace_body(names, args, poisoned):
            block = Block(list(args))
            bf = self._loop_body_frame(frame, header, block, body, names, args, poisoned)
            if test != header and self.trace(bf, test, enter_loop=header) is not None:
                raise CompileError("`return` inside a while loop is not supported", ins.loc)
            conds.append(self._eval_test(bf.fork(test, block), header, exit_pc))
            return bf, block

        names, carried, bf, block, poisoned = self._trace_loop(frame, ins.loc, stored, trace_body)
        bf.b.loc = ins.loc
        self._yield(bf, ins, names, carried, semantics.to_bool(bf.b, conds[-1]))
        b = frame.b
        b.loc = instrs[header].loc
        inits = [semantics.convert(b, v, t.dtype, t.shape) for v, t in carried]
        op = b.create(TileOp.WHILE, inits, [t for _, t in carried], regions=[block])
        frame.pc = exit_pc
        self._after_loop(frame, stored, names, op.results, poisoned)
