"""What a GPU can hold: the limits every backend that compiles to SIMT IR checks, so a kernel
the cuda backend would refuse is refused on the CPU backends too, with the same error at the
user's line."""
from __future__ import annotations

from tilejit.errors import CompileError
from tilejit.passes.shared_memory import MAX_SHARED_BYTES
from tilejit.passes.warps import MAX_VALUES_PER_THREAD


def check_resources(fn, target: str) -> None:
    """Refuse a SIMT program the GPU cannot hold, naming the op and the user's line."""
    from tilejit.simt import RegType
    for o in fn.walk():
        for r in o.results:
            if isinstance(r.type, RegType) and r.type.n > MAX_VALUES_PER_THREAD:
                raise CompileError(f"tile too large for the registers: it needs {r.type.n} values in each of the "
                                   f"{32 * fn.meta.num_warps} threads (at most {MAX_VALUES_PER_THREAD}); "
                                   "use smaller tiles or more warps (num_warps=...)", o.loc)
    if fn.meta.shared_bytes > MAX_SHARED_BYTES[target]:
        from tilejit.passes.shared_memory import accessed_buffers
        buffers = fn.meta.shared_buffers
        largest = max(buffers, key=lambda b: buffers[b][1], default=None)
        user = next((o for o in fn.walk() if largest in accessed_buffers(o)), None)
        where = f" (the largest buffer, {buffers[largest][1]} bytes, is for this line)" if user else ""
        raise CompileError(f"the kernel needs {fn.meta.shared_bytes} bytes of shared memory; "
                           f"{target} offers at most {MAX_SHARED_BYTES[target]} per CTA{where}; use smaller "
                           "tiles or fewer pipeline stages", user.loc if user else fn.meta.loc)
