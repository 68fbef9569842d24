"""GPU tests of kjit's torch ops: accuracy vs float64 (SPEC.md's bounds),
gradients, chunk(6) views, dtypes, odd shapes, bitwise batch invariance and
repeatable parameter gradients, streams, torch.library.opcheck,
torch.compile(fullgraph=True) and CUDA-graph replay, argument errors.

    KJIT_LIBRARY=build-gpu/libkjit.so python3 tests/python/test_torch_gpu.py
"""

import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))

import torch  # noqa: E402

import kjit  # noqa: E402
from kjit import reference as ref  # noqa: E402

CUDA = torch.cuda.is_available()
if not CUDA and os.environ.get("KJIT_REQUIRE_GPU", "0") not in ("", "0"):
    sys.exit("test_torch_gpu: no CUDA device, and KJIT_REQUIRE_GPU is set: failed")
DEV = "cuda"
# SPEC.md contract 4, per output dtype.
TOL = {torch.float32: 1e-6, torch.bfloat16: 4e-3, torch.float16: 1e-3}


# Fresh inputs every run: every generator's seed is offset by a base drawn
# per run and printed; KJIT_TEST_SEED=<base> replays a run (as the C tests).
def _seed_base():
    text = os.environ.get("KJIT_TEST_SEED", "").strip()
    if not text:
        return int.from_bytes(os.urandom(4), "little")
    try:
        value = int(text, 0)  # 0x... as the C tests take it
    except ValueError:
        value = int(text, 10)  # leading zeros
    return value % (2 ** 63)  # every generator's seed, base + a small offset, fits manual_seed


SEED_BASE = _seed_base()
print(f"test_torch_gpu: seed base {SEED_BASE} (KJIT_TEST_SEED={SEED_BASE} replays this run)", file=sys.stderr)


def gen(seed):
    return torch.Generator(device=DEV).manual_seed(SEED_BASE + seed)


def randn(seed, *shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device=DEV, generator=gen(seed)) * scale).to(dtype)


def make(n, h, r=9, act=torch.bfloat16, param=torch.bfloat16, idx_dtype=torch.int64, seed=0,
         weight=True):
    """Inputs of one block: rows, an (R, 6H) table used through chunk(6), a weight."""
    table = randn(seed + 1, r, 6 * h, dtype=param, scale=0.1).requires_grad_()
    return dict(
        x=randn(seed + 2, n, h, dtype=act, scale=2.0).requires_grad_(),
        y=randn(seed + 3, n, h, dtype=act).requires_grad_(),
        table=table,
        weight=((0.5 + torch.rand(h, device=DEV, generator=gen(seed + 4))).to(param)
                .requires_grad_() if weight else None),
        index=torch.randint(0, r, (n,), device=DEV, generator=gen(seed + 5)).to(idx_dtype),
    )


# Each case: a kjit call and its reference over (x, y, table chunks, weight, index).
def case_norm(m, ch, lib):
    return lib.norm_modulate(m["x"], m["weight"], ch[0], ch[1], m["index"])


def case_gated(m, ch, lib):
    return lib.gated_residual(m["x"], m["y"], ch[2], m["index"])


def case_fused(m, ch, lib):
    kw = {"h_dtype": m["h_dtype"]} if "h_dtype" in m else {}
    return list(lib.gated_residual_norm_modulate(m["x"], m["y"], ch[2], m["weight"], ch[0], ch[1],
                                                 m["index"], **kw))


def case_gather(m, ch, lib):
    return lib.adaln_row_gather(list(ch), m["index"])


CASES = {"norm_modulate": case_norm, "gated_residual": case_gated,
         "gated_residual_norm_modulate": case_fused, "adaln_row_gather": case_gather}


