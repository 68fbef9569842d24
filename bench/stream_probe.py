"""A training step through Python, timed as bench/conformance.py times kjit's
(the same input sets, upstream gradients, chunk(6) table views, device time
after an L2 flush with the host queued ahead), at 4097 and 32768 rows, with
each way of timing it:
  --flush read|memset|both      the L2 flushed by reading a 256 MiB buffer
                                (the report's method, the default) or by
                                writing it (its method before 2026-12-05: the
                                dirty lines' write-back can fall in the timed
                                call);
  --upstream random|ones|both   one random upstream gradient per input set
                                (the report's method, the default) or one
                                `ones` tensor for every set (before
                                2026-12-05);
  --streams default,own         torch's default stream and/or a stream of its
                                own (programmatic dependent launch is a launch
                                attribute that the legacy default stream may
                                not honour);
  --rows 4097,32768             the row counts.
One line per (rows, stream, flush, upstream): the forward alone (timed once
per stream and flush; the upstream gradient does not enter it) and forward +
backward, µs of device time, median of 100. The ops with a backward
(norm_modulate by default):
    KJIT_PART_SMALL=0 python3 bench/stream_probe.py [--flush both] [OP ...]
KJIT_TEMPLATE_DIR (with a KJIT_CACHE_DIR of its own) times another copy of
the templates, e.g. a KJIT_L2_HINT variant (`run_device.sh stepprobe` with
KJIT_STEPPROBE_L2).
"""
import argparse
import os
import sys
from pathlib import Path

MODES = {"flush": ("read", "memset"), "upstream": ("random", "ones"), "streams": ("default", "own")}


def _choice(name, value):
    """'both' or one mode for flush / upstream; a comma list for streams."""
    if name != "streams" and value == "both":
        return MODES[name]
    picked = value.split(",") if name == "streams" else [value]
    bad = [v for v in picked if v not in MODES[name]]
    if bad or not picked:
        allowed = ", ".join(MODES[name] + (() if name == "streams" else ("both",)))
        raise SystemExit(f"stream_probe.py: --{name} '{value}': choose from {allowed}")
    return tuple(dict.fromkeys(picked))


def _rows(value):
    try:
        rows = tuple(dict.fromkeys(int(r) for r in value.split(",")))
    except ValueError:
        rows = ()
    if not rows or min(rows) < 1:
        raise SystemExit(f"stream_probe.py: --rows '{value}': a comma list of positive row counts")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", default=["norm_modulate"])
    ap.add_argument("--flush", default="read")
    ap.add_argument("--upstream", default="random")
    ap.add_argument("--streams", default="default,own")
    ap.add_argument("--rows", default="4097,32768")
    args = ap.parse_args()
    flushes, ups = _choice("flush", args.flush), _choice("upstream", args.upstream)
    streams, rows = _choice("streams", args.streams), _rows(args.rows)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import conformance as cf  # torch and kjit: after the arguments are checked
    specs = cf._op_specs()
    for op in args.ops:
        if op not in specs:
            raise SystemExit(f"stream_probe.py: unknown op '{op}'; choose from {sorted(specs)}")
        if not specs[op]["grads"]:
            raise SystemExit(f"stream_probe.py: {op} has no backward: nothing to probe "
                             "(conformance.py times its forward)")
    if not cf.torch.cuda.is_available():
        raise SystemExit("stream_probe.py needs a CUDA device")
    for op in args.ops:
        probe(cf, op, specs[op], rows, streams, flushes, ups)


def probe(cf, op, spec, rows, streams, flushes, ups):
    torch = cf.torch
    fn = spec["ops"](cf.kjit)
    step = cf.training_step(fn, spec["grads"])
    side = {"default": torch.cuda.default_stream(), "own": torch.cuda.Stream()}
    print(f"# {op}: KJIT_PART_SMALL={os.environ.get('KJIT_PART_SMALL', '1')}, "
          f"KJIT_TEMPLATE_DIR={os.environ.get('KJIT_TEMPLATE_DIR', '(unset)')}; "
          "us of device time, median of 100", flush=True)
    print(f"{'rows':>6} {'stream':>8} {'flush':>7} {'upstream':>8} {'fwd':>8} {'fwd+bwd':>8}", flush=True)
    for n in rows:
        sets = cf.timing_sets(spec["make"], n)
        up_sets = {u: cf.upstream_grads(fn, sets, n, ones=(u == "ones")) for u in ups}
        for name in streams:
            for fl in flushes:
                torch.cuda.synchronize()
                with torch.cuda.stream(side[name]):
                    f, _ = cf._time_us(lambda a: fn(**a), sets, 100, flush=fl)
                    for u in ups:
                        fb, _ = cf._time_us(step, list(zip(sets, up_sets[u])), 100, flush=fl)
                        print(f"{n:>6} {name:>8} {fl:>7} {u:>8} {f:>8.1f} {fb:>8.1f}", flush=True)
                torch.cuda.synchronize()
        del sets, up_sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
