#!/usr/bin/env python3
"""Summarise ncu's source page (`ncu -i REP --page source --csv`): the
instructions holding the most warp-stall samples, the samples per opcode,
and the per-reason columns' totals where the page has them.

Usage: ncu_top.py PAGE.csv [N]
"""

import csv
import sys
from collections import Counter


def number(s):
    try:
        return float(s.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 45
    with open(sys.argv[1], newline="") as f:
        lines = [ln for ln in f if ln.strip()]
    head = next((i for i, ln in enumerate(lines) if "Source" in ln and "Sampl" in ln), None)
    if head is None:
        print(f"ncu_top: no source-page header in {sys.argv[1]} ({len(lines)} lines)")
        print("".join(lines[:10]))
        return 1
    rows = list(csv.DictReader(lines[head:]))
    cols = list(rows[0].keys()) if rows else []
    all_col = next((c for c in cols if "Sampling (All" in c), None)
    ni_col = next((c for c in cols if "Not-issued" in c or "Not Issued" in c), None)
    src_col = next((c for c in cols if c.strip() == "Source"), None)
    addr_col = next((c for c in cols if "Address" in c), None)
    exe_col = next((c for c in cols if c.strip().startswith("Instructions Executed")), None)
    if all_col is None or src_col is None:
        print(f"ncu_top: columns {cols}")
        return 1
    tot = sum(number(r[all_col]) or 0 for r in rows)
    tot_ni = sum(number(r[ni_col]) or 0 for r in rows) if ni_col else 0
    print(f"{len(rows)} instructions, {tot:.0f} samples ({tot_ni:.0f} not issued)")
    ops = Counter()
    for r in rows:
        op = (r[src_col].split() or ["?"])
        op = op[1] if op[0].startswith("@") and len(op) > 1 else op[0]
        ops[op.split(".")[0]] += number(r[all_col]) or 0
    print("samples by opcode: " + ", ".join(f"{k} {100 * v / tot:.1f}%" for k, v in ops.most_common(14)))
    reasons = [c for c in cols if c.lower().startswith("stall") or "smsp__pcsamp" in c]
    if reasons:
        rt = {c: sum(number(r[c]) or 0 for r in rows) for c in reasons}
        print("by reason: " + ", ".join(f"{c} {v:.0f}" for c, v in sorted(rt.items(), key=lambda kv: -kv[1])[:12]))
    best = sorted(range(len(rows)), key=lambda i: -(number(rows[i][all_col]) or 0))[:top]
    print(f"{'addr':>6} {'all%':>6} {'noti%':>6} {'exec':>9}  sass")
    for i in sorted(best):
        r = rows[i]
        a, n = number(r[all_col]) or 0, (number(r[ni_col]) or 0) if ni_col else 0
        why = ""
        if reasons:
            rs = sorted(((number(r[c]) or 0, c) for c in reasons), reverse=True)[:2]
            why = "  [" + ", ".join(f"{c} {v:.0f}" for v, c in rs if v) + "]"
        print(f"{r.get(addr_col, i)!s:>6} {100 * a / tot:6.2f} {100 * n / tot:6.2f} {r.get(exe_col, '')!s:>9}  "
              f"{r[src_col].strip()[:90]}{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
