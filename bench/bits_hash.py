#!/usr/bin/env python3
"""Hashes of every output and gradient of the norm ops on seeded inputs.

Two builds of libkjit (KJIT_LIBRARY picks one) that print the same lines
compute the same bits: the check that a kernel change meant to keep the
arithmetic (a new staging, a launch change) did keep it, and that a trainer
and an inference server on two kjit versions agree. `bench/run_device.sh
bits` runs it over this tree's build and, with KJIT_BITS_REF, another tree's.
Seven shapes (777 to 32768 rows, R = 1 to 300, hidden 13 to 5376, bf16, fp16
and fp32 activations, with and without a weight, uniform and run-ordered
indices), norm_modulate and gated_residual_norm_modulate forward and
backward: one line per op and shape, a 16-hex-digit SHA-256 prefix per
tensor. Needs torch and a GPU.
Usage: python3 bench/bits_hash.py [--out FILE]
"""
import argparse
import hashlib
import sys

import torch

import kjit

SHAPES = [  # rows, R, hidden, activations, tables, weight, run-ordered index
    (4097, 9, 5376, torch.bfloat16, torch.bfloat16, True, False),
    (4097, 9, 5376, torch.bfloat16, torch.bfloat16, True, True),
    (32768, 9, 5376, torch.bfloat16, torch.bfloat16, True, False),
    (1000, 1, 1000, torch.float32, torch.float32, True, False),
    (1000, 300, 3072, torch.bfloat16, torch.float32, True, False),
    (777, 9, 5376, torch.float16, torch.float32, False, False),
    (6000, 40, 13, torch.float32, torch.float32, True, False),
]


def digest(t):
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def lines():
    out = []
    for (n, r, hid, dt, pdt, wt, runs) in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(1234 + n + r + hid)

        def rnd(*s, dtype):
            return torch.randn(*s, generator=g, device="cuda", dtype=torch.float32).to(dtype)

        x = rnd(n, hid, dtype=dt).requires_grad_()
        res = rnd(n, hid, dtype=dt).requires_grad_()
        tab = rnd(r, 3 * hid, dtype=pdt) * 0.3
        tab.requires_grad_()
        sh, sc, gt = tab.chunk(3, dim=1)
        w = (1 + 0.1 * rnd(hid, dtype=pdt)).requires_grad_() if wt else None
        if runs:
            idx = (torch.arange(n, device="cuda") * r // n).to(torch.int32)
        else:
            idx = torch.randint(0, r, (n,), generator=g, device="cuda", dtype=torch.int32)
        dout = rnd(n, hid, dtype=dt)
        dh = rnd(n, hid, dtype=dt)
        name = f"{n} {r} {hid} {str(dt)[6:]} {'runs' if runs else 'uniform'}"
        o = kjit.norm_modulate(x, w, sh, sc, idx, eps=1e-6)
        grads = torch.autograd.grad(o, [x, tab] + ([w] if wt else []), dout)
        out.append(" ".join(["norm_modulate", name, digest(o)] + [digest(t) for t in grads]))
        hh, o2 = kjit.gated_residual_norm_modulate(res, x, gt, w, sh, sc, idx, eps=1e-6)
        grads = torch.autograd.grad([hh, o2], [res, x, tab] + ([w] if wt else []), [dh, dout])
        out.append(" ".join(["fused", name, digest(hh), digest(o2)] + [digest(t) for t in grads]))
    return out


def main():
    ap = argparse.ArgumentParser(description="Hashes of the norm ops' outputs and gradients on seeded inputs.")
    ap.add_argument("--out", help="write the lines to FILE instead of standard output")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bits_hash: no CUDA device")
    text = "\n".join(lines()) + "\n"
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
