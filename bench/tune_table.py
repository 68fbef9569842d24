#!/usr/bin/env python3
"""Default config against the tuner's pick, per (op, hidden, dtype).

Reads the JSON that `kjit tune --json` prints (alone, or inside a longer log
such as bench/run_device.sh's run.log) and prints one line per shape: the
default's and the tuned config's forward and backward time at the first row
count the tuner timed (32768 unless memory was short), and how much slower the
default is (negative where the tuner's pick, chosen on the sum over its row
counts, is slower at this one). Every result in the file is read.
Usage: python3 bench/tune_table.py LOG [--min-gap PCT]
"""
import argparse
import json
import sys


def load(path):
    """Every `kjit tune --json` result in the file, in order."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        sys.exit(f"tune_table: {path}: {e.strerror}")
    found, at = [], text.find('{"device":')
    while at >= 0:
        try:
            obj, end = json.JSONDecoder().raw_decode(text[at:])
        except ValueError as e:
            sys.exit(f"tune_table: {path}: the result at character {at} is cut off or damaged ({e.msg})")
        found.append(obj)
        at = text.find('{"device":', at + end)
    if not found:
        sys.exit(f"tune_table: {path}: no kjit tune --json result in it")
    return found


def cfg(c, keys):
    return " ".join(f"{k.replace('grid_per_sm', 'grid')} {c[k]}" for k in keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--min-gap", type=float, default=None,
                    help="print only shapes whose default is at least this many percent slower")
    a = ap.parse_args()
    results = [r for run in load(a.log) for r in run.get("results", [])]
    fk, bk = ("rpc", "pf", "grid_per_sm"), ("bwd_pf", "accs")
    print(f"{'op':29} {'hidden':>6} {'dtype':5} {'rows':>6}  {'fwd default':>26} {'tuned':>26} {'gap':>6}"
          f"  {'bwd default':>20} {'tuned':>20} {'gap':>6}")
    for r in results:
        # A result that was tuned but not saved (ok false) still has its times.
        if not r.get("fwd_us_rows"):
            print(f"{r['op']:29} {r['hidden']:>6} {r['dtype']:5} failed: {r.get('error', '?')}")
            continue
        fd, fb = r["default_fwd_us_rows"][0], r["fwd_us_rows"][0]
        bd, bb = r["default_bwd_us_rows"][0], r["bwd_us_rows"][0]
        gf, gb = 100 * (fd / fb - 1), 100 * (bd / bb - 1)
        if a.min_gap is not None and max(gf, gb) < a.min_gap:
            continue
        print(f"{r['op']:29} {r['hidden']:>6} {r['dtype']:5} {r['rows'][0]:>6}"
              f"  {cfg(r['default_fwd'], fk):>17} {fd:8.1f} {cfg(r['fwd'], fk):>17} {fb:8.1f} {gf:5.1f}%"
              f"  {cfg(r['default_bwd'], bk):>11} {bd:8.1f} {cfg(r['bwd'], bk):>11} {bb:8.1f} {gb:5.1f}%")


if __name__ == "__main__":
    main()
