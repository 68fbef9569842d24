"""Randomized GPU check of kjit's torch ops through the public API alone
(timestep_sinusoid in a tenth of the draws: dims 1 to 65536, its options,
each output dtype):
shapes, dtypes, strides, index patterns and table layouts drawn at random
(hidden sizes from 1 to 16384, R up to 65535, rows up to 70000, activations
as column slices of wider buffers, tables as chunk(6) views, separate
tensors or slices with their own row stride, int32 / int64 indices that are
uniform, constant, sorted, reversed or two-valued). For each draw:
  - outputs and every gradient vs the float64 reference (SPEC.md contract 4);
  - a few rows again in a batch of their own, shuffled: outputs and row
    gradients bitwise equal (contract 1);
  - the whole call again: parameter gradients bitwise equal (contract 2);
  - in a quarter of the norm ops' and gated_residual's draws the tables and
    weight are frozen (no gradient asked for: the row-gradients-only
    backward), and the row gradients must equal, bit for bit, those of the
    same call with every gradient.
Errors are held to SPEC's bounds under both its measure (||err|| / ||ref||)
and the prior-art reports' (max|err| / max|ref|); "bitwise" compares bits
(torch.equal would take -0.0 for +0.0). --inject tests the checks
themselves: each draw spoils one copy a single check reads (an output or a
gradient against the reference, the second call, or the rows alone) by
more than its bound, and that check must fail the draw. Runs draws until
--seconds have passed (each new shape compiles first); no draw is a failure.

    KJIT_LIBRARY=build-gpu/libkjit.so python3 tests/python/fuzz_torch_gpu.py [--seed S] [--seconds T]
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))

import torch  # noqa: E402

import kjit  # noqa: E402
from kjit import reference as ref  # noqa: E402

DEV = "cuda"
TOL = {torch.float32: 1e-6, torch.bfloat16: 4e-3, torch.float16: 1e-3}
# --inject's kinds: each spoils the copy that one check reads; every failure
# message starts with its check's tag, "[kind]".
INJECT = ("out", "grad", "repeat", "rows")


def spoil(t, tol):
    """A copy of t with element [0, 0] moved by more than tol relative to
    t's norm and maximum: both error measures must see it."""
    t = t.detach().clone()
    t.view(-1)[0] += 4 * tol * max(t.double().norm().item(), t.double().abs().max().item(), 1.0)
    return t
OPS = ("norm_modulate", "gated_residual", "gated_residual_norm_modulate", "adaln_row_gather")
HIDDEN = (8, 24, 77, 256, 1000, 1032, 2056, 3072, 5376, 6144, 12288, 16384, 16383)


def draw_sinusoid(rng):
    dim = rng.choice((1, 2, 3, 64, 255, 256, 320, 1000, 4096, 65536))
    shift = rng.choice((0.0, 1.0, 0.5))
    if dim // 2 - shift == 0:
        shift = 0.5
    return dict(op="timestep_sinusoid", n=rng.choice((1, 2, 17, 1000, 4097)) if dim <= 4096 else rng.choice((1, 33)),
                dim=dim, flip=rng.random() < 0.5, shift=shift, scale=rng.choice((1.0, 1000.0, 0.25)),
                max_period=rng.choice((10000.0, 5000.0)), out=rng.choice((torch.float32, torch.bfloat16, torch.float16)),
                tmax=rng.choice((1.0, 1000.0)), seed=rng.randrange(1 << 30))


