"""The symbolic bytecode interpreter: walks canonical instructions, folding compile-time values
in Python and emitting tile IR for runtime ones (DESIGN §2.1; handlers are ``op_<NAME>``).

Control flow (runtime ``if``, ``for``, ``while``) is in ``control.py``; attribute access and
calls (builtins, ``tj.func`` inlining, Python builtins, ``math``) in ``calls.py``.
"""
from __future__ import annotations

import operator

from tilejit.frontend import mathlib, semantics
from tilejit.frontend.bytecode import Instr
from tilejit.errors import CompileError
from tilejit.frontend.calls import Calls
from tilejit.frontend.cfg import EXIT, CodeInfo
from tilejit.frontend.control import ControlFlow, Returned
from tilejit.frontend.values import (NULL, ArrayShape, RangeSpec, StaticIter, Undefined,
                                     copy_stack_item, is_runtime)
from tilejit.ir import Block, Builder, Value

_PY_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "&": operator.and_,
              "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
              "@": operator.matmul, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
              "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_PY_UNARY = {"-": operator.neg, "~": operator.invert, "not": operator.not_, "+": operator.pos}


class Frame:
    """Abstract state of one function activation: locals, value stack, pc and insertion block."""
    __slots__ = ("info", "locals", "stack", "pc", "b", "loop_body")

    def __init__(self, info: CodeInfo, locals_: dict, stack: list, pc: int, block: Block,
                 loop_body: frozenset[int] | None = None):
        self.info, self.locals, self.stack, self.pc = info, locals_, stack, pc
        self.b, self.loop_body = Builder(block), loop_body

    def fork(self, pc: int, block: Block) -> "Frame":
        f = Frame(self.info, dict(self.locals), [copy_stack_item(x) for x in self.stack], pc, block,
                  self.loop_body)
        f.b.loc = self.b.loc
        return f

    def pop(self, n: int | None = None):
        if n is None:
            return self.stack.pop()
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def push(self, x) -> None:
        self.stack.append(x)