def run(case, m, lib=kjit, up_dtypes=None, rows=None):
    """Forward and the gradients of x, y, table, weight under fixed upstream
    grads (rounded to up_dtypes, default the outputs' own, then cast). rows:
    m holds these rows of a larger batch; the upstream grads are that batch's
    rows too, so a row sees the same upstream grad alone and in its batch."""
    ch = m["table"].chunk(6, 1)
    outs = case(m, ch, lib)
    outs = outs if isinstance(outs, list) else [outs]
    leaves = [m["x"], m["y"], m["table"], m["weight"]]
    used = [t if (t is not None and t.requires_grad) else None for t in leaves]
    up_dtypes = up_dtypes or [o.dtype for o in outs]
    full = None if rows is None else (m["full_rows"],)
    ups = []
    for k, (o, d) in enumerate(zip(outs, up_dtypes)):
        shape = o.shape if rows is None else (full[0],) + tuple(o.shape[1:])
        u = torch.randn(shape, device=DEV, generator=gen(7 + k)).to(d).to(o.dtype)
        ups.append(u if rows is None else u[rows])
    live = [t for t in used if t is not None]
    got = iter(torch.autograd.grad(outs, live, ups, allow_unused=True))
    grads = [None if t is None else next(got) for t in used]
    return [o.detach() for o in outs], grads


def run_double(case, m, up_dtypes):
    """The float64 reference on the same inputs and upstream grads."""
    d = {k: (v.detach().double().requires_grad_(v.requires_grad)
             if v is not None and v.is_floating_point() else v) for k, v in m.items()}
    d["h_dtype"] = m["x"].dtype  # the fused op's h, rounded as kjit returns it
    return run(case, d, ref, up_dtypes)


@unittest.skipUnless(CUDA, "no CUDA device")
class Accuracy(unittest.TestCase):
    def check(self, name, n, h, act=torch.bfloat16, param=torch.bfloat16, idx=torch.int64,
              weight=True):
        m = make(n, h, act=act, param=param, idx_dtype=idx, weight=weight)
        outs, grads = run(CASES[name], m)
        routs, rgrads = run_double(CASES[name], m, [o.dtype for o in outs])
        label = f"{name} n={n} h={h} {act} {param} {idx} weight={weight}"
        for o, r in zip(outs, routs):
            self.assertEqual(o.dtype, act if name != "adaln_row_gather" else param, label)
            self.assertTrue(o.is_contiguous(), label)
            self.assertLessEqual(ref.worst_rel_err(o, r), TOL[o.dtype], label)
        for leaf, g, r in zip(("x", "y", "table", "weight"), grads, rgrads):
            self.assertEqual(g is None, r is None, f"{label} d{leaf}")
            if g is not None:
                self.assertLessEqual(ref.worst_rel_err(g, r), TOL[g.dtype], f"{label} d{leaf}")

    def test_h3_shapes(self):
        for name in CASES:
            self.check(name, 4097, 5376)

    def test_dtypes_and_odd_shapes(self):
        for name in CASES:
            for act, param in ((torch.float32, torch.float32), (torch.float16, torch.bfloat16),
                               (torch.bfloat16, torch.float32)):
                if name == "adaln_row_gather" and act != param:
                    continue
                self.check(name, 33, 256, act, param, torch.int32)
            self.check(name, 1, 77)      # odd hidden: the scalar path
            self.check(name, 300, 1000, weight=False)

    def test_zero_rows(self):
        m = make(0, 64)
        out = kjit.norm_modulate(m["x"], m["weight"], *m["table"].chunk(6, 1)[:2], m["index"])
        self.assertEqual(tuple(out.shape), (0, 64))
        out.sum().backward()
        self.assertEqual(m["table"].grad.abs().sum().item(), 0.0)

    def test_sinusoid(self):
        t = torch.rand(2048, device=DEV, generator=gen(1))
        for ts, kw in ((t * 1000, {}),
                       (t * 1000, dict(flip_sin_to_cos=True, downscale_freq_shift=0.0)),
                       (t, dict(scale=1000.0, max_period=5000.0))):
            for dim in (256, 255):
                got = kjit.timestep_sinusoid(ts, dim, **kw)
                want = ref.timestep_sinusoid(ts.double(), dim, **kw)
                self.assertLessEqual(ref.worst_rel_err(got, want), 2e-7, f"{kw} dim={dim}")
        self.assertEqual(kjit.timestep_sinusoid(t, 256, out_dtype=torch.bfloat16).dtype,
                         torch.bfloat16)


