"""A/B probe: run ``bench_sweep.py`` (its arguments follow) with every float32 division emitted as
``div.full.f32`` (no IEEE slow-path call) instead of ``div.rn.f32``, to measure what the call costs
in registers and bandwidth.  Use its own ``TILEJIT_CACHE_DIR``: the cache key does not know."""
import runpy
import sys

import tilejit.codegen.llvm as llvm

_init = llvm.KernelEmitter.__init__


def _init_without_calls(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.ctx.division_without_calls = True


llvm.KernelEmitter.__init__ = _init_without_calls
sys.argv = ["bench_sweep.py"] + sys.argv[1:]
sys.path.insert(0, __file__.rsplit("/", 1)[0])
runpy.run_path(__file__.replace("division_probe.py", "bench_sweep.py"), run_name="__main__")
