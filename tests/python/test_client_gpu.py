"""The Python client's `run` on the GPU: a `kjit serve` process runs
norm_modulate and gated_residual forwards on this process's tensors (CUDA
IPC), and its outputs must equal, bit for bit, the embedded torch ops'
(outputs poisoned first). The same run sent again is the server's memo hit
(`run_memo_hits`) with the same bits. Prints the round trip against the op's
own time. Exit 77 without CUDA.

    KJIT_LIBRARY=build-gpu/libkjit.so KJIT_BIN=build-gpu/kjit python3 tests/python/test_client_gpu.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))

import torch  # noqa: E402

N, H, R, EPS = 4097, 5376, 9, 1e-6


def wait_socket(path, proc, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            raise RuntimeError("kjit serve exited with %d" % proc.returncode)
        time.sleep(0.05)
    raise RuntimeError("kjit serve did not create %s" % path)


def main():
    if not torch.cuda.is_available():
        if os.environ.get("KJIT_REQUIRE_GPU", "0") not in ("", "0"):
            print("test_client_gpu: no CUDA, and KJIT_REQUIRE_GPU is set: failed")
            return 1
        print("test_client_gpu: no CUDA: skipped")
        return 77
    import kjit
    from kjit.client import Client

    binary = os.environ.get("KJIT_BIN")
    if not binary:
        print("test_client_gpu: set KJIT_BIN to the kjit binary", file=sys.stderr)
        return 1
    g = torch.Generator(device="cuda").manual_seed(20261130)
    x = (torch.randn(N, H, device="cuda", generator=g) * 2).bfloat16()
    y = torch.randn(N, H, device="cuda", generator=g).bfloat16()
    table = (torch.randn(R, 6 * H, device="cuda", generator=g) * 0.1).bfloat16()
    w = (1 + 0.1 * torch.randn(H, device="cuda", generator=g)).bfloat16()
    idx = torch.randint(0, R, (N,), device="cuda", dtype=torch.int32, generator=g)
    shift, scale, gate = table.chunk(6, dim=1)[:3]
    with torch.no_grad():
        want_nm = kjit.norm_modulate(x, w, shift, scale, idx, eps=EPS)
        want_gr = kjit.gated_residual(x, y, gate, idx)
    cases = [
        ("norm_modulate", want_nm, lambda out: {"x": x, "weight": w, "shift": shift, "scale": scale, "out": out,
                                                "index": idx},
         dict(hidden=H, dtype="bf16", n=N, rows=R, param_dtype="bf16", index_dtype="int32", eps=EPS),
         lambda: kjit.norm_modulate(x, w, shift, scale, idx, eps=EPS)),
        ("gated_residual", want_gr, lambda out: {"res": x, "y": y, "gate": gate, "out": out, "index": idx},
         dict(hidden=H, dtype="bf16", n=N, rows=R, param_dtype="bf16", index_dtype="int32"),
         lambda: kjit.gated_residual(x, y, gate, idx)),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "kjit.sock")
        proc = subprocess.Popen([binary, "serve", "--socket", sock, "--cache-dir", os.path.join(tmp, "cache")],
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_socket(sock, proc)
            with Client(sock, timeout=120) as c:
                hits0 = c.stats()["run_memo_hits"]
                for name, want, bufs, fields, embedded in cases:
                    out = torch.full_like(want, float("nan"))
                    for attempt, order in enumerate(("event", "event", "host", "auto")):
                        out.fill_(float("nan"))
                        c.run(name, bufs(out), order=order, **fields)
                        torch.cuda.synchronize()
                        same = torch.equal(out.view(torch.int16), want.view(torch.int16))
                        print("%s fwd, run %d (order=%s): %s" % (name, attempt + 1, order,
                                                                "bitwise equal" if same else "DIFFERS"))
                        failures += not same
                    # The round trip against the op's own time (medians of 50).
                    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    op_us, rt_us = [], []
                    with torch.no_grad():
                        for _ in range(50):
                            ev0.record()
                            embedded()
                            ev1.record()
                            ev1.synchronize()
                            op_us.append(ev0.elapsed_time(ev1) * 1e3)
                    b = bufs(out)
                    mo = statistics.median(op_us)
                    for order in ("event", "host", "auto"):
                        rt_us = []
                        for _ in range(50):
                            t0 = time.perf_counter()
                            c.run(name, b, order=order, **fields)
                            rt_us.append((time.perf_counter() - t0) * 1e6)
                        mr = statistics.median(rt_us)
                        print("%s fwd: op %.1f us (embedded, torch op), run round trip (order=%s%s) %.1f us (%+.1f)"
                              % (name, mo, order, ": " + c.last_order if order == "auto" else "", mr, mr - mo))
                hits = c.stats()["run_memo_hits"] - hits0
                print("run_memo_hits: %d" % hits)
                if hits < 2:
                    print("expected the repeated runs to be memo hits", file=sys.stderr)
                    failures += 1
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("test_client_gpu: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
