"""PTX of the benchmarked kernels, one file per configuration, for checking that a compiler
change keeps the instructions (no GPU needed):

    python3 scripts/ptx_snapshot.py DIR            # write DIR/<kernel>-<config>-<target>.ptx
    diff -r BEFORE AFTER                           # what changed

Line info (``.loc``, ``.file``, the debug sections) is stripped, so only instructions and
declarations are compared."""
from __future__ import annotations

import os
import re
import sys

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from examples.attention import attention_kernel  # noqa: E402
from examples.layernorm import layernorm_kernel  # noqa: E402
from examples.matmul import matmul_kernel  # noqa: E402
from examples.softmax import softmax_kernel  # noqa: E402
from tilejit.backends.cuda import build  # noqa: E402
from tilejit.errors import CompileError  # noqa: E402
from tilejit.passes.warps import choose_num_warps  # noqa: E402

BF16 = ml_dtypes.bfloat16


def _a(shape, dtype=BF16):
    return np.zeros(shape, dtype)


def cases():
    """(name, kernel, args, constexprs, num_warps or None for the compiler's choice) of the
    benchmarks' configurations."""
    for dt, tag in ((np.float32, "f32"), (BF16, "bf16")):
        x = _a((4096, 4096), dt)
        for w in (4, 8):
            yield f"softmax-{tag}-w{w}", softmax_kernel, (x, x), {"BLOCK": 4096}, w
        yield f"layernorm-{tag}", layernorm_kernel, (x, _a(4096, dt), _a(4096, dt), x, 1e-5), {"BLOCK": 4096}, 8
        for cols in (16384, 32768):       # rows chunk_rows splits (several loads; past the registers),
            r, w = _a((2, cols), dt), _a(cols, dt)          # at the compiler's warps (None)
            yield f"softmax-{tag}-{cols}", softmax_kernel, (r, r), {"BLOCK": cols}, None
            yield f"layernorm-{tag}-{cols}", layernorm_kernel, (r, w, w, r, 1e-5), {"BLOCK": cols}, None
    a = _a((4096, 4096))
    for bm, bn, bk, st, w in ((128, 256, 64, 4, 8), (128, 128, 64, 4, 8), (64, 256, 64, 4, 4),
                              (128, 128, 32, 3, 4), (64, 64, 32, 3, 4)):
        yield (f"matmul-{bm}x{bn}x{bk}s{st}w{w}", matmul_kernel, (a, a, _a((4096, 4096), np.float32)),
               {"BM": bm, "BN": bn, "BK": bk, "STAGES": st}, w)
    q = _a((4, 32, 4096, 128))
    for bm, bn, w in ((128, 128, 8), (64, 128, 4), (64, 32, 4)):
        for causal in (False, True):
            yield (f"attention-{bm}x{bn}w{w}{'-causal' if causal else ''}", attention_kernel,
                   (q, q, q, q, 0.088), {"BM": bm, "BN": bn, "BD": 128, "CAUSAL": causal}, w)


def strip_line_info(ptx: str) -> str:
    """``ptx`` without ``.loc``/``.file`` directives, debug sections and the labels they use."""
    out, in_section = [], False
    for line in ptx.splitlines(keepends=True):
        text = line.strip()
        if in_section:
            in_section = text != "}"
        elif text.startswith(".section") and ".debug" in text:
            in_section = "{" in text and "}" not in text
        elif not (re.match(r"\.(loc|file)\b", text) or re.match(r"\$L__(tmp|func_begin|func_end)\d+:$", text)):
            out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    os.makedirs(argv[0], exist_ok=True)
    for name, kernel, args, consts, warps in cases():
        kernel = getattr(kernel, "kernel", kernel)          # the kernel under @tj.autotune
        specs, consts, _ = kernel.specialise(kernel.bind(args, consts))
        tile_fn = kernel.tile_ir(specs, consts)
        warps = warps or choose_num_warps(tile_fn)
        for target in ("sm_90a", "sm_80"):
            try:
                text = strip_line_info(build(tile_fn, warps, target, stop_after="ptx")["ptx"])
            except CompileError as err:                 # e.g. more shared memory than sm_80 has
                text = f"CompileError: {err}\n"
            with open(os.path.join(argv[0], f"{name}-{target}.ptx"), "w") as f:
                f.write(text)
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
