"""Summarize an `ncu --page source --print-source sass --csv` export (tests/engine/cuda/sass_prof.sh): stall samples
by reason, by opcode, and the hottest instructions with their top reasons. Not a test: a reading aid for PERF.md.

    python3 tests/engine/cuda/sass_summary.py FILE.csv [--top 30]
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter


def load(path: str) -> tuple[str, list[dict[str, str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    kernel = rows[0][1] if rows and rows[0] and rows[0][0] == "Kernel Name" else "?"
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names = rows[head]
    return kernel, [dict(zip(names, r, strict=False)) for r in rows[head + 1 :] if len(r) == len(names)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    kernel, lines = load(args.csv)
    reasons = [k for k in lines[0] if k.startswith("stall_") and "Not Issued" not in k]
    num = lambda v: float(v) if v not in ("", "-") else 0.0  # noqa: E731
    total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in lines)
    executed = sum(num(r["Instructions Executed"]) for r in lines)
    by_reason = Counter({k: sum(num(r[k]) for r in lines) for k in reasons})
    print(f"{kernel}: {total:.0f} samples, {executed:.0f} warp instructions executed")
    print("by reason: " + ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in by_reason.most_common(10)))
    by_op: Counter[str] = Counter()
    ops_exec: Counter[str] = Counter()
    for r in lines:
        op = r["Source"].split()[0] if r["Source"].split() else "?"
        if op.startswith("@"):
            op = r["Source"].split()[1]
        op = op.split(".")[0]
        by_op[op] += num(r["Warp Stall Sampling (All Samples)"])
        ops_exec[op] += num(r["Instructions Executed"])
    print("by opcode (samples %, executed %):")
    for op, v in by_op.most_common(16):
        print(f"  {op:10s} {100 * v / total:5.1f}%  {100 * ops_exec[op] / executed:5.1f}%")
    print(f"hottest {args.top} instructions:")
    hot = sorted(lines, key=lambda r: -num(r["Warp Stall Sampling (All Samples)"]))[: args.top]
    for r in hot:
        s = num(r["Warp Stall Sampling (All Samples)"])
        top = sorted(reasons, key=lambda k: -num(r[k]))[:2]
        why = ", ".join(f"{k[6:]} {100 * num(r[k]) / s:.0f}%" for k in top if num(r[k]))
        print(f"  {r['Address'][-5:]} {100 * s / total:4.1f}%  {r['Source'].strip()[:60]:60s} {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
