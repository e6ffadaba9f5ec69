"""Summarise ncu's per-SASS-line counters (``ncu -i REP --page source --csv --print-source sass``):
the executed warp instructions by opcode (a kernel's dynamic instruction mix), then the hottest
lines with their stall samples.  Usage: python3 scripts/sass_hot.py FILE.csv [TOP]"""
import collections
import csv
import sys


def column(header, *words, avoid=()):
    for i, name in enumerate(header):
        if all(w in name for w in words) and not any(a in name for a in avoid):
            return i
    return None


def main(path, top=40):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    start = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
    header, body = rows[start], rows[start + 1:]
    src = column(header, "Source")
    ex = column(header, "Instructions Executed", avoid=("Thread", "Predicated"))
    stall = column(header, "Warp Stall Sampling (All")
    addr = column(header, "Address")

    def num(r, i):
        try:
            return float(r[i].replace(",", "")) if i is not None and i < len(r) else 0.0
        except ValueError:
            return 0.0
    total = sum(num(r, ex) for r in body)
    ops = collections.Counter()
    for r in body:
        words = r[src].split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if words:
            ops[words[0].split(".")[0]] += num(r, ex)
    print(f"executed warp instructions: {total:,.0f}")
    print("by opcode:", ", ".join(f"{op} {n / total:.1%}" for op, n in ops.most_common(24)))
    print(f"hottest {top} lines (address, executed, stall samples, instruction):")
    for r in sorted(body, key=lambda r: -num(r, ex))[:top]:
        print(f"  {r[addr] if addr is not None else '':>8} {num(r, ex):>12,.0f} {num(r, stall):>8,.0f}  {r[src].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], *(int(a) for a in sys.argv[2:3])))
