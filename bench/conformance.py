#!/usr/bin/env python3
"""kjit's conformance report: each op, kjit beside the peers that run in the
same process, through the checks of the prior-art reports (bench/prior_art/:
B200 measurements of diffusers, SGLang, Liger, Transformer Engine and
RL-Kernel) and in their JSON schema.

    KJIT_LIBRARY=build-gpu/libkjit.so python3 bench/conformance.py [--quick] [--ops a,b]

Checks, all bitwise (the bits compared, so -0 differs from +0 and a NaN
equals itself; torch.equal would take neither):
  all_rows             every row computed alone vs inside full batches of 64,
                       257 and 2048 rows (forward and row gradients);
  full_vs_sub_batches  a 131072-row batch (8192 for the sinusoid) vs
                       sub-batches of 1, 7, 4097, 32768, 65536 rows;
  batch_size_sweep     8 probe rows at the front, middle and back of batches
                       of every size 1..9 and 2^k-1, 2^k, 2^k+1, plus the
                       whole batch reversed;
  params_repeatable    parameter and table gradients of the same batch,
                       run after run (5 runs of each full batch, and 3 of
                       the 131072-row batch).
Every candidate goes through them with the reports' three input seeds;
--peer-seeds 1 gives the peers one (a third of the rows; kjit keeps three;
the counts are in each report), which keeps the whole run near 6 minutes on
an H200, as bench/run_device.sh does.
accuracy_latency: max|err|/max|ref| vs the float64 computation on the same
inputs (forward, and each gradient under the same upstream gradient); fwd_us
and fwd_bwd_us the median of CUDA-event samples of device time (the L2 cache
flushed and the GPU held by a sleep kernel before each, so the host has
queued the whole call: no host gap is timed), fwd_host_us and
fwd_bwd_host_us the median host time of enqueueing the call, the inputs
rotated over buffer sets larger than L2 (the gather's inputs, its table and
index, are small: the flush keeps them cold), random upstream gradients for
each set, at 4097 and
32768 rows, hidden 5376, bf16, R = 9 table rows (the (R, 6H) projection
chunked into six views). The copy floor is the op's bytes read + written at
4.25 TB/s (the H200's measured device-to-device copy).

Writes bench/reports/<op>.json and prints a side-by-side table with the
prior-art reports' B200 figures where they have the op. Each accuracy row
also holds spec_rel_err: docs/SPEC.md's measure, ||out - ref|| / ||ref||,
for the forward's outputs and each gradient. Exits 1 when kjit fails a
contract on any op (batch_invariant or params_repeatable not true, or a
spec_rel_err over SPEC.md's bound or NaN, or a check that did not run: a
missing size, output or gradient), naming it; the peers' results are
reported, not judged. The installed kjit package is used where there is one
(pip install ./bindings/python), else the tree's; the library is
KJIT_LIBRARY's where set, else one copied next to the package, else this
tree's build (build-gpu/ or build/).
"""

import argparse
import datetime
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    # The installed package (pip install ./bindings/python); the tree's
    # package only where none is installed.
    import kjit  # noqa: E402
except ImportError:
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    import kjit  # noqa: E402
from kjit import _lib as _kjit_lib  # noqa: E402
from kjit import reference as ref  # noqa: E402

# The library: KJIT_LIBRARY where set, else one copied next to the package
# (the library loads on first use), else this tree's build.
if "KJIT_LIBRARY" not in os.environ and not any(where == "next to the package"
                                                for where, _ in _kjit_lib.candidates()):
    for build in ("build-gpu", "build"):
        if (ROOT / build / "libkjit.so").exists():
            os.environ["KJIT_LIBRARY"] = str(ROOT / build / "libkjit.so")
            break

sys.path.insert(0, str(ROOT / "bench"))
import report_table  # noqa: E402  (the table's cells, shared with the README's table)

