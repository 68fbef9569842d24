#!/usr/bin/env python3
"""One MiniMax-H3-style DiT block, built from kjit ops and as diffusers writes
it, on the same parameters and inputs:

    t (3 timesteps) -> sinusoid -> linear -> + modality embedding -> silu ->
    AdaLN projection -> table (R = 9 rows = timestep * 3 + modality, 6H)
    x -> norm_modulate -> attention stand-in (linear) -> gated residual
      -> norm_modulate -> MLP stand-in (linear) -> gated residual

kjit consumes the table's chunk(6) views directly and fuses the first gated
residual with the second norm (gated_residual_norm_modulate); diffusers
gathers the (N, 6H) rows with index_select and composes torch ops. Checks:
the output and every gradient against the same block in float64, each error
the larger of ||err|| / ||ref|| (SPEC.md's measure) and max|err| / max|ref|
(kjit within 4e-3, or within 1.25x of diffusers' own error where the bf16
linear layers around the ops dominate and the two blocks round them at
different points; at least twice as accurate as diffusers on the table's
gradient and what is upstream of it, which diffusers sums in bf16), kjit's
gradients bitwise the same run after run;
and each kjit op inside the block on its own, SPEC.md's contract 4: its
outputs and the gradients it returned, against the float64 op on the inputs
and upstream gradients it was given there (bf16 within 4e-3, the fp32
sinusoid within 2e-7); prints both step (forward + backward) times.

    KJIT_LIBRARY=build-gpu/libkjit.so python3 examples/h3_block.py [--rows 4096]
"""

import argparse
import inspect
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
if "KJIT_LIBRARY" not in os.environ:
    for build in ("build-gpu", "build"):
        if (ROOT / build / "libkjit.so").exists():
            os.environ["KJIT_LIBRARY"] = str(ROOT / build / "libkjit.so")
            break

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kjit  # noqa: E402
from kjit import reference as ref  # noqa: E402

H, D_T, D_EMB, EPS = 5376, 256, 2688, 1e-6
SIN = dict(flip_sin_to_cos=True, downscale_freq_shift=0.0)   # MiniMax-H3's time_proj
DEV = "cuda"


