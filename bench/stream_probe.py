"""The norm_modulate training step through Python (conformance.py's step and
timing: chunk(6) table views, ones as the upstream gradient, device time
after an L2 flush with the host queued ahead), on torch's default stream and
on a stream of its own, at 4097 and 32768 rows. Programmatic dependent launch
is a launch attribute that the legacy default stream may not honour; the two
columns show what that costs a caller on each. Run once per KJIT_PART_SMALL
setting (the partition build beside the forward, or three launches); other
ops than norm_modulate by name:
    KJIT_PART_SMALL=0 python3 bench/stream_probe.py [OP ...]
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance as cf  # noqa: E402
import torch  # noqa: E402


def main():
    for op in sys.argv[1:] or ["norm_modulate"]:
        probe(op)


def probe(op):
    spec = cf._op_specs()[op]
    fn = spec["ops"](cf.kjit)
    grads = spec["grads"]
    side = torch.cuda.Stream()
    print(f"# {op}: KJIT_PART_SMALL={os.environ.get('KJIT_PART_SMALL', '1')}; "
          "us of device time, median of 100")
    print(f"{'rows':>6} {'stream':>8} {'fwd':>8} {'fwd+bwd':>8}")
    for n in (4097, 32768):
        sets = [spec["make"](12 + k, n) for k in range(3 if n > 8192 else 8)]
        outs = fn(**sets[0])  # the fused op returns (h, out): both get an upstream gradient
        ones = [torch.ones_like(o) for o in (outs if isinstance(outs, tuple) else (outs,))]

        def step(a):
            lv = {k: a[k].detach().requires_grad_() if k in grads else a[k] for k in a}
            outs = fn(**lv)
            torch.autograd.backward(list(outs) if isinstance(outs, tuple) else [outs], ones)

        for name, s in (("default", torch.cuda.default_stream()), ("own", side)):
            torch.cuda.synchronize()
            with torch.cuda.stream(s):
                f, _ = cf._time_us(lambda a: fn(**a), sets, 100)
                fb, _ = cf._time_us(step, sets, 100)
            torch.cuda.synchronize()
            print(f"{n:>6} {name:>8} {f:>8.1f} {fb:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
