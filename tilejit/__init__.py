"""tilejit: a JIT compiler for GPU tile kernels written as plain Python functions.

    import tilejit as tj

    @tj.kernel
    def add(x, y, out, BLOCK: tj.constexpr):
        i = tj.program_id(0) * BLOCK
        tj.store(out, (i,), tj.load(x, (i,), (BLOCK,)) + tj.load(y, (i,), (BLOCK,)))
"""
__version__ = "0.1.0"

from tilejit.dtypes import DType  # noqa: F401,E402
from tilejit.errors import CompileError, DeviceAssertError, DeviceError, LaunchError, PerformanceWarning, TilejitError  # noqa: F401
from tilejit.language import *  # noqa: F401,F403
from tilejit.language import constexpr, cdiv, next_power_of_2, inf, nan, pi  # noqa: F401
# each stage's public names are added below by the module that owns them
from tilejit.kernel import Kernel, kernel  # noqa: F401
from tilejit import testing  # noqa: F401,E402  (tj.testing; imports hypothesis only when used)
from tilejit.runtime.arrays import DeviceArray, empty, to_device  # noqa: F401,E402
from tilejit.frontend import func  # noqa: E402,F401
from tilejit.autotune import Config, autotune  # noqa: E402,F401
