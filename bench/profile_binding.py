"""Where the Python binding spends host time: kjit.norm_modulate at hidden
5376, bf16, R = 9, N rows, called as conformance.py calls it.

Prints, for each eager path (KJIT_EAGER: the torch.library ops, and the
torch.autograd.Function calling the same implementations), for the forward
and the forward+backward step:
  host_us  wall time per call on the host, the GPU kept busy (no sync);
  gpu_us   CUDA-event time per call after a 256 MiB memset (conformance.py's
           method);
and the top CPU entries of torch.profiler for the fwd+bwd step, then the
device's kernels and memsets of the default path's step.
Usage: python3 bench/profile_binding.py [--rows 4097]
"""

import argparse
import time

import torch

import kjit
from kjit import ops as kjit_ops

DEV = "cuda"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4097)
    ap.add_argument("--top", type=int, default=18)
    args = ap.parse_args()
    n, h, r = args.rows, 5376, 9
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(n, h, device=DEV, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(h, device=DEV, generator=g)).bfloat16()
    table = (0.5 * torch.randn(r, 6 * h, device=DEV, generator=g)).bfloat16()
    idx = torch.randint(0, r, (n,), device=DEV, generator=g)
    ones = torch.ones(n, h, device=DEV, dtype=torch.bfloat16)

    def fwd():
        sh, sc = table.chunk(6, dim=1)[:2]
        return kjit.norm_modulate(x, w, sh, sc, idx, 1e-6)

    def step():
        xl = x.detach().requires_grad_()
        wl = w.detach().requires_grad_()
        tl = table.detach().requires_grad_()
        sh, sc = tl.chunk(6, dim=1)[:2]
        torch.autograd.backward([kjit.norm_modulate(xl, wl, sh, sc, idx, 1e-6)], [ones])

    flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
    cases = [(mode, name, fn) for mode in ("custom_op", "function")
             for name, fn in (("fwd", fwd), ("fwd+bwd", step))]
    for mode, name, fn in cases:
        kjit_ops._EAGER = mode
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        # Host time: the GPU has a long memset queued, so launches never wait.
        reps = 50
        flush.zero_(), flush.zero_(), flush.zero_()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        host = (time.perf_counter() - t0) / reps * 1e6
        torch.cuda.synchronize()
        samples = []
        for _ in range(30):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            samples.append((a, b))
        torch.cuda.synchronize()
        gpu = sorted(a.elapsed_time(b) * 1e3 for a, b in samples)[len(samples) // 2]
        print(f"norm_modulate {mode:9s} {name:8s} rows {n}: host_us {host:8.1f}  gpu_us {gpu:8.1f}")

    kjit_ops._EAGER = "custom_op"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))

    # What the default path (the Function) puts on the device per step: every
    # kernel and memset with its count and device time (20 steps).
    kjit_ops._EAGER = "function"
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(20):
            flush.zero_()
            step()
        torch.cuda.synchronize()
    print("device work of 20 fwd+bwd steps (function path), each after a 256 MiB memset:")
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
