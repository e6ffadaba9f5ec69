"""Progress of an autotuning run on an interactive stderr: one status line rewritten in place
(which config, how many left, best so far), then a summary with each dropped config's reason.
Silent when stderr is not a terminal or when ``CI`` is set."""
from __future__ import annotations

import os
import sys


def interactive(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("CI")


class Progress:
    """Progress lines for tuning ``total`` configs of one kernel."""

    def __init__(self, kernel_name: str, total: int, stream=None):
        self.stream = stream or sys.stderr
        self.name, self.total, self.done = kernel_name, total, 0
        self.on = interactive(self.stream)

    def _write(self, text: str, end: str = "") -> None:
        self.stream.write(f"\r\x1b[K{text}{end}")          # carriage return, clear the line
        self.stream.flush()

    def show(self, config, best) -> None:
        """About to time ``config``; ``best`` is (config, ms) so far or None."""
        self.done += 1
        if not self.on:
            return
        left = self.total - self.done
        so_far = f"; best {best[1]:.4f} ms ({best[0].label()})" if best else ""
        self._write(f"tilejit autotune {self.name}: config {self.done}/{self.total} "
                    f"({left} left) {config.label()}{so_far}")

    def finish(self, best, timings: dict) -> None:
        """Tuning is over: the winner, then one line per dropped config."""
        if not self.on:
            return
        timed = sum(isinstance(t, float) for t in timings.values())
        if best is None:
            self._write(f"tilejit autotune {self.name}: no config can run", "\n")
        else:
            self._write(f"tilejit autotune {self.name}: {best.label()} at {timings[best]:.4f} ms "
                        f"({timed} timed, {len(timings) - timed} dropped)", "\n")
        for config, why in timings.items():
            if not isinstance(why, float):
                self.stream.write(f"  dropped {config.label()}: {why}\n")
        self.stream.flush()
