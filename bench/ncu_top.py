#!/usr/bin/env python3
"""Summarise ncu's source page (`ncu -i REP --page source --csv`): the
instructions holding the most warp-stall samples, the samples per opcode,
and the per-reason columns' totals where the page has them.

Usage: ncu_top.py PAGE.csv [N]   (N: the instructions listed, default 45)
Exit 0 with the summary on stdout; 1 when the page cannot be read or is not
a source page with warp-stall samples; 2 on bad usage. Messages go to
stderr and name the page.
"""

import csv
import sys
from collections import Counter


def number(s):
    try:
        return float(s.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def fail(msg, rc=1):
    print(f"ncu_top: {msg}", file=sys.stderr)
    return rc


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not 2 <= len(sys.argv) <= 3:
        return fail("expected PAGE.csv [N]; --help for more", 2)
    page = sys.argv[1]
    top = sys.argv[2] if len(sys.argv) > 2 else "45"
    if not top.isdigit() or int(top) < 1:
        return fail(f"N must be a positive integer, got {top!r}", 2)
    top = int(top)
    try:
        with open(page, newline="") as f:
            lines = [ln for ln in f if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        return fail(f"cannot read {page}: {e}")
    head = next((i for i, ln in enumerate(lines) if "Source" in ln and "Sampl" in ln), None)
    if head is None:
        return fail(f"{page}: no source-page header (a line naming Source and the "
                    f"sampling columns) in its {len(lines)} lines")
    rows = list(csv.DictReader(lines[head:]))
    cols = [c for c in rows[0].keys() if c is not None] if rows else []  # None: a row's extra fields
    all_col = next((c for c in cols if "Sampling (All" in c), None)
    ni_col = next((c for c in cols if "Not-issued" in c or "Not Issued" in c), None)
    src_col = next((c for c in cols if c.strip() == "Source"), None)
    addr_col = next((c for c in cols if "Address" in c), None)
    exe_col = next((c for c in cols if c.strip().startswith("Instructions Executed")), None)
    if not rows:
        return fail(f"{page}: a source-page header but no instructions")
    if all_col is None or src_col is None:
        return fail(f"{page}: no 'Source' or 'Warp Stall Sampling (All Samples)' column in {cols}")
    tot = sum(number(r[all_col]) or 0 for r in rows)
    tot_ni = sum(number(r[ni_col]) or 0 for r in rows) if ni_col else 0
    print(f"{len(rows)} instructions, {tot:.0f} samples ({tot_ni:.0f} not issued)")
    if tot <= 0:
        return 0
    ops = Counter()
    for r in rows:
        op = (r[src_col] or "").split() or ["?"]
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
        addr, exe = (r[addr_col] if addr_col else i), (r[exe_col] if exe_col else "")
        print(f"{addr!s:>6} {100 * a / tot:6.2f} {100 * n / tot:6.2f} {exe!s:>9}  "
              f"{(r[src_col] or '').strip()[:90]}{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
