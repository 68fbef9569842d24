"""A training step through Python (conformance.py's step and timing: chunk(6)
table views, device time after an L2 flush with the host queued ahead), at
4097 and 32768 rows, on torch's default stream and on a stream of its own,
with each way of timing it:
  --flush read|memset|both      the L2 flushed by reading a 256 MiB buffer
                                (the report's method, the default) or by writing it (its
                                method before 2026-12-05: the dirty lines'
                                write-back can fall in the timed call);
  --upstream random|ones|both   one random upstream gradient per input set
                                (the report's method, the default) or one `ones` tensor
                                for every set (before 2026-12-05);
  --streams default,own         which streams (programmatic dependent launch
                                is a launch attribute that the legacy
                                default stream may not honour).
Run once per KJIT_PART_SMALL setting (the partition build beside the
forward, or three launches); other ops than norm_modulate by name:
    KJIT_PART_SMALL=0 python3 bench/stream_probe.py [--flush both] [OP ...]
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance as cf  # noqa: E402
import torch  # noqa: E402

MODES = {"flush": ("read", "memset"), "upstream": ("random", "ones")}


def _modes(name, value):
    if value == "both":
        return MODES[name]
    if value not in MODES[name]:
        raise SystemExit(f"--{name}: '{value}' is not one of {', '.join(MODES[name] + ('both',))}")
    return (value,)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", default=["norm_modulate"])
    ap.add_argument("--flush", default="read")
    ap.add_argument("--upstream", default="random")
    ap.add_argument("--streams", default="default,own")
    ap.add_argument("--rows", default="4097,32768")
    args = ap.parse_args()
    flushes, ups = _modes("flush", args.flush), _modes("upstream", args.upstream)
    streams = args.streams.split(",")
    if not streams or set(streams) - {"default", "own"}:
        raise SystemExit(f"--streams: '{args.streams}' is not a list of default, own")
    rows = [int(r) for r in args.rows.split(",")]
    specs = cf._op_specs()
    for op in args.ops:
        if op not in specs:
            raise SystemExit(f"unknown op '{op}'; choose from {sorted(specs)}")
    if not torch.cuda.is_available():
        raise SystemExit("stream_probe.py needs a CUDA device")
    for op in args.ops:
        probe(op, specs[op], rows, streams, flushes, ups)


def probe(op, spec, rows, streams, flushes, ups):
    fn = spec["ops"](cf.kjit)
    grads = spec["grads"]
    side = {"default": torch.cuda.default_stream(), "own": torch.cuda.Stream()}
    print(f"# {op}: KJIT_PART_SMALL={os.environ.get('KJIT_PART_SMALL', '1')}; "
          "us of device time, median of 100")
    print(f"{'rows':>6} {'stream':>8} {'flush':>7} {'upstream':>8} {'fwd':>8} {'fwd+bwd':>8}")
    for n in rows:
        sets = [spec["make"](12 + k, n) for k in range(3 if n > 8192 else 8)]
        gen = torch.Generator(device=cf.DEV).manual_seed(13)
        up_sets = {}
        for u in ups:
            # The fused op returns (h, out): both get an upstream gradient.
            outs = [cf._flat(fn(**s)) for s in sets]
            if u == "ones":
                one = [torch.ones_like(o) for o in outs[0]]
                up_sets[u] = [one for _ in sets]
            else:
                up_sets[u] = [[torch.randn(o.shape, device=cf.DEV, generator=gen).to(o.dtype) for o in oo]
                              for oo in outs]
            del outs

        def step(pair):
            a, up = pair
            lv = {k: a[k].detach().requires_grad_() if k in grads else a[k] for k in a}
            torch.autograd.backward(cf._flat(fn(**lv)), up)

        for name in streams:
            for fl in flushes:
                for u in ups:
                    torch.cuda.synchronize()
                    with torch.cuda.stream(side[name]):
                        f, _ = cf._time_us(lambda a: fn(**a), sets, 100, flush=fl)
                        fb, _ = cf._time_us(step, list(zip(sets, up_sets[u])), 100, flush=fl)
                    torch.cuda.synchronize()
                    print(f"{n:>6} {name:>8} {fl:>7} {u:>8} {f:>8.1f} {fb:>8.1f}", flush=True)
        del sets, up_sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