def check_sinusoid(c, inject=None):
    """Against the float64 reference (2e-7 for fp32 output, SPEC.md; the
    output dtype's bound otherwise); a few rows alone, shuffled, bitwise.
    inject: "out" or "rows" (no gradient, no second call here)."""
    g = torch.Generator(device=DEV).manual_seed(c["seed"])
    t = torch.rand(c["n"], device=DEV, generator=g) * c["tmax"]
    kw = dict(flip_sin_to_cos=c["flip"], downscale_freq_shift=c["shift"], scale=c["scale"],
              max_period=c["max_period"])
    out = kjit.timestep_sinusoid(t, c["dim"], out_dtype=c["out"], **kw)
    want = ref.timestep_sinusoid(t.double(), c["dim"], **kw)
    tol = 2e-7 if c["out"] == torch.float32 else TOL[c["out"]]
    fails = []
    e = ref.worst_rel_err(spoil(out, tol) if inject == "out" else out, want)
    if not e <= tol:
        fails.append(f"[out] rel err {e:.3g} > {tol:g}")
    rng = random.Random(c["seed"])
    pick = sorted(set(rng.randrange(c["n"]) for _ in range(min(c["n"], 5))))
    rng.shuffle(pick)
    rows = torch.tensor(pick, device=DEV)
    alone = kjit.timestep_sinusoid(t[rows].contiguous(), c["dim"], out_dtype=c["out"], **kw)
    if inject == "rows":
        alone = spoil(alone, tol)
    if not ref.same_bits(alone, out[rows]):
        fails.append(f"[rows] {pick} alone differ from the batch")
    return fails


