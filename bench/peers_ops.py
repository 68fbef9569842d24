"""The AdaLN ops of bench_ops.c in PyTorch, measured the same way, printing the
same table: hidden 5376, bf16 activations and table, int32 index, R = 9 table
rows (the six chunks are table.chunk(6, dim=1) of one (R, 6H) tensor), rows
4097 and 32768; CUDA events around each iteration, median of ITERS after WARM
warm-up iterations, rotating input sets whose total exceeds 3x the 50 MB L2,
random data. Bytes and floors are kjit's ideal single pass (bench_ops.c), so
the fractions compare directly.

Peers (as diffusers writes the computation, modulation rows picked with
index_select on the table chunks):
  eager            RMSNorm as diffusers' RMSNorm (x * rsqrt(mean(x^2) + eps)),
                   * (1 + scale) + shift; res + gate * y
  eager F.rms_norm the same with torch.nn.functional.rms_norm (norm ops only)
  torch.compile    torch.compile(eager, dynamic=False)
Forward: torch.no_grad(). Forward+backward: autograd, requires_grad on
x / res / y / weight / table, torch.autograd.backward with random gradients.

Usage: python3 bench/peers_ops.py [--rows 4097 32768] [--no-compile]
Exits 77 without CUDA.
"""
import argparse
import datetime
import math
import sys
import time

import torch
import torch.nn.functional as F

H = 5376
R = 9
NCHUNK = 6
WARM = 10
ITERS = 100
PEAK_BW = 4.25e12
L2_BYTES = 50 * 1024 * 1024
EPS = 1e-6
ROWS = (4097, 32768)
DEV = torch.device("cuda")
OPS = ("adaln_row_gather", "norm_modulate", "gated_residual", "gated_residual_norm_modulate")


# ---- the computations --------------------------------------------------------

def rms_norm_diffusers(x, w, eps):
    """diffusers.models.normalization.RMSNorm.forward (bf16 weight)."""
    input_dtype = x.dtype
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    if w is not None:
        if w.dtype in (torch.float16, torch.bfloat16):
            x = x.to(w.dtype)
        x = x * w
    else:
        x = x.to(input_dtype)
    return x


def rms_norm_functional(x, w, eps):
    return F.rms_norm(x, x.shape[-1:], w, eps)


def gather(table, idx):
    return tuple(c.index_select(0, idx) for c in table.chunk(NCHUNK, dim=1))


def make_norm_modulate(norm):
    def norm_modulate(x, w, table, idx):
        shift_t, scale_t = table.chunk(NCHUNK, dim=1)[0:2]
        shift, scale = shift_t.index_select(0, idx), scale_t.index_select(0, idx)
        return norm(x, w, EPS) * (1 + scale) + shift
    return norm_modulate


def gated_residual(res, y, table, idx):
    gate = table.chunk(NCHUNK, dim=1)[2].index_select(0, idx)
    return res + gate * y


def make_fused(norm):
    def gated_residual_norm_modulate(res, y, w, table, idx):
        shift_t, scale_t, gate_t = table.chunk(NCHUNK, dim=1)[3:6]
        gate = gate_t.index_select(0, idx)
        h = res + gate * y
        shift, scale = shift_t.index_select(0, idx), scale_t.index_select(0, idx)
        return h, norm(h, w, EPS) * (1 + scale) + shift
    return gated_residual_norm_modulate


def peers(compile_too):
    """op -> list of (variant name, fn)."""
    nm_e, fu_e = make_norm_modulate(rms_norm_diffusers), make_fused(rms_norm_diffusers)
    out = {
        "adaln_row_gather": [("torch eager", gather)],
        "norm_modulate": [("torch eager", nm_e),
                          ("torch eager F.rms_norm", make_norm_modulate(rms_norm_functional))],
        "gated_residual": [("torch eager", gated_residual)],
        "gated_residual_norm_modulate": [("torch eager", fu_e),
                                         ("torch eager F.rms_norm", make_fused(rms_norm_functional))],
    }
    if compile_too:
        for op, fn in (("adaln_row_gather", gather), ("norm_modulate", nm_e), ("gated_residual", gated_residual),
                       ("gated_residual_norm_modulate", fu_e)):
            out[op].append(("torch.compile", torch.compile(fn, dynamic=False)))
    return out