def make_params(seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def rn(*shape, scale):
        return (torch.randn(*shape, device=DEV, generator=g) * scale).bfloat16()

    return {
        "w_t": rn(D_EMB, D_T, scale=D_T ** -0.5),         # timestep embedder (one linear)
        "modality": rn(3, D_EMB, scale=0.5),              # text, image, video
        "w_ada": rn(6 * H, D_EMB, scale=D_EMB ** -0.5),   # AdaLN projection
        "b_ada": rn(6 * H, scale=0.02),
        "norm1": (1 + rn(H, scale=0.1)),
        "norm2": (1 + rn(H, scale=0.1)),
        "w_attn": rn(H, H, scale=H ** -0.5),              # attention stand-in
        "w_mlp": rn(H, H, scale=H ** -0.5),               # MLP stand-in
    }


def make_inputs(rows, seed=1):
    """A packed sequence of three samples (timesteps 0..2), each with text,
    image and video tokens: adaln_index = timestep_index * 3 + modality."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(rows, H, device=DEV, generator=g).bfloat16()
    t = torch.tensor([999.0, 500.0, 21.0], device=DEV)
    bounds = torch.linspace(0, rows, 10, device=DEV).long()
    index = torch.empty(rows, dtype=torch.int64, device=DEV)
    for k in range(9):   # sample k // 3, modality k % 3
        index[bounds[k]:bounds[k + 1]] = k
    return x, t, index


def adaln_table(p, emb_t):
    """(9, 6H): row timestep * 3 + modality of silu(temb + modality) @ w_ada."""
    temb = F.linear(emb_t.to(p["w_t"].dtype), p["w_t"])
    emb = (temb[:, None, :] + p["modality"][None, :, :]).reshape(9, D_EMB)
    return F.linear(F.silu(emb), p["w_ada"], p["b_ada"])


def direct(fn, *args, **kw):
    return fn(*args, **kw)


class OpRecorder:
    """Each kjit op call of one block step: its inputs and outputs, and, from
    a hook on its autograd node, the gradients that reached its outputs and
    the gradients it returned for its tensor inputs."""

    def __init__(self):
        self.calls = []

    def __call__(self, fn, *args, **kw):
        result = fn(*args, **kw)
        outs = result if isinstance(result, tuple) else (result,)
        call = {"fn": fn, "args": [a.detach() if torch.is_tensor(a) else a for a in args],
                "kw": kw, "outs": [o.detach() for o in outs]}
        self.calls.append(call)
        if outs[0].grad_fn is not None:
            outs[0].grad_fn.register_hook(lambda gi, go, c=call: c.update(gi=gi, go=go))
        return result


def kjit_block(p, x, t, index, op=direct):
    table = adaln_table(p, op(kjit.timestep_sinusoid, t, D_T, **SIN))
    sh1, sc1, g1, sh2, sc2, g2 = table.chunk(6, dim=1)
    a = op(kjit.norm_modulate, x, p["norm1"], sh1, sc1, index, EPS)
    h, b = op(kjit.gated_residual_norm_modulate, x, F.linear(a, p["w_attn"]), g1, p["norm2"],
              sh2, sc2, index, EPS)
    return op(kjit.gated_residual, h, F.linear(b, p["w_mlp"]), g2, index)


TOL = {torch.float32: 1e-6, torch.bfloat16: 4e-3, torch.float16: 1e-3}   # SPEC.md, contract 4


def check_ops(calls):
    """Each recorded op against the float64 op (kjit.reference) on the same
    inputs and upstream gradients; returns (label, error, bound) rows."""
    rows = []
    for c in calls:
        name = c["fn"].__name__
        ref_fn = getattr(ref, name)
        args = [a.double().requires_grad_() if torch.is_tensor(a) and a.is_floating_point() else a
                for a in c["args"]]
        kw = dict(c["kw"])
        if name == "gated_residual_norm_modulate":
            kw["h_dtype"] = c["args"][0].dtype   # h rounded as kjit returns it; the norm reads it
        if name == "timestep_sinusoid":
            args[0] = args[0].detach()
        result = ref_fn(*args, **kw)
        want = result if isinstance(result, tuple) else (result,)
        labels = ["h", "out"] if len(want) == 2 else ["out"]
        for label, got, w in zip(labels, c["outs"], want):
            bound = 2e-7 if name == "timestep_sinusoid" else TOL[got.dtype]
            rows.append((f"{name} {label}", ref.worst_rel_err(got, w), bound))
        if "go" not in c:
            continue
        torch.autograd.backward([w for w, g in zip(want, c["go"]) if g is not None],
                                [g.double() for g in c["go"] if g is not None])
        tensors = [(i, a) for i, a in enumerate(c["args"]) if torch.is_tensor(a)]
        gi = c["gi"]   # the node's: one per tensor argument, in order
        if len(gi) != len(tensors):
            raise RuntimeError(f"{name}: {len(gi)} input gradients for {len(tensors)} tensors")
        names = list(inspect.signature(c["fn"]).parameters)
        for (i, a), g in zip(tensors, gi):
            if g is None or not a.is_floating_point():
                continue
            rows.append((f"{name} d{names[i]}", ref.worst_rel_err(g, args[i].grad), TOL[g.dtype]))
    return rows


def diffusers_block(p, x, t, index):
    table = adaln_table(p, ref.timestep_sinusoid(t, D_T, **SIN))
    sh1, sc1, g1, sh2, sc2, g2 = table.index_select(0, index).chunk(6, dim=1)
    a = F.rms_norm(x, (H,), p["norm1"], EPS) * (1 + sc1) + sh1
    x = x + g1 * F.linear(a, p["w_attn"])
    b = F.rms_norm(x, (H,), p["norm2"], EPS) * (1 + sc2) + sh2
    return x + g2 * F.linear(b, p["w_mlp"])


def step(block, p, x, t, index, up):
    """Forward + backward; returns the output and the gradients of x and p."""
    leaves = {k: v.detach().requires_grad_() for k, v in p.items()}
    xl = x.detach().requires_grad_()
    out = block(leaves, xl, t, index)
    out.backward(up)
    return out.detach(), {"x": xl.grad, **{k: v.grad for k, v in leaves.items()}}


def time_step(block, p, x, t, index, up, iters):
    for _ in range(3):
        step(block, p, x, t, index, up)
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(block, p, x, t, index, up)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096, help="packed sequence rows (default 4096)")
    ap.add_argument("--iters", type=int, default=20, help="timed steps per block (default 20)")
    args = ap.parse_args()
    if args.iters < 1:
        ap.error(f"--iters must be at least 1, got {args.iters}")
    if not torch.cuda.is_available():
        raise SystemExit("h3_block.py needs a CUDA device")
    if args.rows < 9:
        raise SystemExit("--rows must be at least 9 (one run of rows per table row)")
    torch.backends.cuda.matmul.allow_tf32 = False

    p = make_params()
    x, t, index = make_inputs(args.rows)
    up = torch.randn(x.shape, device=DEV, generator=torch.Generator(device=DEV).manual_seed(2))
    up = up.bfloat16()

    k_out, k_grads = step(kjit_block, p, x, t, index, up)
    d_out, d_grads = step(diffusers_block, p, x, t, index, up)
    r_out, r_grads = step(diffusers_block, {k: v.double() for k, v in p.items()}, x.double(),
                          t.double(), index, up.double())

    failures = []
    print(f"H3 block, {args.rows} rows, hidden {H}, bf16; error vs float64 "
          f"(the larger of ||err||/||ref|| and max|err|/max|ref|):")
    print(f"  {'':<10}{'kjit':>10}{'diffusers':>11}")
    for name, k, d, r in [("out", k_out, d_out, r_out)] + [
            (f"d{k}", k_grads[k], d_grads[k], r_grads[k]) for k in k_grads]:
        ek, ed = ref.worst_rel_err(k, r), ref.worst_rel_err(d, r)
        # Every gradient here also carries the rounding of the bf16 linear
        # layers around the ops (the reference is the whole block in fp64),
        # so no bound is tighter than diffusers' own error. Where diffusers
        # sums the table's gradient with a bf16 index_add (the table and
        # everything upstream of it), kjit's fp32 sums must be at least twice
        # as accurate. Each op alone is held to SPEC.md's bounds below, on
        # the inputs it was given inside this block.
        upstream = name in ("dw_ada", "db_ada", "dmodality", "dw_t")
        bound = max(4e-3, 0.5 * ed) if upstream else max(4e-3, 1.25 * ed)
        ok = ek <= bound
        failures += [] if ok else [f"{name}: kjit error {ek:.2e} > {bound:.2e}"]
        print(f"  {name:<10}{ek:>10.2e}{ed:>11.2e}{'' if ok else '   <- FAIL'}")

    rec = OpRecorder()
    step(lambda *a: kjit_block(*a, op=rec), p, x, t, index, up)
    print("each kjit op inside the block vs the float64 op on its own inputs and upstream "
          "gradients (the larger of the two measures):")
    for label, err, bound in check_ops(rec.calls):
        ok = err <= bound
        failures += [] if ok else [f"{label}: error {err:.2e} > {bound:.0e}"]
        print(f"  {label:<42}{err:>10.2e}  (bound {bound:.0e}){'' if ok else '   <- FAIL'}")
    if len(rec.calls) != 4 or any("go" not in c for c in rec.calls[1:]):
        failures += [f"the recorder saw {len(rec.calls)} op calls, not 4 with 3 backwards"]

    _, again = step(kjit_block, p, x, t, index, up)
    differ = [k for k in k_grads if not ref.same_bits(k_grads[k], again[k])]
    print("kjit gradients bitwise repeatable:", "yes" if not differ else f"NO ({differ})")
    failures += [f"gradients differ between runs: {differ}"] if differ else []

    tk = time_step(kjit_block, p, x, t, index, up, args.iters)
    td = time_step(diffusers_block, p, x, t, index, up, args.iters)
    print(f"step (fwd+bwd), median of {args.iters}: kjit {tk:.0f} us, diffusers {td:.0f} us "
          f"({td / tk:.2f}x)")
    if failures:
        raise SystemExit("FAILED: " + "; ".join(failures))


if __name__ == "__main__":
    main()
