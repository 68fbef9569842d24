#!/usr/bin/env python3
"""Where norm_modulate's training pair spends its time, CTA by CTA.

Copies kernel_templates/ to a scratch directory with time stamps added to
the forward kernels and the backward's main kernel (%globaltimer at each
CTA's start and end, clock64 after each row, at each table-row change and
around the segment flushes), runs one training pair through the Python
binding with KJIT_TEMPLATE_DIR pointing there, and summarises: the spread
of the CTAs' start and end times, the first row's wait, the time per row,
the flushes. Each CTA keeps its stamps in a device array; the grid's last
CTA prints them all, so printf runs after every other CTA has finished.
The stamps cost a few registers: times are close to, not equal to, the
plain kernels' (compare bench_ops in the same run).

Usage:
  python3 bench/timeline.py --patch DIR       write the stamped templates (no GPU;
                                              --templates DIR: others than this tree's)
  python3 bench/timeline.py [--rows N]...     run and summarise (GPU, torch)
  python3 bench/timeline.py --summarise FILE --rows N   summarise a saved run
                                              (--save DIR keeps each run's output)
bench/run_device.sh timeline runs it (KJIT_TIMELINE_ROWS, default 4097 32768).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAXCTA = 4096  # stamped CTAs per kernel (more are not recorded)
NROW = 20      # row stamps kept per backward CTA

HELPERS = r'''
// ---- timeline stamps (bench/timeline.py) ----
__device__ long long kjit_tl_bwd[%(M)d][40];
__device__ unsigned int kjit_tl_bwd_n;
__device__ long long kjit_tl_fwd[%(M)d][4];
__device__ unsigned int kjit_tl_fwd_n;
__device__ __forceinline__ long long tl_gt()
{
    long long v;
    asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(v));
    return v;
}
__device__ __forceinline__ long long tl_smid()
{
    unsigned int v;
    asm volatile("mov.u32 %%0, %%%%smid;" : "=r"(v));
    return v;
}
// The grid's last CTA prints every CTA's stamps (tag, then n values each).
template <int N>
__device__ __forceinline__ void tl_done(long long (*a)[N], unsigned int *cnt, const char *tag)
{
    __syncthreads();
    if (threadIdx.x != 0) return;
    __threadfence();
    const unsigned int g = gridDim.x < %(M)d ? gridDim.x : %(M)d;
    if (atomicAdd(cnt, 1u) + 1 != gridDim.x) return;
    __threadfence();
    for (unsigned int i = 0; i < g; ++i) {
        if (a[i][0] < 0) continue;
        printf("%%s", tag);
        for (int j = 0; j < N; ++j) printf(" %%lld", a[i][j]);
        printf("\n");
    }
    *cnt = 0;
}
''' % {"M": MAXCTA}


def sub(s, old, new, what):
    if s.count(old) != 1:
        sys.exit(f"timeline.py: the templates changed: {what} not found once in adaln.cuh")
    return s.replace(old, new)


def patch(dst, src=os.path.join(ROOT, "kernel_templates")):
    """Copy the templates in src to dst with the stamps added; dst is written
    only once every stamp has found its place."""
    try:
        s = open(os.path.join(src, "adaln.cuh")).read()
    except OSError as e:
        sys.exit(f"timeline.py: --templates: {e.strerror}: {os.path.join(src, 'adaln.cuh')}")
    s = sub(s, "#include \"partition.cuh\"\n", "#include \"partition.cuh\"\n" + HELPERS, "the includes")
    # backward: per-CTA state
    s = sub(s, "    const int t = threadIdx.x;\n    const int tw = t >> 5;\n    int par = 0;\n    const long long c = blockIdx.x;\n",
            "    const int t = threadIdx.x;\n    const int tw = t >> 5;\n    int par = 0;\n    const long long c = blockIdx.x;\n"
            "    long long tl0 = tl_gt(), tlc0 = clock64(), tlfirst = 0, tlpf = 0;\n"
            "    int tln = 0, tlns = 0, tlr[%d], tls[2][3] = {{-1, 0, 0}, {-1, 0, 0}};\n" % NROW, "bwd_fast start")
    s = sub(s, "        const long long r = rix[s];\n        if (r != sg.r) {\n            if (sg.r >= 0) flush();\n            begin(r);\n        }\n",
            "        const long long r = rix[s];\n        if (r != sg.r) {\n            const long long q0 = clock64();\n"
            "            if (sg.r >= 0) flush();\n            const long long q1 = clock64();\n            begin(r);\n"
            "            if (tlns < 2) tls[tlns][0] = tln, tls[tlns][1] = q1 - q0, tls[tlns][2] = clock64() - q1;\n"
            "            ++tlns;\n        }\n", "bwd segment change")
    s = sub(s, "                cp_wait<PF>();\n                process(s);\n            }\n        }\n    }\n    flush();\n}\n",
            "                cp_wait<PF>();\n                if (tln == 0) tlfirst = clock64() - tlc0;\n                process(s);\n"
            "                if (tln < %d) tlr[tln] = clock64() - tlc0;\n                ++tln;\n            }\n        }\n    }\n"
            "    tlpf = clock64() - tlc0;\n    flush();\n    __syncthreads();\n    if (t == 0 && c < %d) {\n"
            "        long long *o = kjit_tl_bwd[c];\n        o[0] = c, o[1] = tl_smid(), o[2] = tl0, o[3] = tl_gt(), o[4] = tlfirst;\n"
            "        o[5] = tlpf, o[6] = clock64() - tlc0, o[7] = tln, o[8] = tlns;\n"
            "        for (int i = 0; i < 2; ++i) o[9 + 3 * i] = tls[i][0], o[10 + 3 * i] = tls[i][1], o[11 + 3 * i] = tls[i][2];\n"
            "        for (int i = 0; i < %d; ++i) o[15 + i] = i < tln ? tlr[i] : 0;\n    }\n}\n" % (NROW, MAXCTA, NROW),
            "bwd_fast end")
    s = sub(s, "    kjit::grid_dep_sync();\n    static_assert(MODE >= 1 && MODE <= 3, \"MODE: 1 norm_modulate, 2 gated_residual, 3 fused\");\n",
            "    kjit::grid_dep_sync();\n    if (threadIdx.x == 0 && blockIdx.x < %d) kjit_tl_bwd[blockIdx.x][0] = -1;\n"
            "    static_assert(MODE >= 1 && MODE <= 3, \"MODE: 1 norm_modulate, 2 gated_residual, 3 fused\");\n" % MAXCTA,
            "bwd kernel start")
    s = sub(s, "        kjit::adaln::bwd_fast<MODE, TA, TP, TI, H, TPR, PF, ACCS>(p);\n}\n",
            "        kjit::adaln::bwd_fast<MODE, TA, TP, TI, H, TPR, PF, ACCS>(p);\n    tl_done<40>(kjit_tl_bwd, &kjit_tl_bwd_n, \"BWD\");\n}\n",
            "bwd kernel end")
    # forwards: start and end of each CTA
    stamp = ("    const long long tl0 = tl_gt();\n")
    done = ("    __syncthreads();\n    if (threadIdx.x == 0 && blockIdx.x < %d) {\n        long long *o = kjit_tl_fwd[blockIdx.x];\n"
            "        o[0] = blockIdx.x, o[1] = tl_smid(), o[2] = tl0, o[3] = tl_gt();\n    }\n"
            "    tl_done<4>(kjit_tl_fwd, &kjit_tl_fwd_n, \"FWD\");\n}\n" % MAXCTA)
    s = sub(s, "kjit_adaln_fwd(const __grid_constant__ kjit_adaln_fwd_params p)\n{\n    kjit::grid_dep_sync();\n",
            "kjit_adaln_fwd(const __grid_constant__ kjit_adaln_fwd_params p)\n{\n    kjit::grid_dep_sync();\n" + stamp, "fwd start")
    s = sub(s, "    kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x, gridDim.x);\n}\n",
            "    kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x, gridDim.x);\n" + done, "fwd end")
    s = sub(s, "kjit_adaln_fwd_train(const __grid_constant__ kjit_adaln_fwd_params p)\n{\n    kjit::grid_dep_sync();\n",
            "kjit_adaln_fwd_train(const __grid_constant__ kjit_adaln_fwd_params p)\n{\n    kjit::grid_dep_sync();\n" + stamp,
            "fwd_train start")
    s = sub(s, "        kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x - 1, gridDim.x - 1);\n}\n",
            "        kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x - 1, gridDim.x - 1);\n" + done,
            "fwd_train end")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    open(os.path.join(dst, "adaln.cuh"), "w").write(s)


def drive(rows, steps):
    """One norm_modulate training pair per step (bf16, hidden 5376, R = 9)."""
    import torch
    import kjit
    H, R = 5376, 9
    g = torch.Generator(device="cuda").manual_seed(rows)
    bf = torch.bfloat16
    x = torch.randn(rows, H, device="cuda", dtype=bf, generator=g).requires_grad_()
    w = torch.randn(H, device="cuda", dtype=bf, generator=g).requires_grad_()
    sh = torch.randn(R, H, device="cuda", dtype=bf, generator=g).requires_grad_()
    sc = torch.randn(R, H, device="cuda", dtype=bf, generator=g).requires_grad_()
    idx = torch.randint(0, R, (rows,), device="cuda", dtype=torch.int32, generator=g)
    dout = torch.randn(rows, H, device="cuda", dtype=bf, generator=g)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # > the L2
    for i in range(steps):
        flush.zero_()
        torch.cuda.synchronize()
        print(f"STEP {i}", flush=True)
        kjit.norm_modulate(x, w, sh, sc, idx).backward(dout)
        torch.cuda.synchronize()
        sys.stdout.flush()


def pct(a, ps=(0, 10, 50, 90, 100)):
    a = sorted(a)
    return " ".join(f"p{p} {a[min(len(a) - 1, int(p / 100 * len(a)))]:.2f}" for p in ps) if a else "-"


def summarise(text, rows):
    lines = text.split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith("STEP")]
    if not starts:
        sys.exit("timeline.py: no STEP line in the driver's output")
    last = lines[starts[-1]:]
    bwd = [[int(v) for v in l.split()[1:]] for l in last if l.startswith("BWD")]
    fwd = [[int(v) for v in l.split()[1:]] for l in last if l.startswith("FWD")]
    if not bwd:
        sys.exit("timeline.py: no backward stamps (not the fast path?)")
    ns = statistics.median((b[3] - b[2]) / b[6] for b in bwd if b[6] > 0)  # ns per clock
    us = ns / 1e3
    print(f"== rows {rows}: backward main kernel, {len(bwd)} CTAs, SM clock {1 / ns:.2f} GHz")
    if fwd:
        f0, f1 = min(f[2] for f in fwd), max(f[3] for f in fwd)
        print(f"forward, {len(fwd)} CTAs: span {(f1 - f0) / 1e3:.2f} us; CTA ends (us from the first start): "
              f"{pct([(f[3] - f0) / 1e3 for f in fwd])}")
    t0, t1 = min(b[2] for b in bwd), max(b[3] for b in bwd)
    print(f"backward span {(t1 - t0) / 1e3:.2f} us")
    print(f"  CTA starts (us):               {pct([(b[2] - t0) / 1e3 for b in bwd])}")
    print(f"  CTA ends (us):                 {pct([(b[3] - t0) / 1e3 for b in bwd])}")
    print(f"  first row's data in (us):      {pct([b[4] * us for b in bwd])}")
    print(f"  first row done (us):           {pct([b[15] * us for b in bwd if b[7] > 0])}")
    per = []
    for b in bwd:
        r = b[15:15 + min(b[7], NROW)]
        per += [(r[i] - r[i - 1]) * us for i in range(1, len(r))]
    print(f"  per row (us):                  {pct(per)}")
    print(f"  last flush (us):               {pct([(b[6] - b[5]) * us for b in bwd])}")
    print(f"  first table-row start (us):    {pct([b[11] * us for b in bwd if b[8] >= 1])}")
    mid = [b for b in bwd if b[8] >= 2]
    if mid:
        print(f"  CTAs with a table-row change after their first row: {len(mid)}; there, flush "
              f"{pct([b[13] * us for b in mid], (0, 50, 100))}, start {pct([b[14] * us for b in mid], (0, 50, 100))}; "
              f"their ends {pct([(b[3] - t0) / 1e3 for b in mid], (0, 50, 100))}")
    n = Counter(b[1] for b in bwd)
    for k in sorted(set(n.values())):
        sel = [b for b in bwd if n[b[1]] == k and b[7] > 1]
        if sel:
            print(f"  SMs with {k} CTA(s): {len(sel) // k}, per row (us) "
                  f"{pct([(b[15 + min(b[7], NROW) - 1] - b[15]) * us / (min(b[7], NROW) - 1) for b in sel], (0, 50, 100))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patch", metavar="DIR", help="only write the stamped templates to DIR")
    ap.add_argument("--templates", metavar="DIR", default=os.path.join(ROOT, "kernel_templates"),
                    help="the templates to stamp (default: this tree's kernel_templates)")
    ap.add_argument("--rows", type=int, nargs="+", default=[4097])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--summarise", metavar="FILE", help="summarise a saved run of --rows (one value)")
    ap.add_argument("--save", metavar="DIR", help="keep each run's raw output in DIR/timeline-ROWS.txt")
    ap.add_argument("--drive", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.patch:
        patch(a.patch, a.templates)
        return
    if a.summarise:
        if len(a.rows) != 1:
            sys.exit("timeline.py: --summarise takes one --rows value")
        try:
            text = open(a.summarise).read()
        except OSError as e:
            sys.exit(f"timeline.py: --summarise: {e.strerror}: {a.summarise}")
        summarise(text, a.rows[0])
        return
    if a.drive:
        drive(a.drive, a.steps)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tpl = os.path.join(tmp, "templates")
        patch(tpl, a.templates)
        env = dict(os.environ, KJIT_TEMPLATE_DIR=tpl)
        for rows in a.rows:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--drive", str(rows), "--steps", str(a.steps)],
                               env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stdout[-2000:] + r.stderr[-4000:])
                sys.exit(f"timeline.py: the driver failed at {rows} rows (rc {r.returncode})")
            if a.save:
                with open(os.path.join(a.save, f"timeline-{rows}.txt"), "w") as f:
                    f.write(r.stdout)
            summarise(r.stdout, rows)


if __name__ == "__main__":
    main()