# ---- data ---------------------------------------------------------------------

def rnd(gen, *shape, amp=1.0, bias=0.0):
    return ((torch.rand(*shape, device=DEV, generator=gen) * 2 - 1) * amp + bias).to(torch.bfloat16)


def make_sets(op, n, gen):
    """Rotating sets: (leaves needing grads, call args, backward gradients,
    the bytes of the set's own tensors). gated_residual's res needs no
    gradient: dres is dout itself, which kjit does not copy (bench_ops gives
    it no dx) and a model passes on without a copy; a leaf res needing one
    would make autograd clone dout into res.grad, 2 (N, H) tensors of
    traffic the peer would pay and kjit not."""
    A = n * H * 2

    def one():
        if op == "adaln_row_gather":
            dout = rnd(gen, n, NCHUNK * H)
            return [], lambda sh: (sh["table"], sh["idx"]), list(dout.chunk(NCHUNK, dim=1)), NCHUNK * A
        if op == "norm_modulate":
            x = rnd(gen, n, H).requires_grad_(True)
            return [x], lambda sh: (x, sh["w"], sh["table"], sh["idx"]), [rnd(gen, n, H)], 2 * A
        if op == "gated_residual":
            res, y = rnd(gen, n, H), rnd(gen, n, H).requires_grad_(True)
            return [y], lambda sh: (res, y, sh["table"], sh["idx"]), [rnd(gen, n, H)], 3 * A
        res, y = rnd(gen, n, H).requires_grad_(True), rnd(gen, n, H).requires_grad_(True)
        return ([res, y], lambda sh: (res, y, sh["w"], sh["table"], sh["idx"]), [rnd(gen, n, H), rnd(gen, n, H)],
                4 * A)

    sets = [one()]
    nsets = max(3, math.ceil(4 * L2_BYTES / sets[0][3]))
    sets += [one() for _ in range(nsets - 1)]
    return sets


def op_bytes(op, n):
    """Ideal single-pass bytes (fwd, bwd), as bench_ops.c counts them."""
    A, T, I, Wt = n * H * 2.0, R * H * 2.0, n * 4.0, H * 2.0
    if op == "adaln_row_gather":
        return 6 * T + I + 6 * A, 6 * A + I + 6 * T
    if op == "norm_modulate":
        return A + Wt + 2 * T + I + A, 2 * A + Wt + T + I + A + Wt + 2 * T
    if op == "gated_residual":
        return 2 * A + T + I + A, 2 * A + T + I + A + T
    return 2 * A + 3 * T + Wt + I + 2 * A, 4 * A + 2 * T + Wt + I + 2 * A + 3 * T + Wt


# ---- timing -------------------------------------------------------------------

