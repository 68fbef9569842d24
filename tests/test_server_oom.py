#!/usr/bin/env python3
"""`kjit serve` with one of its memory allocations failing (the N-th that
kjit's code or libcjson asks for: tests/util/oom_probe.c), through a fixed
session of requests: ping, stats, a compile, a bad request, a prewarm, then
pings until one is answered, then shutdown. For each N the server must:
- either refuse to start (exit 1, a message on stderr), or
- answer every request with its reply or an error reply, or close that one
  connection, and then keep serving: the final ping is answered and the
  shutdown ends it with exit 0;
- never die of a signal or hang;
- leave the cache directory whole (`kjit cache verify` passes).
Usage: test_server_oom.py KJIT OOM_PROBE_LIB [STRIDE]
STRIDE (default 1): every STRIDE-th allocation, from a start that moves
daily (1: all of them, ~1000); $OOM_ONLY=N,M,... runs those alone."""

import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
from kjit.client import Client, ProtocolError, ServerError  # noqa: E402

KJIT, PROBE = sys.argv[1], sys.argv[2]
STRIDE = int(sys.argv[3]) if len(sys.argv) > 3 else 1
T = tempfile.mkdtemp()
SEED_DIR = os.path.join(T, "seed")
os.mkdir(SEED_DIR, 0o700)
subprocess.run([KJIT, "prewarm", "--ops", "timestep_sinusoid", "--hidden", "8", "--dtype", "fp32", "--arch",
                "sm_90", "--cache-dir", SEED_DIR], check=True, capture_output=True)


def attempt(sock, fn):
    try:
        with Client(sock, timeout=20) as c:
            return ("ok", fn(c))
    except ServerError as e:
        return ("error reply", e.code)
    except (ProtocolError, OSError) as e:
        return ("closed", str(e)[:100])


# (name, request, the error codes it may get: a shortage of memory is
# "internal", never the client's fault such as bad_json or bad_request).
SESSION = [
    ("ping", lambda c: c.ping()["ok"], {"internal"}),
    ("stats", lambda c: c.stats()["ok"], {"internal"}),
    ("compile", lambda c: len(c.compile("timestep_sinusoid", 8, "fp32", arch="sm_90")["kernels"]),
     {"internal", "compile_failed"}),
    ("bad op", lambda c: c.request({"type": "compile", "op": "nope", "hidden": 8, "dtype": "fp32"}),
     {"internal", "unknown_op"}),
    ("prewarm", lambda c: c.prewarm(["timestep_sinusoid"], [8], ["bf16"], arch=["sm_90"])["ok"], {"internal"}),
]


def one(n):
    """Problems of the run with allocation n failing (n = 0: none fails)."""
    d = os.path.join(T, f"run{n}")
    os.mkdir(d, 0o700)
    cache = os.path.join(d, "cache")
    shutil.copytree(SEED_DIR, cache)
    os.chmod(cache, 0o700)
    sock = os.path.join(d, "s.sock")
    env = dict(os.environ, LD_PRELOAD=PROBE, OOM_PROBE_FAIL=str(n), OOM_PROBE_OUT=os.path.join(d, "probe"))
    env.pop("KJIT_LOG", None)
    with open(os.path.join(d, "err"), "w+") as err:
        p = subprocess.Popen([KJIT, "serve", "--socket", sock, "--cache-dir", cache], env=env,
                             stdout=subprocess.DEVNULL, stderr=err)
        problems, replies = [], []
        end = time.monotonic() + 20
        while p.poll() is None and not os.path.exists(sock) and time.monotonic() < end:
            time.sleep(0.01)
        if p.poll() is None and os.path.exists(sock):
            replies = [(name, attempt(sock, fn)) for name, fn, _ in SESSION]
            for (name, (kind, what)), (_, _, codes) in zip(replies, SESSION):
                if kind == "error reply" and what not in codes:
                    problems.append(f"{name}: answered {what} (allowed: {sorted(codes)})")
            answered = False
            for _ in range(5):
                if attempt(sock, lambda c: c.ping()["ok"])[0] == "ok":
                    answered = True
                    break
                time.sleep(0.1)
            if not answered:
                problems.append("the server answers no ping after the failure")
            for _ in range(3):  # the allocation failing may be the shutdown's own
                if attempt(sock, lambda c: c.shutdown())[0] == "ok":
                    break
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            problems.append("the server did not exit after shutdown (killed)")
        err.seek(0)
        text = err.read()
    started = bool(replies)
    if rc < 0:
        problems.append(f"the server died of signal {-rc}")
    elif started and rc != 0:
        problems.append(f"the server exited {rc} after shutdown")
    elif not started and (rc != 1 or not text.strip()):
        problems.append(f"the server did not start: exit {rc}, stderr {text[-200:]!r}")
    if n == 0 and any(r[0] != "ok" and name != "bad op" for name, r in replies):
        problems.append(f"without a failure: {replies}")
    v = subprocess.run([KJIT, "cache", "verify", "--cache-dir", cache], capture_output=True, text=True)
    if v.returncode != 0:
        problems.append(f"the cache fails verify after: {v.stdout[-300:]}")
    probe = open(os.path.join(d, "probe")).read() if os.path.exists(os.path.join(d, "probe")) else ""
    count = int(probe.split()[1]) if probe.startswith("count") else 0
    reached = "reached" if "failed" in probe else "not reached" if probe else "killed before it could say"
    if problems:
        problems = [f"allocation {n} failing ({reached}): {x}; "
                    f"replies {replies}; stderr {text[-300:]!r}" for x in problems]
    else:
        shutil.rmtree(d, True)
    return problems, count


problems, count = one(0)
if problems or count == 0:
    print("FAIL: the run without a failure:", problems, count)
    sys.exit(1)
# STRIDE > 1: a start that changes with the day, so that CI's runs cover
# different allocations over time; printed, so a failure can be rerun.
start = 1 + (int(time.time() // 86400) % STRIDE)
ns = list(range(start, count + 1, STRIDE))
if os.environ.get("OOM_ONLY"):  # e.g. OOM_ONLY=940,1022: rerun those
    ns = [int(x) for x in os.environ["OOM_ONLY"].split(",")]
with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
    for got, _ in ex.map(one, ns):
        problems += got
shutil.rmtree(T, True)
for p in problems:
    print("FAIL:", p)
print(f"test_server_oom: {len(ns)} of the server's {count} allocations failed one at a time "
      f"(from {start}, every {STRIDE}), {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
