"""Rewrite ``examples/w4a16_gemm.py`` in place (on a GPU host, for an A/B; ``git checkout`` undoes
it): the weights are dequantised as ``(q + 128) - (z + 128)`` (then scaled, at 64 rows a block), which
``codegen.nibbles.offset_pairs`` turns into the pair's magic bits minus ``z + 128`` -- no
subtraction of 2**7 a pair of weights (the same bits for integer zero points, as ``quantize``
gives); one bf16x2 addition a column a K tile more.  The PTX of the 16x64x128x4 split-K kernel
has 96 bf16x2 additions and subtractions against 128.  Usage:
``python3 scripts/probes/w4_bias.py [path]``; ``SIDES="new bias" scripts/gpu_s19b.sh`` runs it."""
import pathlib
import sys

REWRITES = [
    ("            acc += tj.dot(x, q.to(x.dtype) - z) * s.to(tj.float32)\n",              # below 64 rows
     "            acc += tj.dot(x, (q.to(x.dtype) + 128) - (z + 128)) * s.to(tj.float32)\n"),
    ("            acc = tj.dot(x, (q.to(x.dtype) - z) * s, acc)\n",                       # 64 rows or more
     "            acc = tj.dot(x, ((q.to(x.dtype) + 128) - (z + 128)) * s, acc)\n")]


def main(path: str = "examples/w4a16_gemm.py") -> None:
    p = pathlib.Path(path)
    text = p.read_text()
    for old, new in REWRITES:
        if old not in text:
            raise SystemExit(f"w4_bias: {path} does not have the line to rewrite: {old.strip()}")
        text = text.replace(old, new)
    p.write_text(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
