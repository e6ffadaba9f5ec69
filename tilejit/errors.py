"""User-facing errors: each names the kernel, points at the user's source line with a caret, and
is raised with a traceback that ends at that line instead of inside the compiler."""
from __future__ import annotations

import linecache
import os
import types
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the compiler's own source folders: in a source checkout the root also holds users' tests/examples
_COMPILER_DIRS = tuple(os.path.join(_PACKAGE_DIR, d) + os.sep for d in ("tilejit", "passes", "runtime"))


@dataclass(frozen=True)
class Loc:
    """Where an op came from in the user's source (1-based line, 0-based columns)."""
    file: str
    line: int
    col: int = 0
    end_col: int | None = None
    func: str = "?"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


class TilejitError(Exception):
    """Base of tilejit's user-facing errors.
    Example: ``except tj.TilejitError: ...   # every tilejit error``."""

    def __init__(self, message: str, loc: Loc | None = None, kernel: str | None = None):
        self.message, self.loc, self.kernel = message, loc, kernel
        super().__init__(self._render())

    def _render(self) -> str:
        who = f"in kernel '{self.kernel}'" if self.kernel else ""
        if self.loc is None or not self.loc.line:
            return f"{who}: {self.message}" if who else self.message
        head = f"at {self.loc} {who}: {self.message}".replace("  ", " ")
        src = linecache.getline(self.loc.file, self.loc.line).rstrip("\n")
        if not src:
            return head
        stripped = src.lstrip()
        indent = len(src) - len(stripped)
        col = max(self.loc.col - indent, 0)
        width = max(1, (self.loc.end_col or self.loc.col + 1) - self.loc.col)
        width = min(width, max(1, len(stripped) - col))
        return f"{head}\n    {stripped}\n    {' ' * col}{'^' * width}"

    def at(self, loc: Loc | None, kernel: str | None = None) -> "TilejitError":
        """Fill in the location (and kernel) when the raiser did not know it: the op that was
        running when a helper failed."""
        if (self.loc is None or not self.loc.line) and loc is not None and loc.line:
            self.loc = loc
        if self.kernel is None and kernel:
            self.kernel = kernel
        self.args = (self._render(),)
        return self

    def with_kernel(self, kernel: str) -> "TilejitError":
        """Fill in the kernel name once it is known (errors raised deep inside helpers)."""
        if self.kernel is None:
            self.kernel = kernel
            self.args = (self._render(),)
        return self


class CompileError(TilejitError):
    """The kernel cannot be compiled: unsupported construct, shape or dtype mismatch, ...
    Example: ``except tj.CompileError as err: print(err)   # names the kernel and the source line``."""


class LaunchError(TilejitError):
    """A launch that cannot run: bad argument, bad grid, resource overflow, no device, ...
    Example: ``except tj.LaunchError as err: print(err)   # e.g. a wrong argument, before anything runs``."""


class DeviceError(TilejitError):
    """A CUDA driver call failed.
    Example: ``except tj.DeviceError as err: print(err)``."""


class DeviceAssertError(TilejitError):
    """A ``tj.device_assert`` failed while the kernel ran (kernels compiled with ``debug=True``
    or ``TILEJIT_DEBUG=1``): names the kernel, the assert's line and the failing program.
    Example: ``except tj.DeviceAssertError as err: print(err)   # kernel, line, program``."""


class PerformanceWarning(UserWarning):
    """The kernel runs, but slower than it could: its tiles spill registers to local memory, or
    a ``tj.dot`` of a tensor-core dtype (16-bit, float8, int8) runs on CUDA cores (a tile that is
    not a power of two, K not a multiple of the tensor-core step): the warning names its line
    and why (issued once per compiled specialisation).
    Example: ``warnings.simplefilter("error", tj.PerformanceWarning)``."""


def outside_kernel(what: str):
    """Raise the error for a ``tj`` in-kernel operation called from host code."""
    raise TilejitError(f"{what} can only be used inside a @tj.kernel or @tj.func")


def user_traceback(err: TilejitError) -> TilejitError:
    """Give ``err`` a traceback whose only frame is the user's source line (when known).

    Python never runs the kernel body, so no frame of it exists; we make one by executing a
    ``raise`` compiled with the user's file name and line number and named after the kernel."""
    loc = err.loc
    if loc is None or not loc.line:
        return err.with_traceback(None)
    # "raise" placed and padded so the statement spans the user's columns (Python draws its
    # carets under it); "0;" stands in for indentation, which a module cannot start with
    width = max(7, (loc.end_col or loc.col + 7) - loc.col)
    lead = "0;" + " " * (loc.col - 2) if loc.col >= 2 else ""
    statement = lead + "raise" + " " * (width - 6) + "E"
    code = compile("\n" * (loc.line - 1) + statement, loc.file, "exec")
    code = code.replace(co_name=err.kernel or loc.func or "<kernel>")
    try:
        exec(code, {"E": err.with_traceback(None)})
    except TilejitError as e:
        tb = e.__traceback__
        # drop the exec frame of this function; keep the synthetic user frame
        return e.with_traceback(tb.tb_next if tb is not None and tb.tb_next is not None else tb)
    return err


def for_user(err: TilejitError) -> TilejitError:
    """``err`` with a traceback of the user's frames only, ending at the kernel line: the API
    entry point raises it (``raise for_user(err) from None``), which adds just its own frame."""
    err = user_traceback(err)
    return err.with_traceback(_strip_package_frames(err.__traceback__))


def _strip_package_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    frames = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_COMPILER_DIRS):
            frames.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(frames):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out
