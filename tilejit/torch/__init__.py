"""tilejit inside PyTorch programs: functions that launch tilejit kernels as PyTorch custom ops.

    import torch
    import tilejit as tj
    import tilejit.torch

    @tilejit.torch.op("mylib::scale_rows")
    def scale_rows(x: torch.Tensor, s: float) -> torch.Tensor:
        y = torch.empty_like(x)
        scale_rows_kernel[(x.shape[0],)](x, y, s, BLOCK=tj.next_power_of_2(x.shape[1]))
        return y

    torch.compile(model, fullgraph=True)     # scale_rows is one node of the graph: no graph break

``op`` registers the function with ``torch.library.custom_op`` (same arguments: the name is
"namespace::name", the parameters need type annotations, ``mutates_args`` names the tensors the
kernels write in place).  ``torch.compile`` then traces through it without breaking the graph,
also with dynamic shapes, and the op is available as ``torch.ops.<namespace>.<name>`` too.

The shapes and dtypes of the outputs (the "fake" implementation ``torch.compile`` needs) come
from the function itself: ``op`` runs it on PyTorch's fake tensors with every tilejit launch
skipped (``tilejit.kernel.launches_skipped``), so the outputs it allocates
(``torch.empty_like``, ``torch.empty(...)``) are its declared outputs.  The function must
therefore allocate its outputs from shapes, not from data; otherwise pass ``fake=`` (or call
``register_fake`` on the result), as for any custom op.

Gradients: ``op(...).register_autograd(backward, setup_context=...)``, PyTorch's own API on the
returned op (the backward may launch tilejit kernels through another ``op``).
"""
from __future__ import annotations

import functools
import inspect
import re

import torch

from tilejit.errors import LaunchError
from tilejit.kernel import launches_skipped

__all__ = ["op", "launches_skipped"]


def op(name: str, fn=None, *, mutates_args=(), device_types=None, schema: str | None = None, fake=None):
    """Register ``fn`` (a function that launches tilejit kernels on torch tensors) as the
    PyTorch custom op ``name`` ("namespace::name") and return it (a
    ``torch.library.CustomOpDef``: call it like ``fn``).  Usable as ``@op(name)`` or
    ``op(name, fn)``.  ``fake``: the fake implementation, if running ``fn`` with launches skipped
    cannot give the outputs' shapes."""
    def register(fn):
        if not re.fullmatch(r"[A-Za-z_]\w*::[A-Za-z_]\w*", name):
            raise LaunchError(f"tilejit.torch.op({name!r}): the name must be 'namespace::name' "
                              "(identifiers, as torch.library.custom_op wants)")
        if not callable(fn):
            raise TypeError(f"tilejit.torch.op({name!r}) needs a function, got {type(fn).__name__}")
        unannotated = [p.name for p in inspect.signature(fn).parameters.values() if p.annotation is p.empty]
        if schema is None and (unannotated or inspect.signature(fn).return_annotation is inspect.Signature.empty):
            what = f"parameters {', '.join(unannotated)}" if unannotated else "the return value"
            raise LaunchError(f"tilejit.torch.op({name!r}): {fn.__qualname__} needs type annotations on "
                              f"{what} (torch.Tensor, int, float, bool, ... and the returned type), as "
                              f"torch.library.custom_op does; or pass schema=")
        try:
            opdef = torch.library.custom_op(name, mutates_args=mutates_args, device_types=device_types,
                                            schema=schema)(fn)
        except (RuntimeError, ValueError, TypeError) as err:
            raise LaunchError(f"tilejit.torch.op({name!r}): PyTorch refused {fn.__qualname__}: {err}") from None
        opdef.register_fake(fake if fake is not None else _skipping_launches(fn))
        return opdef
    return register if fn is None else register(fn)


def _skipping_launches(fn):
    @functools.wraps(fn)
    def fake(*args, **kwargs):
        with launches_skipped():
            return fn(*args, **kwargs)
    return fake
