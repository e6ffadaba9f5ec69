"""Rewrite ``examples/w4a16_gemm.py`` in place (on a GPU host, for an A/B; ``git checkout`` undoes
it): below 64 rows a block, the zero point leaves the K loop's per-weight work --

    acc += (dot(x, q) - rowsum(x) * z) * s        instead of        acc += dot(x, q - z) * s

(``q`` exact in bfloat16, ``rowsum`` in float32 per K tile): one bf16x2 subtraction a pair of
weights less, a row sum and a multiply-add a column more per K tile.  Usage:
``python3 scripts/probes/w4_zero_fold.py [path]``; ``scripts/gpu_s19b.sh`` runs it for
``SIDES=zfold``."""
import pathlib
import sys

OLD = "            acc += tj.dot(x, q.to(x.dtype) - z) * s.to(tj.float32)\n"
NEW = ("            rows = tj.sum(x.to(tj.float32), axis=1)\n"
       "            acc += (tj.dot(x, q.to(x.dtype)) - rows[:, None] * z.to(tj.float32)) * s.to(tj.float32)\n")


def main(path: str = "examples/w4a16_gemm.py") -> None:
    p = pathlib.Path(path)
    text = p.read_text()
    if OLD not in text:
        raise SystemExit(f"w4_zero_fold: {path} does not have the line to rewrite")
    p.write_text(text.replace(OLD, NEW))


if __name__ == "__main__":
    main(*sys.argv[1:])
