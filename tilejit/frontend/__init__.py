"""Bytecode frontend: a plain Python kernel function -> typed SSA tile IR (``ir.Function``).

``compile_tile_ir`` binds the runtime parameters to block arguments described by their specs,
folds the ``tj.constexpr`` parameters to their values, traces the bytecode symbolically
(``tracer.py``) and verifies the result.  ``func`` is the ``@tj.func`` decorator.
"""
from __future__ import annotations

import inspect

import numpy as np

from tilejit import language
from tilejit.errors import CompileError
from tilejit.frontend.cfg import CodeInfo
from tilejit.frontend.tracer import Tracer
from tilejit.frontend.values import TjFunc, func
from tilejit.ir import ArrayType, Block, Function, Loc, TileOp, TileType, Value
from tilejit.frontend.semantics import ArrayHandle
from tilejit.specs import ArraySpec, NoneSpec, ScalarSpec

__all__ = ["compile_tile_ir", "func", "TjFunc", "constexpr_params"]


def _is_constexpr(annotation) -> bool:
    if annotation is language.constexpr:
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr"


def constexpr_params(pyfn) -> list[str]:
    """Names of the parameters annotated ``tj.constexpr``, in signature order."""
    return [p.name for p in inspect.signature(pyfn).parameters.values() if _is_constexpr(p.annotation)]


def _def_loc(pyfn) -> Loc:
    code = pyfn.__code__
    return Loc(code.co_filename, code.co_firstlineno, 0, None, code.co_name)


def _bind_params(pyfn, specs, constexprs, block: Block) -> tuple[dict, list[str], dict]:
    """Locals at kernel entry, runtime parameter names and the resolved constexpr values."""
    loc = _def_loc(pyfn)
    params = list(inspect.signature(pyfn).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise CompileError("kernels cannot take *args or **kwargs", loc)
    runtime = [p for p in params if not _is_constexpr(p.annotation)]
    if len(runtime) != len(specs):
        raise CompileError(f"the kernel has {len(runtime)} runtime parameters but {len(specs)} "
                           "argument specs were given", loc)
    locals_, resolved = {}, {}
    for p in params:
        if not _is_constexpr(p.annotation):
            continue
        if p.name in constexprs:
            resolved[p.name] = constexprs[p.name]
        elif p.default is not p.empty:
            resolved[p.name] = p.default
        else:
            raise CompileError(f"missing value for the constexpr parameter '{p.name}'", loc)
        value = resolved[p.name]
        locals_[p.name] = resolved[p.name] = value.item() if isinstance(value, np.generic) else value
    unknown = set(constexprs) - set(resolved)
    if unknown:
        raise CompileError(f"unknown constexpr argument(s): {', '.join(sorted(unknown))}", loc)
    for p, spec in zip(runtime, specs):
        if isinstance(spec, NoneSpec):
            locals_[p.name] = None                  # folded: `if x is not None:` is compile-time
            continue
        if isinstance(spec, ArraySpec):
            arg = Value(ArrayType(spec.dtype, spec.rank), p.name)
            locals_[p.name] = ArrayHandle(arg, p.name, spec.large)
        elif isinstance(spec, ScalarSpec):
            arg = Value(TileType((), spec.dtype), p.name)
            locals_[p.name] = arg
        else:
            raise CompileError(f"bad spec for parameter '{p.name}': {spec!r}", loc)
        block.args.append(arg)
    return locals_, [p.name for p, spec in zip(runtime, specs) if not isinstance(spec, NoneSpec)], resolved


def _check_grid_dependencies(body: Block, name: str) -> None:
    """``tj.wait_prior_kernels()`` and ``tj.launch_dependents()`` run once in every thread, so they
    stand in the kernel's top level (a ``tj.func`` called there counts), not in a loop or a branch."""
    for o in body.ops:
        for region in o.regions:
            for inner in region.walk():
                if inner.op is TileOp.GRID_DEPENDENCY:
                    call = "wait_prior_kernels" if inner.attrs.action == "wait" else "launch_dependents"
                    raise CompileError(f"tj.{call}() must stand in the kernel's top level, outside loops, "
                                       f"if/else and while: every thread runs it once", inner.loc).with_kernel(name)


def compile_tile_ir(pyfn, specs, constexprs: dict | None = None, name: str | None = None) -> Function:
    """Trace ``pyfn`` for the given runtime argument specs and constexpr values into tile IR."""
    from tilejit.verifier import verify
    pyfn = getattr(pyfn, "fn", pyfn)
    name = name or pyfn.__name__
    constexprs = dict(constexprs or {})
    try:
        body = Block()
        locals_, arg_names, resolved = _bind_params(pyfn, list(specs), constexprs, body)
        tracer = Tracer(body, name)
        tracer.run(CodeInfo(pyfn, is_kernel=True), locals_, body)
    except CompileError as e:
        raise e.with_kernel(name) from None
    kept = [s for s in specs if not isinstance(s, NoneSpec)]      # one per block argument
    fn = Function(name, body, arg_names, {"specs": kept, "constexprs": resolved,
                                          "deps": dict(tracer.deps), "loc": _def_loc(pyfn)})
    _check_grid_dependencies(body, name)
    verify(fn)
    return fn