DEV = "cuda"
H, R, EPS, D_SIN = 5376, 9, 1e-5, 256
COPY_TBPS = 4.25
SEEDS = (3, 4, 5)
ADALN_BI = ((64, 257, 2048), 131072, (1, 7, 4097, 32768, 65536))
SIN_BI = ((64, 257, 2048), 8192, (1, 7, 2048, 4097))
ADALN_PERF = (4097, 32768)
SIN_PERF = (1, 3, 4, 64, 256, 2048)
SIN_KW = dict(flip_sin_to_cos=True, downscale_freq_shift=0.0)   # MiniMax-H3's
LIBS = ("torch", "triton", "diffusers", "vllm", "flashinfer-python", "sglang", "liger-kernel",
        "transformer_engine", "megatron-core")


# ---- inputs ----------------------------------------------------------------------------


def _gen(seed, salt):
    return torch.Generator(device=DEV).manual_seed(seed * 1000 + salt)


def _rn(seed, salt, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device=DEV, generator=_gen(seed, salt)) * scale).to(dtype)


def _h3_index(n, seed):
    """adaln_index = timestep_index * 3 + modality_tag over a packed sequence:
    runs of rows (one sample's text, image or video tokens) sharing a row."""
    g = torch.Generator().manual_seed(seed)
    idx, done = [], 0
    while done < n:
        run = min(n - done, int(torch.randint(1, max(2, n // 6), (1,), generator=g)))
        idx.append(torch.full((run,), int(torch.randint(0, R, (1,), generator=g))))
        done += run
    return torch.cat(idx).to(DEV) if idx else torch.zeros(0, dtype=torch.int64, device=DEV)


def _table(seed=1):
    return _rn(seed, 14, R, 6 * H, scale=0.1)


def _weight():
    return (0.5 + torch.rand(H, device=DEV, generator=_gen(1, 11))).bfloat16()


# ---- ops and candidates ----------------------------------------------------------------
# A candidate: fn(**inputs) -> output(s); make(seed, n) -> inputs; rows: the
# inputs indexed by row; grads: the inputs differentiated; views: how the
# report names gradients (a table's chunk k -> "sh", ...).


def _split(table):
    return table.chunk(6, 1)


def _op_specs():
    def nm_make(s, n):
        return {"x": _rn(s, 10, n, H, scale=2.0), "w": _weight(), "table": _table(),
                "idx": _h3_index(n, s)}

    def gr_make(s, n):
        return {"res": _rn(s, 15, n, H), "y": _rn(s, 16, n, H), "table": _table(),
                "idx": _h3_index(n, s)}

    def fused_make(s, n):
        return dict(gr_make(s, n), w=_weight())

    def nm(lib):
        return lambda x, w, table, idx: lib.norm_modulate(x, w, *_split(table)[:2], idx, EPS)

    def gr(lib):
        return lambda res, y, table, idx: lib.gated_residual(res, y, _split(table)[2], idx)

    def fused(lib):
        def fn(res, y, w, table, idx):
            sh, sc, gate = _split(table)[:3]
            return lib.gated_residual_norm_modulate(res, y, gate, w, sh, sc, idx, EPS)
        return fn

    def fused_ref(res, y, w, table, idx):
        # The norm reads h as returned, rounded to bf16 (reference.py).
        sh, sc, gate = _split(table)[:3]
        return ref.gated_residual_norm_modulate(res, y, gate, w, sh, sc, idx, EPS,
                                                h_dtype=torch.bfloat16)

    def gather(lib):
        return lambda table, idx: lib.adaln_row_gather(list(_split(table)), idx)

    def sinusoid(lib):
        return lambda t: lib.timestep_sinusoid(t, D_SIN, **SIN_KW)

    adaln = dict(bi=ADALN_BI, perf=ADALN_PERF)
    return {
        "timestep_sinusoid": dict(
            make=lambda s, n: {"t": torch.rand(n, device=DEV, generator=_gen(s, 1))},
            rows=("t",), grads=(), views={}, ops=sinusoid, bi=SIN_BI, perf=SIN_PERF,
            bytes=lambda n: (n * 4 + n * D_SIN * 4, 0)),
        "adaln_row_gather": dict(
            make=lambda s, n: {"table": _table(), "idx": _h3_index(n, s)},
            rows=("idx",), grads=("table",), views={"table": None}, ops=gather,
            bytes=lambda n: (6 * n * H * 2, 6 * n * H * 2), **adaln),
        "norm_modulate": dict(
            make=nm_make, rows=("x", "idx"), grads=("x", "w", "table"),
            views={"x": None, "w": None, "sh": 0, "sc": 1}, ops=nm,
            bytes=lambda n: (2 * n * H * 2, 3 * n * H * 2), **adaln),
        "gated_residual": dict(
            make=gr_make, rows=("res", "y", "idx"), grads=("res", "y", "table"),
            views={"res": None, "y": None, "gate": 2}, ops=gr,
            bytes=lambda n: (3 * n * H * 2, 3 * n * H * 2), **adaln),
        "gated_residual_norm_modulate": dict(
            make=fused_make, rows=("res", "y", "idx"), grads=("res", "y", "w", "table"),
            views={"res": None, "y": None, "w": None, "sh": 0, "sc": 1, "gate": 2}, ops=fused,
            ref=fused_ref,
            bytes=lambda n: (4 * n * H * 2, 6 * n * H * 2), **adaln),
    }


def _compiled(fn, rows):
    """torch.compile of a peer, dynamic in the row count only (hidden stays
    static, as a model would compile it); one graph for N=1, one for N>1."""
    compiled = torch.compile(fn)

    def call(**inputs):
        for k in rows:
            if inputs[k].shape[0] > 1:
                torch._dynamo.mark_dynamic(inputs[k], 0)
        return compiled(**inputs)
    return call


def candidates(op, spec, use_compile, peer_seeds=len(SEEDS)):
    peers = SEEDS[:peer_seeds]
    diffusers = spec["ops"](ref)
    sources = {
        "timestep_sinusoid": "diffusers get_timestep_embedding, replayed op for op (kjit/reference.py)",
        "adaln_row_gather": "diffusers six index_select calls (one per chunk(6) view), replayed (kjit/reference.py)",
        "norm_modulate": "diffusers composition (F.rms_norm + index_select modulation), replayed (kjit/reference.py)",
        "gated_residual": "diffusers residual + gate.index_select(...) * y, replayed (kjit/reference.py)",
        "gated_residual_norm_modulate": "diffusers gated residual, then F.rms_norm + "
                                        "index_select modulation, replayed (kjit/reference.py)",
    }
    out = [dict(spec, name="kjit", source=f"kjit {kjit.__version__} ({kjit.core.library_path()})",
                fn=spec["ops"](kjit), seeds=SEEDS),
           dict(spec, name="diffusers", source=sources[op], fn=diffusers, seeds=peers)]
    if use_compile:
        out.append(dict(spec, name="diffusers_compiled",
                        source=f"torch.compile ({torch.__version__}) of the diffusers composition",
                        fn=_compiled(diffusers, spec["rows"]), seeds=peers))
    if op == "norm_modulate":
        def norm_make(s, n):
            d = spec["make"](s, n)
            return {"x": d["x"], "w": d["w"]}
        out.append(dict(spec, name="torch_rms_norm", source="torch F.rms_norm (no modulation)",
                        make=norm_make, rows=("x",), grads=("x", "w"),
                        views={"x": None, "w": None}, seeds=peers,
                        fn=lambda x, w: F.rms_norm(x, (H,), w, EPS),
                        ref=lambda x, w: F.rms_norm(x, (H,), w, EPS)))
    return out


# ---- running a candidate ----------------------------------------------------------------


_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same(a, b):
    """Bitwise equality: shapes, dtypes and every bit."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        a, b = a.contiguous().view(_BITS[a.element_size()]), b.contiguous().view(_BITS[b.element_size()])
    return torch.equal(a, b)


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


class Case:
    """A candidate on one input set: run() on all rows or a sub-batch (rows
    picked by idx from every row input), with fixed upstream gradients."""

    def __init__(self, cand, seed, n):
        self.cand, self.seed, self.inputs = cand, seed, cand["make"](seed, n)
        self.ups = None   # made by the first full run, from its outputs' shapes

    def run(self, idx=None):
        args = {}
        for k, v in self.inputs.items():
            if idx is not None and k in self.cand["rows"]:
                v = v.index_select(0, idx)
            if k in self.cand["grads"]:
                v = v.detach().clone().requires_grad_(True)
            args[k] = v
        outs = _flat(self.cand["fn"](**args))
        if self.ups is None:
            assert idx is None, "run() on the full batch first"
            g = _gen(self.seed, 99)
            self.ups = [torch.randn(o.shape, device=DEV, generator=g).to(o.dtype) for o in outs]
        ups = self.ups if idx is None else [u.index_select(0, idx) for u in self.ups]
        if self.cand["grads"]:
            torch.autograd.backward(outs, ups)
        grads = {k: args[k].grad for k in self.cand["grads"]}
        return [o.detach() for o in outs], grads

    def row_grads(self):
        return [k for k in self.cand["grads"] if k in self.cand["rows"]]


def _same_rows(outs, grads, full_outs, full_grads, case, idx):
    if len(outs) != len(full_outs):
        return False, False
    fwd = all(_same(o, f.index_select(0, idx)) for o, f in zip(outs, full_outs))
    grd = all(_same(grads[k], full_grads[k].index_select(0, idx)) for k in case.row_grads())
    return fwd, grd


def batch_invariance(cand, quick):
    full_sizes, big, subs = cand["bi"]
    if quick:
        full_sizes, big, subs = (17, 64), 256, (1, 7, 64)
    seeds = cand["seeds"]
    params = [k for k in cand["grads"] if k not in cand["rows"]]
    res = {"all_rows": {}, "params_repeatable": None}
    ok, repeat = True, True

    for n in full_sizes:
        fwd = grd = 0
        for seed in seeds:
            case = Case(cand, seed, n)
            fo, fg = case.run()
            for i in range(n):
                idx = torch.tensor([i], device=DEV)
                o, g = case.run(idx)
                f, r = _same_rows(o, g, fo, fg, case, idx)
                fwd, grd = fwd + (not f), grd + (not r)
            if params:
                for _ in range(4):   # with the run above: 5 runs of the same batch
                    _, again = case.run()
                    repeat &= all(_same(again[k], fg[k]) for k in params)
        res["all_rows"][str(n)] = {"rows": len(seeds) * n, "fwd_differ": fwd, "rowgrad_differ": grd}
        ok &= fwd == 0 and grd == 0
    if params:
        res["params_repeatable"] = bool(repeat)
        ok &= repeat

    fwd = grd = checked = 0
    for seed in seeds[:2]:
        case = Case(cand, seed, big)
        fo, fg = case.run()
        if params and seed == seeds[0]:
            # The parameter gradients at the largest batch too, where the
            # fixed partition splits them over the most chunks: 3 runs.
            for _ in range(2):
                _, again = case.run()
                repeat &= all(_same(again[k], fg[k]) for k in params)
            del again
            res["params_repeatable"] = bool(repeat)
            ok &= repeat
        for sb in subs:
            # Small sub-batches at every 1/512 of the batch; large ones tile it.
            step = sb if sb >= 1024 else max(sb, big // 512)
            for start in range(0, big, step):
                idx = torch.arange(start, min(start + sb, big), device=DEV)
                o, g = case.run(idx)
                f, r = _same_rows(o, g, fo, fg, case, idx)
                fwd, grd, checked = fwd + (not f), grd + (not r), checked + 1
        del case, fo, fg
        torch.cuda.empty_cache()
    res["full_vs_sub_batches"] = {"full_batch": big, "sub_batch_sizes": list(subs),
                                  "sub_batches": checked, "fwd_differ": fwd, "rowgrad_differ": grd}
    ok &= fwd == 0 and grd == 0

    n = full_sizes[-1]
    sizes = sorted(set(range(1, min(n, 9) + 1)) | {v for k in range(4, 20) for v in
                                                   (2 ** k - 1, 2 ** k, 2 ** k + 1) if v <= n} | {n})
    probes = sorted({0, n - 1, *list(range(n // 8 + 3, n - 1, n // 8))[:6]})
    compared = failed = 0
    first = []
    for seed in seeds:
        case = Case(cand, seed, n)
        case.run()
        alone = {r: case.run(torch.tensor([r], device=DEV)) for r in probes}
        g = torch.Generator().manual_seed(seed)

        def compare(rows, pos, r):
            nonlocal compared, failed
            o, gr = case.run(rows.to(DEV))
            ao, ag = alone[r]
            good = all(_same(a[pos], b[0]) for a, b in zip(o, ao))
            good &= all(_same(gr[k][pos], ag[k][0]) for k in case.row_grads())
            compared += 1
            if not good:
                failed += 1
                if len(first) < 8:
                    first.append({"seed": seed, "batch": int(rows.numel()), "position": pos,
                                  "row": r})

        for m in sizes:
            for r in probes:
                others = torch.randperm(n, generator=g)
                others = others[others != r][: m - 1]
                for pos in sorted({0, (m - 1) // 2, m - 1}):
                    compare(torch.cat([others[:pos], torch.tensor([r]), others[pos:]]), pos, r)
        for r in probes:
            compare(torch.arange(n - 1, -1, -1), n - 1 - r, r)
    res["batch_size_sweep"] = {"batch_sizes": sizes, "probe_rows": probes, "comparisons": compared,
                               "differ": failed, "first_failures": first}
    res["batch_invariant"] = bool(ok and failed == 0)
    return res


# ---- accuracy and latency ----------------------------------------------------------------

_flush = None


def _time_us(fn, arg_sets, iters, flush="read"):
    """Device time: the median of CUDA-event samples around fn, and the host
    time: the median wall time of enqueueing it. Before each sample the L2
    cache is flushed (a 256 MiB buffer read: clean lines, so no write-back of
    the flush's own falls in the timed region) and the GPU is held by a ~5 ms sleep
    kernel, so the host has queued all of fn before the start event runs and
    no host gap is timed (on a slow host an eager step's launches would
    otherwise be). Every candidate is timed the same way. flush="memset"
    writes the buffer instead (the report's method before 2026-12-05, kept
    for bench/stream_probe.py's comparison)."""
    if flush not in ("read", "memset"):
        raise ValueError(f"flush must be 'read' or 'memset', not {flush!r}")
    global _flush
    if _flush is None:
        _flush = torch.zeros(256 << 20, dtype=torch.uint8, device=DEV)
    sleep = getattr(torch.cuda, "_sleep", None)
    for k in range(3):
        fn(arg_sets[k % len(arg_sets)])
    torch.cuda.synchronize()
    events, host = [], []
    for i in range(iters):
        if flush == "read":
            _flush.view(torch.int64).sum()  # one read of the buffer (a dtype= sum would copy it first)
        else:
            _flush.zero_()
        if sleep is not None:
            sleep(10_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn(arg_sets[i % len(arg_sets)])
        host.append((time.perf_counter() - t0) * 1e6)
        end.record()
        events.append((start, end))
        if i % 8 == 7:
            torch.cuda.synchronize()  # keep the queue short: the sleep must start after the host returns
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in events), statistics.median(host)


def timing_sets(make, n, first=None):
    """The input sets the timing rotates over: first (else make(11, n)) and
    enough more that one pass over them does not fit in the 50 MB L2."""
    first = make(11, n) if first is None else first
    one = sum(v.numel() * v.element_size() for v in first.values())
    return [first] + [make(12 + k, n) for k in range(max(1, min(7, (150 << 20) // one)))]


def upstream_grads(fn, sets, n, ones=False):
    """Random upstream gradients, one set of them per input set (never
    constant data); ones=True: one `ones` tensor per output shared by every
    set (the report's method before 2026-12-05, for bench/stream_probe.py)."""
    if ones:
        shared = [torch.ones_like(o) for o in _flat(fn(**sets[0]))]
        return [shared for _ in sets]
    gu = _gen(13, n)
    return [[torch.randn(o.shape, device=DEV, generator=gu).to(o.dtype) for o in _flat(fn(**s))]
            for s in sets]


def training_step(fn, grads):
    """One forward + backward of fn on (input set, upstream gradients), the
    inputs named in grads made leaves that need a gradient."""
    def step(pair):
        a, up = pair
        lv = {k: a[k].detach().requires_grad_() if k in grads else a[k] for k in a}
        torch.autograd.backward(_flat(fn(**lv)), up)
    return step


def _named_grads(cand, grads):
    out = {}
    for name, chunk in cand["views"].items():
        g = grads["table" if chunk is not None else name]
        out[name] = g if chunk is None else _split(g)[chunk]
    return out


# docs/SPEC.md, contract 4, by output dtype (the sinusoid's fp32 path: 2e-7).
SPEC_TOL = {torch.float32: 1e-6, torch.bfloat16: 4e-3, torch.float16: 1e-3}


def accuracy_latency(cand, quick):
    result = {}
    sizes = cand["perf"][:1] if quick else cand["perf"]
    for n in sizes:
        inputs = cand["make"](11, n)
        leaves = {k: v.detach().clone().requires_grad_(k in cand["grads"]) if v.is_floating_point()
                  else v for k, v in inputs.items()}
        outs = _flat(cand["fn"](**leaves))
        reference = cand.get("ref") or cand["ops"](ref)
        dbl = {k: v.detach().double().requires_grad_(k in cand["grads"]) if v.is_floating_point()
               else v for k, v in inputs.items()}
        routs = _flat(reference(**dbl))
        row = {"fwd_rel_err": ref.rel_err(torch.cat([o.reshape(-1) for o in outs]),
                                          torch.cat([o.reshape(-1) for o in routs]))}
        spec = {"fwd": {f"out{i}": ref.spec_rel_err(o, r) for i, (o, r) in enumerate(zip(outs, routs))},
                "tol": {f"out{i}": SPEC_TOL.get(o.dtype) for i, o in enumerate(outs)}}
        if cand["grads"]:
            g = _gen(9, 0)
            ups = [torch.randn(o.shape, device=DEV, generator=g).to(o.dtype) for o in outs]
            torch.autograd.backward(outs, ups)
            torch.autograd.backward(routs, [u.double() for u in ups])
            got = _named_grads(cand, {k: leaves[k].grad for k in cand["grads"]})
            want = _named_grads(cand, {k: dbl[k].grad for k in cand["grads"]})
            row["grad_rel_err"] = {k: ref.rel_err(got[k], want[k]) for k in got}
            spec["grads"] = {k: ref.spec_rel_err(got[k], want[k]) for k in got}
            spec["grads_tol"] = {k: SPEC_TOL.get(got[k].dtype) for k in got}
        row["spec_rel_err"] = spec
        del leaves, outs, dbl, routs
        sets = timing_sets(cand["make"], n, inputs)
        iters = 30 if quick else 100
        row["fwd_us"], row["fwd_host_us"] = _time_us(lambda a: cand["fn"](**a), sets, iters)
        if cand["grads"]:
            step = training_step(cand["fn"], cand["grads"])
            ups = upstream_grads(cand["fn"], sets, n)
            row["fwd_bwd_us"], row["fwd_bwd_host_us"] = _time_us(step, list(zip(sets, ups)), iters)
        result[str(n)] = row
        del sets, inputs
        torch.cuda.empty_cache()
    return result


# ---- environment, report, table ----------------------------------------------------------


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _git(*args):
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def environment():
    rt = kjit.core.runtime_info()
    ctx = kjit.context(0)
    return {
        "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "tf32": torch.backends.cuda.matmul.allow_tf32,
        "libraries": {name: _version(name) for name in LIBS},
        "megatron_source_commit": None,
        "kjit": {"version": kjit.__version__, "package": kjit.__file__, "library": kjit.core.library_path(),
                 "arch": ctx.arch, "nvrtc": rt["nvrtc"], "driver_version": rt["driver_version"],
                 "index_check": ctx.index_check, "eager": kjit.ops._EAGER},
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "timing": "median of 100 CUDA-event samples (30 with --quick) of device time after 3 warm-ups, L2 "
                  "flushed " + ("and the GPU held by a ~5 ms sleep kernel before each sample (the host has queued "
                                "the whole call: no host gap timed)" if hasattr(torch.cuda, "_sleep") else
                                "before each sample, the GPU not held (torch.cuda._sleep missing: host gaps may "
                                "be timed)") +
                  ", inputs rotated over buffer sets > 150 MB; *_host_us: the median host time of enqueueing the call",
        "rel_err": "max|out - ref| / max|ref|, ref in float64 on the same inputs",
        "mode_environment": {"plain": {}},
    }


def _floor(spec, quick):
    sizes = spec["perf"][:1] if quick else spec["perf"]
    out = {"bandwidth_TBps": COPY_TBPS}
    for n in sizes:
        fwd, bwd = spec["bytes"](n)
        out[str(n)] = {"fwd_us": fwd / COPY_TBPS / 1e6}
        if bwd:
            out[str(n)]["fwd_bwd_us"] = (fwd + bwd) / COPY_TBPS / 1e6
    return out


def _fmt(v, kind):
    if v is None:
        return "-"
    if kind == "err":
        return f"{v:.1e}"
    if kind == "us":
        return f"{v:.1f}"
    return str(v)


def print_table(op, report, seeds_report):
    rows = [(name, e) for name, e in report["results"]["plain"].items()]
    if seeds_report:
        rows += [(f"B200 report: {name}", e) for name, e in seeds_report["results"]["plain"].items()
                 if "accuracy_latency" in e]
    floor = report["copy_floor"]
    sizes = report_table.sizes_of(report)
    head = f"{'candidate':<34}{'inv':>5}{'rep':>5}{'fwd_err':>9}{'grad_err':>9}"
    for s in sizes:
        head += f"{'fwd@' + s:>11}{'fwdbwd@' + s:>13}{'floor%':>8}"
    print(f"\n== {op}  ({report['environment']['gpu']}, {report['environment']['date_utc']})")
    print(head)
    for name, e in rows:
        inv, rep, fwd_err, gerr, per_size = report_table.summary(
            e, sizes, None if name.startswith("B200") else floor)
        line = (f"{name:<34}{'yes' if inv else 'NO':>5}"
                f"{ {True: 'yes', False: 'NO', None: '-'}[rep]:>5}"
                f"{_fmt(fwd_err, 'err'):>9}{_fmt(gerr, 'err'):>9}")
        for fwd, fwd_bwd, pct in per_size:
            frac = "-" if pct is None else f"{pct:.0f}"
            line += f"{_fmt(fwd, 'us'):>11}{_fmt(fwd_bwd, 'us'):>13}{frac:>8}"
        print(line)
    for name, e in rows:
        al = e["accuracy_latency"]
        hosts = [f"{_fmt(al.get(s, {}).get('fwd_host_us'), 'us')}/{_fmt(al.get(s, {}).get('fwd_bwd_host_us'), 'us')}"
                 f"@{s}" for s in sizes if al.get(s, {}).get("fwd_host_us") is not None]
        if hosts:
            print(f"  host us (fwd/fwd+bwd enqueue) {name}: " + ", ".join(hosts))
    print("inv: batch_invariant; rep: params_repeatable; errors at the first size; times in us of device "
          "time (host queued ahead); floor%: the copy floor's share of fwd_bwd (fwd where there is no backward)")


def kjit_verdict(op, report, sizes=None, grads=None):
    """The contracts kjit's own entry of a report fails (empty: none).
    sizes: the row counts whose accuracy rows must be there; grads: the
    gradients each must hold (None: whatever the report has). A check that
    did not run fails, as does one that failed."""
    e = report["results"]["plain"].get("kjit")
    if e is None:
        return [f"{op}: no kjit entry"]
    bad = []
    bi = e["batch_invariance"]
    if bi.get("batch_invariant") is not True:
        bad.append(f"{op}: batch_invariant is {bi.get('batch_invariant')}")
    if e["has_backward"] and bi.get("params_repeatable") is not True:
        bad.append(f"{op}: params_repeatable is {bi.get('params_repeatable')}")
    sin_fp32 = op == "timestep_sinusoid"
    al = e.get("accuracy_latency") or {}
    for n in sizes if sizes is not None else ():
        if str(n) not in al:
            bad.append(f"{op}: no accuracy row at {n} rows")
    if not al:
        bad.append(f"{op}: no accuracy rows")
    for n, row in al.items():
        spec = row.get("spec_rel_err", {})
        if not spec.get("fwd"):
            bad.append(f"{op} at {n} rows: no forward error measured")
        if e["has_backward"]:
            have = set(spec.get("grads", {}))
            want = set(grads) if grads is not None else have
            if not have or want - have:
                bad.append(f"{op} at {n} rows: gradient errors missing for "
                           f"{sorted(want - have) if have else 'every gradient'}")
        checks = [(f"fwd {k}", v, spec.get("tol", {}).get(k)) for k, v in spec.get("fwd", {}).items()]
        checks += [(f"grad {k}", v, spec.get("grads_tol", {}).get(k)) for k, v in spec.get("grads", {}).items()]
        for what, v, tol in checks:
            if tol is not None and sin_fp32 and tol == 1e-6:
                tol = 2e-7
            if v != v or (tol is not None and v > tol):
                bad.append(f"{op} at {n} rows: {what} rel err {v:.3g} (SPEC bound {tol})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    specs = _op_specs()
    ap.add_argument("--ops", default=",".join(specs), help="comma-separated ops (default: all)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for the <op>.json reports (default bench/reports; with --quick a "
                         "temporary directory, so a smoke test never replaces the reports)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not a report")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    ap.add_argument("--peer-seeds", type=int, default=len(SEEDS), choices=range(1, len(SEEDS) + 1),
                    metavar="N", help=f"input seeds for the peers, 1..{len(SEEDS)} (default {len(SEEDS)}, "
                    "as the prior-art reports; kjit always runs all)")
    args = ap.parse_args()
    ops = args.ops.split(",")
    unknown = set(ops) - set(specs)
    if unknown:
        raise SystemExit(f"unknown op(s) {sorted(unknown)}; choose from {sorted(specs)}")
    if not torch.cuda.is_available():
        raise SystemExit("conformance.py needs a CUDA device")
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="kjit-conformance-")) if args.quick else ROOT / "bench" / "reports"
    try:
        kjit.core.library_path()
    except kjit.LibraryError as err:
        raise SystemExit(f"conformance.py: {err}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch._dynamo.config.cache_size_limit = 64
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    # KJIT_COMMIT names the commit when the tree is an export (git archive).
    commit = os.environ.get("KJIT_COMMIT") or _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    t_all = time.time()
    failed = []
    for op in ops:
        spec = specs[op]
        results = {}
        candidates_of_op = candidates(op, spec, not args.no_compile, args.peer_seeds)
        for cand in candidates_of_op:
            t0 = time.time()
            entry = {"source": cand["source"], "has_backward": bool(cand["grads"])}
            entry["batch_invariance"] = batch_invariance(cand, args.quick)
            entry["accuracy_latency"] = accuracy_latency(cand, args.quick)
            results[cand["name"]] = entry
            print(f"  {op} {cand['name']}: batch_invariant="
                  f"{entry['batch_invariance']['batch_invariant']} ({time.time() - t0:.0f} s)",
                  flush=True)
            torch.cuda.empty_cache()
        seeds_path = ROOT / "bench" / "prior_art" / f"{op}.json"
        seeds_report = json.loads(seeds_path.read_text()) if seeds_path.exists() else None
        # The prior-art reports' keys, then kjit's own: rfc names the checks'
        # definition (the prior-art reports'), rl_kernel_commit is theirs.
        report = {"kind": "kjit_conformance",
                  "rfc": (seeds_report or {}).get("rfc", "RL-Align/RL-Kernel#420"), "op": op,
                  "rl_kernel_commit": None, "kjit_commit": commit,
                  "tracked_tree_dirty": None if dirty is None else bool(dirty),
                  "environment": env, "quick": args.quick, "results": {"plain": results},
                  "input_seeds": {"kjit": list(SEEDS), "peers": list(SEEDS[:args.peer_seeds])},
                  "copy_floor": _floor(spec, args.quick)}
        (args.out / f"{op}.json").write_text(json.dumps(report, indent=2) + "\n")
        print_table(op, report, seeds_report)
        kj = next(c for c in candidates_of_op if c["name"] == "kjit")
        failed += kjit_verdict(op, report, [k for k in report["copy_floor"] if k != "bandwidth_TBps"],
                               list(kj["views"]) if kj["grads"] else None)
    print(f"\nreports in {args.out} ({time.time() - t_all:.0f} s)")
    for line in failed:
        print(f"FAIL: kjit: {line}")
    if not failed:
        print(f"kjit: every contract held on {len(ops)} op(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