@unittest.skipUnless(CUDA, "no CUDA device")
class Determinism(unittest.TestCase):
    def test_batch_invariance_and_repeatable_params(self):
        for name, case in CASES.items():
            m = make(257, 5376)
            full_o, full_g = run(case, m)
            again_o, again_g = run(case, m)
            for a, b in zip(full_g + full_o, again_g + again_o):
                if a is not None:
                    self.assertTrue(ref.same_bits(a, b), f"{name}: not repeatable")
            for rows in ([0], [256], [3, 100, 7], list(range(256, -1, -1))):
                idx = torch.tensor(rows, device=DEV)
                sub = dict(m, x=m["x"].detach()[idx].requires_grad_(),
                           y=m["y"].detach()[idx].requires_grad_(), index=m["index"][idx],
                           full_rows=m["x"].shape[0])
                sub_o, sub_g = run(case, sub, rows=idx)
                for a, b in zip(sub_o, full_o):
                    self.assertTrue(ref.same_bits(a, b[idx]), f"{name}: rows {rows[:3]} forward")
                for a, b in zip(sub_g[:2], full_g[:2]):   # the row gradients dx, dy
                    if a is not None:
                        self.assertTrue(ref.same_bits(a, b[idx]), f"{name}: rows {rows[:3]} grad")

    def test_side_stream(self):
        m = make(1024, 5376)
        want, _ = run(case_fused, m)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            got, _ = run(case_fused, m)
        s.synchronize()
        for a, b in zip(got, want):
            self.assertTrue(ref.same_bits(a, b))


@unittest.skipUnless(CUDA, "no CUDA device")
class EagerPaths(unittest.TestCase):
    """The two eager paths (KJIT_EAGER): the torch.library ops, and the
    torch.autograd.Function (the implementation itself when nothing needs a
    gradient) launch the same kernels with the same arguments, so outputs and
    gradients are bitwise the same, on any stream."""

    def setUp(self):
        from kjit import ops
        self.ops = ops
        self.addCleanup(setattr, ops, "_EAGER", ops._EAGER)

    def both(self, fn):
        got = {}
        for mode in ("custom_op", "function"):
            self.ops._EAGER = mode
            got[mode] = fn()
        return got["custom_op"], got["function"]

    def assert_same(self, a, b, label):
        for u, v in zip(a, b):
            self.assertEqual(u is None, v is None, label)
            if u is not None:
                self.assertTrue(ref.same_bits(u, v), label)

    def test_double_backward_raises(self):
        # kjit's gradients have no autograd history: a second derivative
        # through them must raise on both paths, not drop kjit's part.
        for mode in ("custom_op", "function"):
            self.ops._EAGER = mode
            for name, case in CASES.items():
                m = make(33, 256)
                ch = m["table"].chunk(6, 1)
                outs = case(m, ch, kjit)
                out = outs[-1] if isinstance(outs, list) else outs
                # A gradient that kjit's backward computes: the gather's is
                # the table's, gated_residual's is dy (its dres is dout
                # itself, which autograd differentiates), the norms' is dx.
                leaf = {"adaln_row_gather": m["table"], "gated_residual": m["y"]}.get(name, m["x"])
                with self.assertRaises(RuntimeError, msg=f"{mode} {name}"):
                    g = torch.autograd.grad((out.float() * m["x"].float()).sum(), [leaf],
                                            create_graph=True)[0]
                    (g.float() ** 2).sum().backward()

    def test_same_bits(self):
        for name, case in CASES.items():
            for weight in ("grad", "frozen", None):
                m = make(1027, 5376, weight=weight is not None)
                if weight == "frozen":
                    m["weight"] = m["weight"].detach()
                label = f"{name} weight {weight}"
                (o1, g1), (o2, g2) = self.both(lambda: run(case, m))
                self.assert_same(o1 + g1, o2 + g2, label)

                def forward():
                    with torch.no_grad():
                        outs = case(m, m["table"].chunk(6, 1), kjit)
                    return outs if isinstance(outs, list) else [outs]
                f1, f2 = self.both(forward)
                self.assert_same(f1, o1, f"{label} custom_op no_grad")
                self.assert_same(f2, o1, f"{label} function no_grad")

    def test_side_stream(self):
        m = make(1024, 5376)
        want, want_g = run(case_fused, m)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            (o1, g1), (o2, g2) = self.both(lambda: run(case_fused, m))
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        self.assert_same(o1 + g1, want + want_g, "custom_op on a side stream")
        self.assert_same(o2 + g2, want + want_g, "function on a side stream")


