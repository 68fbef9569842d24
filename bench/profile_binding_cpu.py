"""Host time of the Python binding with no GPU: the torch ops of
norm_modulate, gated_residual and gated_residual_norm_modulate on CPU
tensors, every libkjit launch replaced by a C function that returns 0.

What is timed is what the binding adds on the host per call: the argument
checks, the allocations of outputs, gradients and workspace, the argument
block, the ctypes call itself (into the stub, with the real prototypes),
and torch's dispatcher and autograd around it. Not timed: the driver's
launch cost inside libkjit, and CUDA's own costs (the caching allocator,
torch.cuda's current-stream query), stubbed or replaced by CPU ones; so
GPU host times are higher by about those.

How: the ops get kernels for the "cpu" device too, the device checks see
the CPU tensors as CUDA ones, the current-stream queries are stubbed, and
the context is a compile-only one. The default shape is small: on a GPU the
host time does not depend on it, on the CPU large allocations (page faults,
the copy of an upstream gradient into x.grad) would.

Prints, for each eager path (KJIT_EAGER) and op, the best of 5 means of
  fwd       a forward on inputs that need no gradient;
  fwd+bwd   a training step as profile_binding.py runs it: leaves, chunk(6)
            of the table, the forward and torch.autograd.backward;
  bwd       fwd+bwd less a forward on inputs that need gradients.
Usage: python3 bench/profile_binding_cpu.py [--rows 64] [--hidden 1024]
       [--reps 1000] [--profile custom_op|function]  (--profile: cProfile of
       the norm_modulate step instead)
"""

import argparse
import ctypes
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
if not os.environ.get("KJIT_LIBRARY") and (ROOT / "build" / "libkjit.so").exists():
    os.environ["KJIT_LIBRARY"] = str(ROOT / "build" / "libkjit.so")

import torch  # noqa: E402

import kjit  # noqa: E402
from kjit import _lib, core  # noqa: E402
from kjit import ops as kjit_ops  # noqa: E402

_LAUNCHES = [f"kjit_{op}_{d}" for op in ("norm_modulate", "gated_residual",
                                         "gated_residual_norm_modulate") for d in ("fwd", "bwd")]
_LAUNCHES += ["kjit_adaln_train_fwd", "kjit_adaln_train_bwd"]


def stub_library(tmp):
    """Binds each launch entry point of the loaded libkjit to a C no-op with
    the entry point's own prototype (so ctypes converts the same arguments)."""
    src, so = os.path.join(tmp, "noop.c"), os.path.join(tmp, "libnoop.so")
    with open(src, "w") as f:
        f.write("int kjit_bench_noop(void) { return 0; }\n")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", so, src],
                   check=True)
    noop = ctypes.CDLL(so)
    lib = _lib.load()
    for name in _LAUNCHES:
        fn = noop["kjit_bench_noop"]  # a fresh function object per name
        fn.restype, fn.argtypes = _lib.PROTOTYPES[name]
        setattr(lib, name, fn)


class _Stream:
    cuda_stream = 0


def patch_torch():
    """CPU tensors pass for CUDA ones: the ops get CPU kernels, the device
    check and the stream lookups answer as on a GPU."""
    ctx = core.Context(None, cache_dir="")
    kjit_ops._by_device[torch.device("cpu")] = ctx
    kjit_ops.context = (lambda device=None, _ctx=ctx: _ctx)
    torch.cuda.current_stream = lambda device=None: _Stream()
    if hasattr(kjit_ops, "_raw_stream"):
        kjit_ops._raw_stream = lambda ordinal: 0
    real_tensor = kjit_ops._tensor
    if "is_cuda" in real_tensor.__code__.co_names:
        # A C attribute read on a GPU; a Python property stands in here.
        torch.Tensor.is_cuda = property(lambda self: True)
    else:
        # A binding whose check reads t.device.type (at about that cost).
        def _tensor(fn, name, t):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                return t
            return real_tensor(fn, name, t)
        kjit_ops._tensor = _tensor
    for op in (kjit_ops._norm_modulate, kjit_ops._norm_modulate_bwd, kjit_ops._gated_residual,
               kjit_ops._gated_residual_bwd, kjit_ops._fused, kjit_ops._fused_bwd):
        impl = getattr(kjit_ops, op._init_fn.__name__)
        op.register_kernel("cpu")(impl)


def cases(n, h, r):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, h, generator=g).bfloat16()
    y = torch.randn(n, h, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(h, generator=g)).bfloat16()
    table = (0.5 * torch.randn(r, 6 * h, generator=g)).bfloat16()
    idx = torch.randint(0, r, (n,), generator=g)
    ones = torch.ones(n, h, dtype=torch.bfloat16)

    def nm(x, w, t, grad):
        sh, sc = t.chunk(6, dim=1)[:2]
        return [kjit.norm_modulate(x, w, sh, sc, idx, 1e-6)]

    def gr(x, w, t, grad):
        return [kjit.gated_residual(x, y, t.chunk(6, dim=1)[2], idx)]

    def fu(x, w, t, grad):
        sh, sc, gt = t.chunk(6, dim=1)[:3]
        return list(kjit.gated_residual_norm_modulate(x, y, gt, w, sh, sc, idx, 1e-6))

    def runner(op):
        def fwd():
            op(x, w, table, False)

        def fwd_grad():
            op(x.detach().requires_grad_(), w.detach().requires_grad_(),
               table.detach().requires_grad_(), True)

        def step():
            outs = op(x.detach().requires_grad_(), w.detach().requires_grad_(),
                      table.detach().requires_grad_(), True)
            torch.autograd.backward(outs, [ones] * len(outs))
        return fwd, fwd_grad, step

    return [("norm_modulate", runner(nm)), ("gated_residual", runner(gr)),
            ("gated_residual_norm_modulate", runner(fu))]


def timed(fn, reps):
    for _ in range(max(20, reps // 20)):
        fn()
    best = float("inf")
    for _ in range(5):  # best of 5 means: the least disturbed
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--profile", choices=("custom_op", "function"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        stub_library(tmp)
    patch_torch()
    all_cases = cases(args.rows, args.hidden, 9)
    if args.profile:
        import cProfile
        import pstats
        kjit_ops._EAGER = args.profile
        step = all_cases[0][1][2]
        for _ in range(50):
            step()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.reps):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    print(f"rows {args.rows} hidden {args.hidden}, bf16, R = 9; us per call (host only)")
    for mode in ("custom_op", "function"):
        kjit_ops._EAGER = mode
        for name, (fwd, fwd_grad, step) in all_cases:
            f, fg, s = (timed(fn, args.reps) for fn in (fwd, fwd_grad, step))
            print(f"{name:29s} {mode:9s} fwd {f:7.1f}  fwd+bwd {s:7.1f}  bwd {s - fg:7.1f}")


if __name__ == "__main__":
    main()