def median_us(step, prep, nsets):
    """Median device time of one step (events around it), rotating sets.
    Before each timed step the stream is held by a ~5 ms sleep kernel, so
    that the host has queued the whole step before its start event runs: an
    eager or AOTAutograd backward is host-bound at 4097 rows, and without
    the hold its launch gaps were timed as device time (kjit's calls keep
    the host ahead of the device without it)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    for i in range(WARM):
        prep(i % nsets)
        step(i % nsets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(ITERS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(ITERS)]
    for i in range(ITERS):
        k = (i + WARM) % nsets
        prep(k)
        if sleep is not None:
            sleep(10_000_000)
        starts[i].record()
        step(k)
        ends[i].record()
        if i % 8 == 7:
            torch.cuda.synchronize()  # a short queue: each hold starts after the host has returned
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return 0.5 * (t[ITERS // 2 - 1] + t[ITERS // 2])


GRAPH_REPS = 11


def graph_us(step, nsets):
    """Per iteration inside a CUDA graph of 2 * nsets iterations over the
    rotating sets, median of GRAPH_REPS replays (as bench_ops' graph table);
    None when the step cannot be captured."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(2 * nsets):
                step(i % nsets)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(2 * nsets):
                step(i % nsets)
        for _ in range(2):
            g.replay()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(GRAPH_REPS)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(GRAPH_REPS)]
        for i in range(GRAPH_REPS):
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        t = sorted(a.elapsed_time(b) * 1e3 / (2 * nsets) for a, b in zip(starts, ends))
        del g
        return t[GRAPH_REPS // 2]
    except Exception as e:  # noqa: BLE001 - reported, the table goes on
        print(f"# graph capture failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        torch.cuda.synchronize()
        return None


def bench_graph_fwd(fn, sets, shared):
    def fwd(k):
        with torch.no_grad():
            fn(*sets[k][1](shared))
    return graph_us(fwd, len(sets))


def bench(fn, sets, shared, params):
    nsets = len(sets)

    def no_prep(k):
        pass

    def fwd(k):
        with torch.no_grad():
            fn(*sets[k][1](shared))

    def zero_grads(k):
        for p in sets[k][0] + params:
            p.grad = None

    def fwd_bwd(k):
        out = fn(*sets[k][1](shared))
        outs = list(out) if isinstance(out, tuple) else [out]
        torch.autograd.backward(outs, sets[k][2])

    return median_us(fwd, no_prep, nsets), median_us(fwd_bwd, zero_grads, nsets)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("peers_ops: no CUDA: skipped")
        return 77
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    t_start = time.time()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# torch {torch.__version__}, {date}, {torch.cuda.get_device_name()}; H={H} bf16, int32 index, R={R}, "
          f"table = chunk(6) views of (R, 6H)")
    hold = ("each after a ~5 ms hold of the stream (no host gap timed)" if hasattr(torch.cuda, "_sleep")
            else "no hold of the stream (torch.cuda._sleep missing: host gaps may be timed)")
    print(f"# CUDA events per iteration, {hold}, median of "
          f"{ITERS} after {WARM} warm-up; rotating buffer sets > 3x the "
          f"{L2_BYTES / 1048576:.0f} MB L2; floor = bytes / {PEAK_BW / 1e12:.2f} TB/s")
    print(f"{'op':<54s} {'rows':>6s} {'fwd_us':>10s} {'fwd_bwd_us':>10s} {'fwd_MB':>10s} {'bwd_MB':>10s} "
          f"{'fwd_floor':>9s} {'fb_floor':>9s} {'fwd_frac':>7s} {'fb_frac':>7s} {'bwd_ws_bytes':>12s} {'rot_MB':>8s}",
          flush=True)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(20261130)
    table = rnd(gen, R, NCHUNK * H, amp=0.5).requires_grad_(True)
    w = rnd(gen, H, amp=0.1, bias=1.0).requires_grad_(True)
    variants = peers(not args.no_compile)
    times, graphs = {}, {}
    for n in args.rows:
        idx = torch.randint(0, R, (n,), device=DEV, dtype=torch.int32, generator=gen)
        shared = {"table": table, "w": w, "idx": idx}
        # Every op's sets allocated before any is timed, freed after (as
        # bench_ops does): an allocation right after a large free slowed the
        # next timings there (norm_modulate's forward at 32768 rows 209 us
        # against 180, 2026-11-30).
        all_sets = {op: make_sets(op, n, gen) for op in OPS}
        torch.cuda.synchronize()
        for op in OPS:
            sets = all_sets[op]
            params = [table] if op in ("adaln_row_gather", "gated_residual") else [table, w]
            bf, bb = op_bytes(op, n)
            ff, fb = bf / PEAK_BW * 1e6, (bf + bb) / PEAK_BW * 1e6
            rot = sum(s[3] for s in sets)
            for vname, fn in variants[op]:
                tc = time.time()
                tf, tfb = bench(fn, sets, shared, params)
                times[(op, vname, n)] = (tf, tfb)
                name = f"{op} [{vname}]"
                print(f"{name:<54s} {n:6d} {tf:10.1f} {tfb:10.1f} {bf / 1e6:10.1f} {bb / 1e6:10.1f} {ff:9.1f} "
                      f"{fb:9.1f} {ff / tf:7.3f} {fb / tfb:7.3f} {'-':>12s} {rot / 1e6:8.0f}"
                      + (f"   ({time.time() - tc:.0f} s incl. compile)" if vname == "torch.compile" else ""),
                      flush=True)
                graphs[(op, vname, n)] = bench_graph_fwd(fn, sets, shared)
            for p in [table, w]:
                p.grad = None
        # What torch's own copy kernel reaches at this size: one (N, H) bf16
        # tensor copied, the bytes norm_modulate's forward moves (rotating
        # pairs, > 4x the L2), timed before the sets are freed.
        nb = n * H * 2
        k = max(3, min(16, -(-4 * L2_BYTES // (2 * nb))))
        src = [rnd(gen, n, H) for _ in range(int(k))]
        dst = [torch.empty_like(x) for x in src]
        tcp = median_us(lambda j: dst[j].copy_(src[j]), lambda j: None, int(k))
        graphs[("copy", "torch copy_", n)] = graph_us(lambda j: dst[j].copy_(src[j]), int(k))
        name = "copy reference [torch copy_ of one (N, H) tensor]"
        print(f"{name:<54s} {n:6d} {tcp:10.1f} {'-':>10s} {nb / 1e6:10.1f} {nb / 1e6:10.1f} {2 * nb / PEAK_BW * 1e6:9.1f} "
              f"{'-':>9s} {2 * nb / PEAK_BW * 1e6 / tcp:7.3f}   ({2 * nb / tcp / 1e6:.2f} TB/s read + written)", flush=True)
        del src, dst, sets, all_sets
        torch.cuda.empty_cache()
    print()
    print(f"# forward inside a CUDA graph: 2x the rotating sets' count of iterations per graph, median of "
          f"{GRAPH_REPS} replays, per iteration (as bench_ops' graph table)")
    print(f"{'op':<54s} {'rows':>6s} {'fwd_us':>10s} {'fwd_floor':>9s} {'fwd_frac':>7s}")
    for (op, vname, n), t in graphs.items():
        bf = op_bytes(op, n)[0] if op != "copy" else 2 * n * H * 2
        ff = bf / PEAK_BW * 1e6
        name = f"graph {op} [{vname}]"
        print(f"{name:<54s} {n:6d} " + (f"{t:10.1f} {ff:9.1f} {ff / t:7.3f}" if t else f"{'-':>10s} {ff:9.1f}"))
    print()
    for n in args.rows:
        for vname in ("torch eager", "torch.compile"):
            try:
                gr, nm = times[("gated_residual", vname, n)], times[("norm_modulate", vname, n)]
                fu = times[("gated_residual_norm_modulate", vname, n)]
            except KeyError:
                continue
            uf, ub = gr[0] + nm[0], gr[1] + nm[1]
            print(f"[{vname}] fused vs gated_residual+norm_modulate, rows {n}: fwd {uf / fu[0]:.2f}x "
                  f"({gr[0]:.1f} + {nm[0]:.1f} = {uf:.1f} us vs {fu[0]:.1f} us), fwd+bwd {ub / fu[1]:.2f}x "
                  f"({gr[1]:.1f} + {nm[1]:.1f} = {ub:.1f} us vs {fu[1]:.1f} us)")
    print(f"# total {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