@unittest.skipUnless(CUDA, "no CUDA device")
class TorchIntegration(unittest.TestCase):
    def test_opcheck(self):
        m = make(64, 256)
        x, y, table, w, idx = m["x"], m["y"], m["table"], m["weight"], m["index"]
        sh, sc, g = table.chunk(6, 1)[:3]
        t = torch.rand(8, device=DEV)
        for op, args in (
            (torch.ops.kjit.norm_modulate.default, (x, w, sh, sc, idx, 1e-5)),
            (torch.ops.kjit.norm_modulate.default, (x, None, sh, sc, idx, 1e-6)),
            (torch.ops.kjit.gated_residual.default, (x, y, g, idx)),
            (torch.ops.kjit.gated_residual_norm_modulate.default, (x, y, g, w, sh, sc, idx, 1e-5)),
            (torch.ops.kjit.adaln_row_gather.default, (list(table.chunk(6, 1)), idx)),
            (torch.ops.kjit.timestep_sinusoid.default,
             (t, 256, True, 0.0, 1.0, 10000.0, torch.float32)),
        ):
            torch.library.opcheck(op, args)

    def block(self, x, y, table, w, idx):
        sh1, sc1, g1, sh2, sc2, g2 = table.chunk(6, 1)
        a = kjit.norm_modulate(x, w, sh1, sc1, idx)
        h, b = kjit.gated_residual_norm_modulate(x, a * y, g1, w, sh2, sc2, idx)
        return kjit.gated_residual(h, b, g2, idx)

    def test_compile_fullgraph(self):
        torch._dynamo.reset()
        m = make(1000, 1024)
        compiled = torch.compile(self.block, fullgraph=True)
        args = (m["x"], m["y"], m["table"], m["weight"], m["index"])
        want = self.block(*args)
        gw = torch.autograd.grad(want.sum(), [m["x"], m["table"], m["weight"]])
        got = compiled(*args)
        gg = torch.autograd.grad(got.sum(), [m["x"], m["table"], m["weight"]])
        # Inductor may fuse the elementwise a * y differently: within one rounding.
        self.assertLessEqual(ref.worst_rel_err(got, want), 4e-3)
        for a, b in zip(gg, gw):
            self.assertLessEqual(ref.worst_rel_err(a, b), 1e-2)

    def test_compile_fullgraph_function_path(self):
        # KJIT_EAGER=function: dynamo still traces the torch.library ops.
        from kjit import ops
        self.addCleanup(setattr, ops, "_EAGER", ops._EAGER)
        ops._EAGER = "function"
        self.test_compile_fullgraph()

    def test_compiled_autograd(self):
        # A backward traced by compiled autograd (it hands the backwards fake
        # gradients) goes through the torch.library backward ops in both
        # eager modes: the Function path's backward called the ctypes path
        # and broke the graph 81 times on these four ops.
        try:
            from torch._dynamo import compiled_autograd
            from torch._dynamo.utils import counters
            enable = compiled_autograd._enable
        except (ImportError, AttributeError):
            self.skipTest("no compiled autograd in this torch")
        from kjit import ops
        self.addCleanup(setattr, ops, "_EAGER", ops._EAGER)
        m = make(300, 1024)
        leaves = [m["x"], m["y"], m["table"], m["weight"]]

        def loss():
            out = self.block(m["x"], m["y"], m["table"], m["weight"], m["index"])
            g = kjit.adaln_row_gather(list(m["table"].chunk(6, 1)), m["index"])[3]
            return out.float().square().sum() + g.float().square().sum()

        for mode in ("function", "custom_op"):
            ops._EAGER = mode
            for t in leaves:
                t.grad = None
            loss().backward()
            want = [t.grad.clone() for t in leaves]
            for t in leaves:
                t.grad = None
            torch._dynamo.reset()
            counters.clear()
            l = loss()
            with enable(torch.compile(backend="aot_eager", fullgraph=True)):
                l.backward()
            self.assertEqual(sum(counters["graph_break"].values()), 0, (mode, dict(counters["graph_break"])))
            for t, w in zip(leaves, want):
                # The weight's three gradients may be added in another order.
                self.assertLessEqual(ref.worst_rel_err(t.grad, w), 1e-2, mode)
        torch._dynamo.reset()

    def test_cuda_graph_replay(self):
        m = make(512, 5376)
        args = [m["x"].detach(), m["y"].detach(), m["table"].detach(), m["weight"].detach(),
                m["index"]]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):   # load the kernels before capture
                self.block(*args)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.block(*args)
        fresh = make(512, 5376, seed=50)
        for dst, key in zip(args, ("x", "y", "table", "weight", "index")):
            dst.copy_(fresh[key].detach())
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(ref.same_bits(static_out, self.block(*args)))

    def test_compile_reduce_overhead(self):
        torch._dynamo.reset()
        m = make(256, 1024)
        args = (m["x"].detach(), m["y"].detach(), m["table"].detach(), m["weight"].detach(),
                m["index"])
        fn = torch.compile(self.block, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            fn(*args)
        # New values in the same tensors before the last call: a replay that
        # left stale outputs would fail.
        fresh = make(256, 1024, seed=51)
        for dst, key in zip(args, ("x", "y", "table", "weight", "index")):
            dst.copy_(fresh[key].detach())
        out = fn(*args).clone()
        self.assertLessEqual(ref.worst_rel_err(out, self.block(*args)), 4e-3)

    def test_errors_name_the_argument(self):
        m = make(16, 64)
        x, y, table, w, idx = (m[k].detach() if m[k] is not None and m[k].is_floating_point()
                               else m[k] for k in ("x", "y", "table", "weight", "index"))
        sh, sc, g = table.chunk(6, 1)[:3]
        cases = [
            (TypeError, "x has dtype torch.float64",
             lambda: kjit.norm_modulate(x.double(), w, sh, sc, idx)),
            (TypeError, "scale has dtype torch.float32 but shift has",
             lambda: kjit.norm_modulate(x, None, sh, sc.float(), idx)),
            (TypeError, "index has dtype torch.int16",
             lambda: kjit.norm_modulate(x, w, sh, sc, idx.short())),
            (ValueError, "x has column stride",
             lambda: kjit.norm_modulate(x.t().contiguous().t(), w, sh, sc, idx)),
            (ValueError, "x must be 2-D",
             lambda: kjit.norm_modulate(x[None], w, sh, sc, idx)),
            (ValueError, "y has 8 rows, expected 16",
             lambda: kjit.gated_residual(x, y[:8], g, idx)),
            (ValueError, "index must be 1-D with one entry per row",
             lambda: kjit.gated_residual(x, y, g, idx[:5])),
            (ValueError, "shift has hidden size 32",
             lambda: kjit.norm_modulate(x, w, sh[:, :32], sc, idx)),
            (ValueError, "weight must be a contiguous",
             lambda: kjit.norm_modulate(x, w[::2], sh, sc, idx)),
            (ValueError, "row stride 0",
             lambda: kjit.gated_residual(x, y[:1].expand(16, 64), g, idx)),
            (ValueError, "t requires grad",
             lambda: kjit.timestep_sinusoid(torch.rand(4, device=DEV, requires_grad=True), 8)),
            (ValueError, "downscale_freq_shift",
             lambda: kjit.timestep_sinusoid(torch.rand(4, device=DEV), 2)),
        ]
        for exc, text, call in cases:
            with self.assertRaisesRegex(exc, text):
                call()
        # Under no_grad a t that requires grad builds no graph: taken.
        t = torch.rand(4, device=DEV, requires_grad=True)
        with torch.no_grad():
            self.assertTrue(ref.same_bits(kjit.timestep_sinusoid(t, 8), kjit.timestep_sinusoid(t.detach(), 8)))

    def test_registered_ops_check(self):
        """torch.ops.kjit.* called directly (as an exported program or a
        compiled graph fed other inputs calls them) refuse what the public
        functions refuse: before, a column-strided view was read as if
        contiguous and a CPU index faulted the context."""
        m = make(16, 64)
        x, y, table, w, idx = (m[k].detach() if m[k] is not None and m[k].is_floating_point()
                               else m[k] for k in ("x", "y", "table", "weight", "index"))
        sh, sc, g = table.chunk(6, 1)[:3]
        wide = torch.randn(16, 128, device=DEV, dtype=x.dtype)[:, ::2]
        ops = torch.ops.kjit
        cases = [
            (ValueError, "res has column stride", lambda: ops.gated_residual(wide, y, g, idx)),
            (ValueError, "index is on cpu", lambda: ops.gated_residual(x, y, g, idx.cpu())),
            (TypeError, "index has dtype torch.int16", lambda: ops.norm_modulate(x, w, sh, sc, idx.short(), 1e-5)),
            (ValueError, "y has 8 rows", lambda: ops.gated_residual_norm_modulate(x, y[:8], g, w, sh, sc, idx, 1e-5)),
            (ValueError, "eps", lambda: ops.norm_modulate(x, w, sh, sc, idx, -1.0)),
            (ValueError, "tables\\[1\\] has hidden size", lambda: ops.adaln_row_gather([sh, sc[:, :8]], idx)),
            (ValueError, "t must be a contiguous", lambda: ops.timestep_sinusoid(
                torch.rand(8, device=DEV)[::2], 8, False, 1.0, 1.0, 10000.0, torch.float32)),
        ]
        # The backward ops too (before, none of their arguments was checked:
        # a CPU index faulted, a dout of another dtype was read as x's).
        dout = torch.randn_like(x)
        dg = torch.randn(16, 64, device=DEV, dtype=table.dtype)
        cases += [
            (ValueError, "norm_modulate_bwd: index is on cpu",
             lambda: ops.norm_modulate_bwd(dout, x, w, sc, idx.cpu(), 1e-5, True)),
            (ValueError, "norm_modulate_bwd: dout has column stride",
             lambda: ops.norm_modulate_bwd(wide, x, w, sc, idx, 1e-5, True)),
            (TypeError, "norm_modulate_bwd: dout has dtype torch.float32 but x has",
             lambda: ops.norm_modulate_bwd(dout.float(), x, w, sc, idx, 1e-5, True)),
            (ValueError, "norm_modulate_bwd: need_dweight is True but weight is None",
             lambda: ops.norm_modulate_bwd(dout, x, None, sc, idx, 1e-5, True)),
            (ValueError, "gated_residual_bwd: dout has 8 rows, expected 16",
             lambda: ops.gated_residual_bwd(dout[:8], y, g, idx)),
            (ValueError, "gated_residual_norm_modulate_bwd: eps",
             lambda: ops.gated_residual_norm_modulate_bwd(None, dout, x, y, g, w, sc, idx, -1.0, True)),
            (ValueError, "gated_residual_norm_modulate_bwd: dh is on cpu",
             lambda: ops.gated_residual_norm_modulate_bwd(dout.cpu(), dout, x, y, g, w, sc, idx, 1e-5, True)),
            (ValueError, "adaln_row_gather_bwd: index must be 1-D with one entry per row",
             lambda: ops.adaln_row_gather_bwd([dg], idx[:8], 9)),
            (ValueError, "adaln_row_gather_bwd: rows 0",
             lambda: ops.adaln_row_gather_bwd([dg], idx, 0)),
        ]
        for exc, text, call in cases:
            with self.subTest(text=text), self.assertRaisesRegex(exc, text):
                call()
        # What they accept gives the public functions' bits.
        self.assertTrue(ref.same_bits(ops.gated_residual(x, y, g, idx), kjit.gated_residual(x, y, g, idx)))
        for got, want in zip(ops.norm_modulate_bwd(dout, x, w, sc, idx, 1e-5, True),
                             kjit.ops._norm_modulate_bwd_impl(dout, x, w, sc, idx, 1e-5, True)):
            self.assertTrue(ref.same_bits(got, want))

    def test_argument_edges(self):
        # eps beyond float32: refused in Python, also with no rows (was inf in C).
        m = make(8, 64)
        x, table, idx = m["x"].detach(), m["table"].detach(), m["index"]
        sh, sc = table.chunk(6, 1)[:2]
        for rows in (0, 8):
            with self.assertRaisesRegex(ValueError, "eps"):
                kjit.norm_modulate(x[:rows], None, sh, sc, idx[:rows], eps=1e39)
        # An expanded t (diffusers' timesteps.expand(batch)) is taken.
        t = torch.tensor([500.0], device=DEV)
        self.assertTrue(ref.same_bits(kjit.timestep_sinusoid(t.expand(4), 256),
                                    kjit.timestep_sinusoid(t.repeat(4), 256)))
        # index_error takes a torch.cuda.Stream; a closed context is replaced.
        self.assertFalse(kjit.context().index_error(torch.cuda.current_stream()))
        before = kjit.gated_residual(x, x, sh, idx)
        kjit.context().close()
        self.assertTrue(ref.same_bits(kjit.gated_residual(x, x, sh, idx), before))

    def test_gated_residual_res_grad_only(self):
        """Only res needs a gradient: dres is dout and nothing else runs."""
        m = make(32, 64)
        res = m["x"].detach().clone().requires_grad_(True)
        y, table, idx = m["y"].detach(), m["table"].detach(), m["index"]
        g = table.chunk(6, 1)[2]
        dout = torch.randn_like(res)
        from torch.profiler import profile, ProfilerActivity
        kjit.gated_residual(res, y, g, idx).backward(dout)  # warm-up: kernels loaded
        res.grad = None
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            kjit.gated_residual(res, y, g, idx).backward(dout)
            torch.cuda.synchronize()
        names = {e.name for e in p.events() if "kjit_adaln_bwd" in e.name or "kjit_part_finish" in e.name}
        self.assertEqual(names, set())
        self.assertTrue(ref.same_bits(res.grad, dout))

    def test_frozen_tables(self):
        """Tables and weight frozen (gated_residual: its gate): the backward
        is the row-gradients-only kernel (no partition, no finisher), its
        gradients bitwise those of the full backward, and the frozen leaves
        get no gradient."""
        from torch.profiler import profile, ProfilerActivity
        for n, h in ((4097, 5376), (300, 1000)):
            m = make(n, h, seed=7)
            x, y, idx = m["x"], m["y"], m["index"]
            table, weight = m["table"], m["weight"]
            dout, dh = randn(11, n, h), randn(12, n, h)
            # The chunk(6) views taken at each call: a view of a table that
            # required a gradient when it was taken keeps requiring one.
            ch = lambda: table.chunk(6, 1)
            calls = {
                "norm_modulate": lambda: [kjit.norm_modulate(x, weight, ch()[0], ch()[1], idx)],
                "fused": lambda: list(kjit.gated_residual_norm_modulate(x, y, ch()[2], weight, ch()[0], ch()[1],
                                                                         idx)),
                "gated_residual": lambda: [kjit.gated_residual(x, y, ch()[5], idx)],
            }
            for name, call in calls.items():
                ups = [dh, dout] if name == "fused" else [dout]
                leaves = [x] if name == "norm_modulate" else [x, y]
                if name == "gated_residual":  # no weight: the gate alone frozen
                    full = torch.autograd.grad(call(), leaves + [table], ups)
                    weight.requires_grad_(False)
                else:
                    full = torch.autograd.grad(call(), leaves + [table, weight], ups)
                table.requires_grad_(False), weight.requires_grad_(False)
                try:
                    torch.autograd.grad(call(), leaves, ups)  # warm-up: kernels loaded
                    with profile(activities=[ProfilerActivity.CUDA]) as p:
                        rows = torch.autograd.grad(call(), leaves, ups)
                        torch.cuda.synchronize()
                    out = call()
                finally:
                    table.requires_grad_(True), weight.requires_grad_(True)
                for a, b in zip(rows, full):
                    self.assertTrue(ref.same_bits(a, b), f"{name} n {n} h {h}")
                self.assertFalse(out[0].grad_fn is None)
                names = {e.name for e in p.events() if "kjit_" in e.name}
                self.assertTrue(any("kjit_adaln_bwd_dx<" in k for k in names), names)
                self.assertFalse(any("kjit_adaln_bwd<" in k or "kjit_part" in k for k in names), names)

    def test_index_check_async(self):
        ctx = kjit.core.Context(torch.cuda.current_device(), index_check="async")
        try:
            x = torch.randn(4, 64, device=DEV, dtype=torch.bfloat16)
            tab = torch.randn(3, 64, device=DEV, dtype=torch.bfloat16)
            out = torch.zeros_like(x)
            idx = torch.tensor([0, 1, 7, 2], device=DEV)
            stream = torch.cuda.current_stream().cuda_stream
            ctx.gated_residual_fwd(4, 64, act_dtype="bf16", param_dtype="bf16",
                                   index=(idx.data_ptr(), "int64", 3), res=(x.data_ptr(), 64),
                                   y=(x.data_ptr(), 64), gate=(tab.data_ptr(), 64),
                                   out=(out.data_ptr(), 64), stream=stream)
            self.assertTrue(ctx.index_error(stream))
            self.assertFalse(ctx.index_error(stream))
        finally:
            ctx.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