def draw(rng):
    if rng.random() < 0.1:
        return draw_sinusoid(rng)
    op = rng.choice(OPS)
    act = rng.choice((torch.bfloat16, torch.float16, torch.float32))
    param = rng.choice((torch.bfloat16, torch.float32))
    if op == "adaln_row_gather":
        act = param
    h = rng.choice(HIDDEN)
    r = rng.choice((1, 2, 9, 37, 1000, 4096, 65535))
    r = max(1, min(r, 40_000_000 // (6 * h)))
    n = rng.choice((1, 2, 17, 257, 1000, 4097)) if rng.random() < 0.8 else rng.choice((20000, 70000))
    n = max(1, min(n, 60_000_000 // h))
    return dict(op=op, act=act, param=param, h=h, r=r, n=n,
                idx=rng.choice((torch.int32, torch.int64)),
                pattern=rng.choice(("uniform", "constant", "sorted", "reversed", "two", "cyclic")),
                x_pad=rng.choice((0, 0, 8, 5)), table=rng.choice(("chunk", "separate", "strided")),
                weight=rng.choice((True, True, False)), frozen=op != "adaln_row_gather" and rng.random() < 0.25,
                seed=rng.randrange(1 << 30))


def rows_of(buf_rows, h, pad, dtype, g, scale=1.0):
    """(N, h) activations: contiguous, or a column slice of an (N, h + pad) buffer."""
    base = (torch.randn(buf_rows, h + pad, device=DEV, generator=g) * scale).to(dtype)
    return base[:, pad // 2: pad // 2 + h] if pad else base


def index_of(c, g):
    n, r = c["n"], c["r"]
    p = c["pattern"]
    if p == "constant":
        i = torch.full((n,), r - 1, device=DEV)
    elif p == "two":
        i = torch.randint(0, 2, (n,), device=DEV, generator=g) * (r - 1)
    elif p == "cyclic":
        i = torch.arange(n, device=DEV) % r
    else:
        i = torch.randint(0, r, (n,), device=DEV, generator=g)
        if p == "sorted":
            i = i.sort().values
        elif p == "reversed":
            i = i.sort(descending=True).values
    return i.to(c["idx"])


def tables_of(c, g):
    """Six (R, h) tables (shift, scale, gate, ... as chunk(6) orders them),
    every one a leaf or a view of one, so its gradient can be asked for."""
    r, h, dt = c["r"], c["h"], c["param"]
    if c["table"] == "chunk":
        t6 = (torch.randn(r, 6 * h, device=DEV, generator=g) * 0.1).to(dt).requires_grad_()
        return list(t6.chunk(6, 1)), [t6]
    if c["table"] == "separate":
        ts = [(torch.randn(r, h, device=DEV, generator=g) * 0.1).to(dt).requires_grad_() for _ in range(6)]
        return ts, ts
    wide = (torch.randn(r, 6 * h + 8, device=DEV, generator=g) * 0.1).to(dt).requires_grad_()
    return [wide[:, 8 + k * h: 8 + (k + 1) * h] for k in range(6)], [wide]


def inputs(c):
    g = torch.Generator(device=DEV).manual_seed(c["seed"])
    x = rows_of(c["n"], c["h"], c["x_pad"], c["act"], g, 2.0).requires_grad_()
    y = rows_of(c["n"], c["h"], c["x_pad"], c["act"], g).requires_grad_()
    tabs, _ = tables_of(c, g)
    w = ((0.5 + torch.rand(c["h"], device=DEV, generator=g)).to(c["param"]).requires_grad_()
         if c["weight"] else None)
    if c.get("frozen"):  # the same layouts (views of one storage), no gradient
        tabs = [t.detach() for t in tabs]
        w = None if w is None else w.detach()
    return dict(x=x, y=y, tabs=tabs, w=w, index=index_of(c, g))


def call(lib, op, m):
    t, i = m["tabs"], m["index"]
    if op == "norm_modulate":
        return [lib.norm_modulate(m["x"], m["w"], t[0], t[1], i)]
    if op == "gated_residual":
        return [lib.gated_residual(m["x"], m["y"], t[2], i)]
    if op == "gated_residual_norm_modulate":
        kw = {"h_dtype": m["h_dtype"]} if "h_dtype" in m else {}
        return list(lib.gated_residual_norm_modulate(m["x"], m["y"], t[2], m["w"], t[0], t[1], i, **kw))
    return list(lib.adaln_row_gather(t, i))


def used(op):
    """Which inputs the op reads (by name), which tables (by chunk)."""
    return {"norm_modulate": (("x", "w"), (0, 1)), "gated_residual": (("x", "y"), (2,)),
            "gated_residual_norm_modulate": (("x", "y", "w"), (0, 1, 2)),
            "adaln_row_gather": ((), tuple(range(6)))}[op]


def grads(op, m, outs, ups):
    names, chunks = used(op)
    wrt = [m[k] for k in names if m[k] is not None] + [m["tabs"][k] for k in chunks]
    return list(torch.autograd.grad(outs, [t for t in wrt if t.requires_grad], ups))


def double(m):
    d = {k: (v.detach().double().requires_grad_(v.requires_grad) if torch.is_tensor(v) and v.is_floating_point()
             else v) for k, v in m.items() if k != "tabs"}
    d["tabs"] = [t.detach().double().requires_grad_(t.requires_grad) for t in m["tabs"]]
    d["h_dtype"] = m["x"].dtype
    return d


def upstream(outs, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(o.shape, device=DEV, generator=g).to(o.dtype) for o in outs]


def check(c, inject=None):
    """inject: None, or one of INJECT's kinds: that check reads a spoiled copy."""
    op = c["op"]
    m = inputs(c)
    outs = call(kjit, op, m)
    ups = upstream(outs, c["seed"] + 1)
    gs = grads(op, m, outs, ups)
    outs = [o.detach() for o in outs]
    d = double(m)
    routs = call(ref, op, d)
    rgs = grads(op, d, routs, [u.double() for u in ups])
    fails = []
    for k, (o, ro) in enumerate(zip(outs, routs)):
        e = ref.worst_rel_err(spoil(o, TOL[o.dtype]) if inject == "out" and k == 0 else o, ro)
        if not e <= TOL[o.dtype]:
            fails.append(f"[out] out{k} rel err {e:.3g} > {TOL[o.dtype]:g}")
    # The last gradient is a parameter's (tables, or the gather's dtable):
    # gated_residual's first, dres, is dout itself (SPEC: dres = dout).
    for k, (a, b) in enumerate(zip(gs, rgs)):
        e = ref.worst_rel_err(spoil(a, TOL[a.dtype]) if inject == "grad" and k == len(gs) - 1 else a, b)
        if not e <= TOL[a.dtype]:
            fails.append(f"[grad] grad{k} ({a.dtype}) rel err {e:.3g} > {TOL[a.dtype]:g}")
    # Repeatable: the same call again, every output and gradient bitwise
    # (dres, the caller's own dout, is left out: it cannot differ).
    outs2 = call(kjit, op, m)
    gs2 = grads(op, m, outs2, ups)
    if inject == "repeat":
        gs2[-1] = spoil(gs2[-1], TOL[gs2[-1].dtype])
    for k, (a, b) in enumerate(zip(outs + gs, outs2 + gs2)):
        if a is not b and not ref.same_bits(a, b):
            fails.append(f"[repeat] tensor {k} differs on a second call")
    if c.get("frozen"):
        # The row gradients alone against the full backward's, bit for bit:
        # the same tables (each a leaf over the same storage and strides)
        # and weight, now asking for their gradients.
        full = dict(m, tabs=[t.detach().requires_grad_() for t in m["tabs"]],
                    w=None if m["w"] is None else m["w"].detach().requires_grad_())
        gfull = grads(op, full, call(kjit, op, full), ups)
        for k, (a, b) in enumerate(zip(gs, gfull)):
            if not ref.same_bits(a, b):
                fails.append(f"[frozen] row gradient {k} with frozen tables differs from the full backward's")
    # Batch invariance: a few rows, shuffled, in a batch of their own.
    n = c["n"]
    rng = random.Random(c["seed"])
    pick = sorted(set(rng.randrange(n) for _ in range(min(n, 5))))
    rng.shuffle(pick)
    rows = torch.tensor(pick, device=DEV)
    names, _ = used(op)
    sub = dict(m, index=m["index"][rows])
    for k in ("x", "y"):
        sub[k] = m[k].detach()[rows].requires_grad_()
    souts = call(kjit, op, sub)
    sgs = grads(op, sub, souts, [u[rows] for u in ups])
    souts = [o.detach() for o in souts]
    if inject == "rows":
        souts[0] = spoil(souts[0], TOL[souts[0].dtype])
    for k, (a, b) in enumerate(zip(souts, outs)):
        if not ref.same_bits(a, b[rows]):
            fails.append(f"[rows] out{k}: rows {pick} alone differ from the batch")
    for k, name in enumerate(x for x in names if m[x] is not None):
        if name in ("x", "y") and not ref.same_bits(sgs[k], gs[k][rows]):
            fails.append(f"[rows] d{name}: rows {pick} alone differ from the batch")
    return fails


def describe(c):
    if c["op"] == "timestep_sinusoid":
        return " ".join(f"{k}={v}" for k, v in c.items())
    return (f"{c['op']} n={c['n']} h={c['h']} r={c['r']} act={str(c['act'])[6:]} param={str(c['param'])[6:]} "
            f"idx={str(c['idx'])[6:]} {c['pattern']} x_pad={c['x_pad']} table={c['table']} weight={c['weight']} "
            f"frozen={c.get('frozen', False)} seed={c['seed']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--inject", action="store_true",
                    help="spoil the copy one check reads, a different check each draw (an output or a gradient "
                         "against the reference, the second call, the rows alone): that check must fail every "
                         "draw (exit 0 iff it did)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        if os.environ.get("KJIT_REQUIRE_GPU", "0") not in ("", "0"):
            print("no CUDA device, and KJIT_REQUIRE_GPU is set: failed")
            return 1
        print("no CUDA device: skipped")
        return 77
    rng = random.Random(a.seed)
    print(f"seed {a.seed}", flush=True)
    t_end = time.time() + a.seconds
    done = bad = 0
    while time.time() < t_end:
        c = draw(rng)
        kinds = ("out", "rows") if c["op"] == "timestep_sinusoid" else INJECT
        kind = kinds[done % len(kinds)] if a.inject else None
        try:
            fails = (check_sinusoid if c["op"] == "timestep_sinusoid" else check)(c, kind)
        except Exception as e:  # an exception is a failure of the draw, reported with it
            fails = [f"{type(e).__name__}: {e}"]
            if a.inject:  # not the failure injected: stop
                print(f"FAIL {describe(c)}\n  {fails[0]}")
                return 1
        done += 1
        if a.inject:
            # The spoiled check must be among the failures; others may not be.
            tag = f"[{kind}]"
            if not fails or any(not f.startswith(tag) for f in fails):
                bad += 1
                print(f"INJECT {kind} not caught as expected: {describe(c)}\n  " + "\n  ".join(fails[:6] or ["(no failure)"]),
                      flush=True)
        elif fails:
            bad += 1
            print(f"FAIL {describe(c)}\n  " + "\n  ".join(fails[:6]), flush=True)
        torch.cuda.empty_cache()
    if a.inject:
        print(f"{done} draws with a spoiled check, {done - bad} caught by that check alone")
        return 0 if done and bad == 0 else 1
    print(f"{done} draws, {bad} failed")
    return 1 if bad or not done else 0


if __name__ == "__main__":
    sys.exit(main())