class Tracer(ControlFlow, Calls):
    """Traces one kernel (and the ``tj.func``s it calls) into the entry block of a Function."""

    def __init__(self, entry: Block, kernel_name: str):
        self.entry, self.kernel_name = entry, kernel_name
        self.dims: dict[tuple[int, int], Value] = {}
        self.deps: dict[str, object] = {}
        self.inline_depth = 0
        self.inlining: list = []           # the tj.funcs being inlined (recursion check)

    def run(self, info: CodeInfo, locals_: dict, block: Block):
        """Trace ``info``'s function from its first instruction to its return; its value."""
        info.check_supported()
        frame = Frame(info, locals_, [], 0, block)
        out = self.trace(frame, EXIT)
        return out.value

    def trace(self, frame: Frame, stop: int, enter_loop: int | None = None) -> Returned | None:
        """Execute from ``frame.pc`` until ``stop`` (None returned) or a return (Returned)."""
        instrs, prev_loc = frame.info.instrs, frame.b.loc
        skip_header = enter_loop
        while frame.pc != stop:
            pc = frame.pc
            if frame.loop_body is not None and pc not in frame.loop_body:
                raise CompileError("`break` is not supported in loops with runtime bounds "
                                   "(only tj.static_range loops may exit early)", prev_loc)
            if pc in frame.info.while_headers and pc != skip_header:
                self.emit_while(frame)
                continue
            skip_header = None
            ins = instrs[pc]
            frame.b.loc = prev_loc = ins.loc
            frame.pc = pc + 1
            handler = getattr(self, "op_" + ins.op, None)
            if handler is None:
                raise CompileError(f"the Python operation `{ins.op}` is not supported in kernels",
                                   ins.loc)
            out = handler(frame, ins)
            if out is not None:
                return out
        return None

    # --- locals, constants, stack --------------------------------------------------------------
    def op_NOP(self, frame, ins):
        pass

    def op_UNSUPPORTED(self, frame, ins):
        raise CompileError(f"{ins.arg} not supported in kernels", ins.loc)

    def op_LOAD_FAST(self, frame, ins):
        if ins.arg not in frame.locals:
            raise CompileError(f"local variable '{ins.arg}' is used before it is assigned", ins.loc)
        frame.push(self.check_defined(frame.locals[ins.arg], ins))

    def op_STORE_FAST(self, frame, ins):
        frame.locals[ins.arg] = frame.pop()

    def op_LOAD_CONST(self, frame, ins):
        frame.push(ins.arg)

    def op_LOAD_GLOBAL(self, frame, ins):
        frame.push(self.load_global(frame, ins.arg))

    def op_LOAD_DEREF(self, frame, ins):
        frame.push(self.load_closure(frame, ins.arg))

    def op_PUSH_NULL(self, frame, ins):
        frame.push(NULL)

    def op_POP_TOP(self, frame, ins):
        frame.pop()

    def op_COPY(self, frame, ins):
        frame.push(frame.stack[-ins.arg])

    def op_SWAP(self, frame, ins):
        s = frame.stack
        s[-1], s[-ins.arg] = s[-ins.arg], s[-1]

    def check_defined(self, value, ins: Instr):
        if isinstance(value, Undefined):
            raise CompileError(value.reason, ins.loc)
        return value

    # --- containers ---------------------------------------------------------------------------------
    def op_BUILD_TUPLE(self, frame, ins):
        frame.push(tuple(frame.pop(ins.arg)))

    op_BUILD_LIST = op_BUILD_TUPLE      # lists are only ever read in kernels: keep them as tuples

    def op_LIST_EXTEND(self, frame, ins):
        items = frame.pop()
        frame.stack[-ins.arg] = tuple(frame.stack[-ins.arg]) + tuple(items)

    def op_BUILD_SLICE(self, frame, ins):
        frame.push(slice(*frame.pop(ins.arg)))

    def op_SUBSCR(self, frame, ins):
        index = frame.pop()
        frame.push(self.subscript(frame, frame.pop(), index))

    def op_UNPACK_SEQUENCE(self, frame, ins):
        seq = frame.pop()
        if isinstance(seq, ArrayShape):
            seq = tuple(self.dim(seq.handle, a) for a in range(seq.handle.rank))
        if not isinstance(seq, (tuple, list, str)):
            raise CompileError(f"cannot unpack {semantics.describe(seq)}", ins.loc)
        if len(seq) != ins.arg:
            raise CompileError(f"cannot unpack {len(seq)} values into {ins.arg} names", ins.loc)
        frame.stack.extend(reversed(tuple(seq)))

    def op_GET_ITER(self, frame, ins):
        obj = frame.pop()
        if isinstance(obj, (RangeSpec, StaticIter)):
            frame.push(obj)
        elif isinstance(obj, ArrayShape):
            frame.push(StaticIter(tuple(self.dim(obj.handle, a) for a in range(obj.handle.rank))))
        elif isinstance(obj, (tuple, list, str, range)):
            frame.push(StaticIter(tuple(obj)))
        else:
            raise CompileError(f"cannot iterate over {semantics.describe(obj)} in a kernel "
                               "(use range, tj.range or tj.static_range)", ins.loc)

    def op_FOR_ITER(self, frame, ins):
        it = frame.stack[-1]
        if isinstance(it, RangeSpec):
            return self.emit_for(frame, ins, it)
        if it.pos < len(it.items):
            it.pos += 1
            frame.push(it.items[it.pos - 1])
        else:
            frame.pop()
            frame.pc = ins.target

    # --- operators --------------------------------------------------------------------------------
    def op_BINARY_OP(self, frame, ins):
        y = frame.pop()
        frame.push(self.binary(frame, ins.arg, frame.pop(), y))

    def op_COMPARE_OP(self, frame, ins):
        y = frame.pop()
        frame.push(self.binary(frame, ins.arg, frame.pop(), y))

    def binary(self, frame: Frame, op: str, x, y):
        if not is_runtime(x) and not is_runtime(y):
            try:
                return _PY_BINARY[op](x, y)
            except Exception as e:          # the user's compile-time arithmetic failed
                raise CompileError(f"{type(e).__name__} in compile-time expression: {e}",
                                   frame.b.loc) from None
        if op == "@":
            return semantics.dot(frame.b, x, y)
        if op == "**":
            return mathlib.power(frame.b, x, y)
        if op not in semantics.BINARY and op not in semantics.COMPARE:
            raise CompileError(f"operator {op} is not supported on tiles", frame.b.loc)
        return semantics.binary(frame.b, op, x, y)

    def unary(self, frame: Frame, op: str):
        x = frame.pop()
        if is_runtime(x):
            frame.push(semantics.unary(frame.b, op, x))
            return
        try:
            frame.push(_PY_UNARY[op](x))
        except Exception as e:
            raise CompileError(f"{type(e).__name__} in compile-time expression: {e}",
                               frame.b.loc) from None

    def op_UNARY_NEGATIVE(self, frame, ins):
        self.unary(frame, "-")

    def op_UNARY_POSITIVE(self, frame, ins):
        self.unary(frame, "+")

    def op_UNARY_INVERT(self, frame, ins):
        self.unary(frame, "~")

    def op_UNARY_NOT(self, frame, ins):
        self.unary(frame, "not")

    def op_IS_OP(self, frame, ins):
        y, x = frame.pop(), frame.pop()
        frame.push((x is y) != bool(ins.arg))

    def op_CONTAINS_OP(self, frame, ins):
        container, x = frame.pop(), frame.pop()
        if is_runtime(x) or is_runtime(container):
            raise CompileError("`in` is only supported on compile-time values", ins.loc)
        frame.push((x in container) != bool(ins.arg))

    # --- attributes and calls ------------------------------------------------------------------------
    def op_LOAD_ATTR(self, frame, ins):
        frame.push(self.get_attr(frame, frame.pop(), ins.arg))

    def op_LOAD_METHOD(self, frame, ins):
        frame.push(self.get_attr(frame, frame.pop(), ins.arg))
        frame.push(NULL)

    def op_CALL(self, frame, ins):
        args = frame.pop(ins.arg)
        frame.push(self.call_with_pair(frame, args, {}))

    def op_CALL_KW(self, frame, ins):
        names = frame.pop()
        args = frame.pop(ins.arg)
        split = len(args) - len(names)
        frame.push(self.call_with_pair(frame, args[:split], dict(zip(names, args[split:]))))

    def call_with_pair(self, frame: Frame, args: list, kwargs: dict):
        first, second = frame.pop(2)
        if first is NULL:
            fn = second
        elif second is NULL:
            fn = first
        else:
            fn, args = first, [second] + list(args)
        return self.call(frame, fn, list(args), kwargs)

    # --- control flow -------------------------------------------------------------------------------
    def op_JUMP(self, frame, ins):
        frame.pc = ins.target

    def op_POP_JUMP_IF_FALSE(self, frame, ins):
        return self.branch(frame, ins, frame.pop(), jump_when=False, keep=False)

    def op_POP_JUMP_IF_TRUE(self, frame, ins):
        return self.branch(frame, ins, frame.pop(), jump_when=True, keep=False)

    def op_JUMP_IF_FALSE_OR_POP(self, frame, ins):
        return self.branch(frame, ins, frame.stack[-1], jump_when=False, keep=True)

    def op_JUMP_IF_TRUE_OR_POP(self, frame, ins):
        return self.branch(frame, ins, frame.stack[-1], jump_when=True, keep=True)

    def op_POP_JUMP_IF_NONE(self, frame, ins):
        if frame.pop() is None:
            frame.pc = ins.target

    def op_POP_JUMP_IF_NOT_NONE(self, frame, ins):
        if frame.pop() is not None:
            frame.pc = ins.target

    def op_RETURN_VALUE(self, frame, ins):
        value = frame.pop()
        if frame.info.is_kernel and value is not None:
            raise CompileError("kernels cannot return a value (store results with tj.store)", ins.loc)
        return Returned(value)

    def op_LOAD_ASSERTION_ERROR(self, frame, ins):
        raise CompileError("assertion failed (assert in a kernel is checked at compile time)", ins.loc)

    def op_RAISE(self, frame, ins):
        raise CompileError("`raise` is not supported in kernels", ins.loc)
