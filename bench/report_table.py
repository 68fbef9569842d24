#!/usr/bin/env python3
"""The README's side-by-side table, from the conformance reports.

    python3 bench/report_table.py [--reports DIR] [--prior-art DIR]

Reads bench/reports/<op>.json (bench/conformance.py's output) and, for the
ops they cover, the prior-art reports in bench/prior_art/ (their B200
figures, every candidate that has accuracy and latency rows), and prints one
Markdown table: batch invariance, repeatable parameter gradients, the
errors at the first size, fwd and fwd+bwd µs at each size, and the copy
floor's share of the time (fwd+bwd, or fwd where there is no backward) for
the candidates measured in the run. Needs no GPU and no torch.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ("timestep_sinusoid", "adaln_row_gather", "norm_modulate", "gated_residual",
       "gated_residual_norm_modulate")
NAMES = {"diffusers": "diffusers eager", "diffusers_compiled": "diffusers torch.compile",
         "torch_rms_norm": "torch F.rms_norm"}


def err(v):
    if v is None:
        return "–"
    if v == 0:
        return "0"
    m, e = f"{v:.1e}".split("e")
    return f"{m}e{int(e)}"


def us(v):
    return "–" if v is None else f"{v:.1f}"


def sizes_of(report):
    """The sizes a table shows: both, or the sinusoid's 64 and 2048 of six."""
    s = [k for k in report["copy_floor"] if k != "bandwidth_TBps"]
    return s if len(s) <= 2 else [s[3], s[-1]]


def summary(e, sizes, floor):
    """A candidate's table cells as values (bench/conformance.py prints the
    same): batch_invariant, params_repeatable, the forward's and the worst
    gradient's error at the first size, and per size (fwd_us, fwd_bwd_us,
    the copy floor's percentage of fwd_bwd, or of fwd without a backward;
    None without a floor)."""
    bi, al = e["batch_invariance"], e["accuracy_latency"]
    first = al.get(sizes[0], {})
    grads = first.get("grad_rel_err")
    per_size = []
    for s in sizes:
        a = al.get(s, {})
        t = a.get("fwd_bwd_us") or a.get("fwd_us")
        f = floor.get(s, {}) if floor else {}
        t_floor = f.get("fwd_bwd_us") or f.get("fwd_us")
        per_size.append((a.get("fwd_us"), a.get("fwd_bwd_us"), 100 * t_floor / t if t and t_floor else None))
    return (bi["batch_invariant"], bi["params_repeatable"], first.get("fwd_rel_err"),
            max(grads.values()) if grads else None, per_size)


def row(label, name, e, sizes, floor):
    inv, rep, fwd_err, grad_err, per_size = summary(e, sizes, floor)
    cells = [label, name, "yes" if inv else "NO", {True: "yes", False: "NO", None: "–"}[rep],
             err(fwd_err), err(grad_err)]
    for fwd, fwd_bwd, pct in per_size:
        cells += [us(fwd), us(fwd_bwd), "–" if pct is None else "<1" if pct < 1 else f"{pct:.0f}"]
    return "| " + " | ".join(cells) + " |"


def table(reports, prior_art):
    reps = {op: json.loads((reports / f"{op}.json").read_text()) for op in OPS
            if (reports / f"{op}.json").exists()}
    if not reps:
        return ""
    # The header names the row counts of the AdaLN ops; the sinusoid's
    # (batch sizes) are in its label.
    first = next((r for op, r in reps.items() if op != "timestep_sinusoid"), next(iter(reps.values())))
    head = ["op", "candidate", "inv", "rep", "fwd err", "grad err"]
    for s in sizes_of(first):
        head += [f"fwd {s}", f"fwd+bwd {s}", f"floor % {s}"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, rep in reps.items():
        sizes = sizes_of(rep)
        label = f"{op} (N {' / '.join(sizes)})" if op == "timestep_sinusoid" else op
        for name, e in rep["results"]["plain"].items():
            out.append(row(label, NAMES.get(name, name), e, sizes, rep["copy_floor"]))
            label = ""
        seeds = prior_art / f"{op}.json"
        if seeds.exists():
            for name, e in json.loads(seeds.read_text())["results"]["plain"].items():
                if "accuracy_latency" in e:
                    out.append(row("", f"B200 report: {name}", e, sizes, None))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=Path, default=ROOT / "bench" / "reports")
    ap.add_argument("--prior-art", type=Path, default=ROOT / "bench" / "prior_art")
    args = ap.parse_args()
    text = table(args.reports, args.prior_art)
    if not text:
        print(f"report_table.py: no report in {args.reports}", file=sys.stderr)
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
