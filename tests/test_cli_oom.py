#!/usr/bin/env python3
"""Each command of the CLI (and kjit call, the C client, against a server
not under the probe) with one of its memory allocations failing, for
every allocation it makes (tests/util/oom_probe.c fails the N-th one that
kjit's code or libcjson asks for). For each N the command must:
- end by itself with exit status 0 or 1 (no signal, no hang, and not 2: the
  arguments are valid, and a shortage of memory is not a usage error);
- when it fails (1), say so: a line on stderr, and with --json one
  JSON object on stdout with "ok": false;
- when it succeeds (0), print exactly what it prints with no failure (the
  failure absorbed, not a field or a line silently lost);
- with --json, print JSON that parses;
- leave the cache directory whole: `kjit cache verify` passes on it after.
Usage: test_cli_oom.py KJIT OOM_PROBE_LIB"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

KJIT, PROBE = sys.argv[1], sys.argv[2]
T = tempfile.mkdtemp()
failures = []


def run(args, fail_at=0, out_file=None):
    env = dict(os.environ, LD_PRELOAD=PROBE, OOM_PROBE_FAIL=str(fail_at))
    env.pop("KJIT_LOG", None)
    if out_file:
        env["OOM_PROBE_OUT"] = out_file
    return subprocess.run([KJIT] + args, env=env, capture_output=True, text=True, timeout=120)


def normal(text, is_json):
    """The output without what differs from run to run (the time taken)."""
    if not is_json:
        return text
    if is_json == "lines":  # kjit call: the reply and its events, a JSON object a line
        return [json.loads(line) for line in text.splitlines()]
    o = json.loads(text)
    o.pop("seconds", None)
    o.pop("cache_dir", None)  # a fresh directory per run
    return o


def sweep(name, make_args, fresh_dir=False):
    """Runs make_args(d) with each counted allocation failing in turn; d is a
    fresh cache directory per run when fresh_dir, else the shared one."""
    def args_for(n):
        d = os.path.join(T, f"{name}-{n}")
        if fresh_dir:
            os.mkdir(d, 0o700)
        return make_args(d if fresh_dir else SHARED), d

    count_file = os.path.join(T, f"{name}.count")
    args, _ = args_for(0)
    ref = run(args, out_file=count_file)
    is_json = "lines" if args[0] == "call" else "--json" in args
    if ref.returncode != 0:
        failures.append(f"{name}: the run without a failure exited {ref.returncode}: {ref.stderr}")
        return 0
    want = normal(ref.stdout, is_json)
    count = int(open(count_file).read().split()[1])
    for n in range(1, count + 1):
        args, d = args_for(n)
        out_file = os.path.join(T, f"{name}.{n}")
        try:
            r = run(args, fail_at=n, out_file=out_file)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}, allocation {n} failing: hung")
            continue
        hit = "failed" in open(out_file).read() if os.path.exists(out_file) else False
        what = f"{name}, allocation {n} of {count} failing{'' if hit else ' (not reached)'}"
        if r.returncode not in (0, 1):
            # 2 is a usage error: every command here is valid, and a
            # shortage of memory must not be blamed on its arguments.
            failures.append(f"{what}: exit {r.returncode}: {r.stderr[-500:]}")
            continue
        if is_json:
            try:
                got = normal(r.stdout, is_json)
            except ValueError:
                failures.append(f"{what}: --json output does not parse: {r.stdout[:300]!r}")
                continue
        else:
            got = r.stdout
        if r.returncode == 0 and got != want:
            failures.append(f"{what}: exit 0 with another output:\n  want {str(want)[:300]}\n  got  {str(got)[:300]}")
        if r.returncode != 0:
            # With --json a prewarm's kernels that failed are in its
            # "failures" (stderr stays quiet); any other failure has its line.
            listed = is_json is True and isinstance(got, dict) and got.get("failures")
            if not r.stderr.strip() and not listed:
                failures.append(f"{what}: exit {r.returncode} with nothing on stderr")
            if is_json is True and (not isinstance(got, dict) or got.get("ok") is not False):
                failures.append(f"{what}: exit {r.returncode} but the JSON says {str(got)[:200]}")
        if fresh_dir or name.startswith("cache"):
            v = subprocess.run([KJIT, "cache", "verify", "--cache-dir", d if fresh_dir else SHARED],
                               capture_output=True, text=True)
            if v.returncode != 0:
                failures.append(f"{what}: the cache directory fails verify after: {v.stdout[-300:]}")
        if fresh_dir:
            shutil.rmtree(d, True)
    return count


SHARED = os.path.join(T, "shared")
os.mkdir(SHARED, 0o700)
subprocess.run([KJIT, "prewarm", "--ops", "timestep_sinusoid", "--hidden", "8", "--dtype", "fp32,bf16",
                "--arch", "sm_90", "--cache-dir", SHARED], check=True, capture_output=True)
# A server (not under the probe) for `kjit call`, the C client's side.
sock = os.path.join(T, "s.sock")
server = subprocess.Popen([KJIT, "serve", "--socket", sock, "--cache-dir", SHARED],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
atexit.register(server.kill)  # however the sweep ends
for _ in range(500):
    if os.path.exists(sock):
        break
    time.sleep(0.01)
compile_req = json.dumps({"type": "compile", "op": "timestep_sinusoid", "hidden": 8, "dtype": "fp32", "arch": "sm_90"})
prewarm_req = json.dumps({"type": "prewarm", "ops": ["timestep_sinusoid"], "hidden": [8], "dtype": ["fp32"],
                          "arch": ["sm_90"]})
cases = [
    ("info", lambda d: ["info", "--json"], False),
    ("prewarm", lambda d: ["prewarm", "--ops", "timestep_sinusoid", "--hidden", "8", "--dtype", "fp32",
                           "--arch", "sm_90", "--jobs", "1", "--cache-dir", d, "--json"], True),
    ("prewarm-cached", lambda d: ["prewarm", "--ops", "timestep_sinusoid", "--hidden", "8", "--dtype", "fp32,bf16",
                                  "--arch", "sm_90", "--jobs", "1", "--cache-dir", d, "--json"], False),
    ("prewarm-list", lambda d: ["prewarm", "--ops", "norm_modulate", "--hidden", "5376", "--arch", "sm_90",
                                "--list", "--json"], False),
    ("cache-ls", lambda d: ["cache", "ls", "--json", "--cache-dir", d], False),
    ("cache-ls-text", lambda d: ["cache", "ls", "--cache-dir", d], False),
    ("cache-verify", lambda d: ["cache", "verify", "--json", "--cache-dir", d], False),
    ("cache-stats", lambda d: ["cache", "stats", "--json", "--cache-dir", d], False),
    ("tune-show", lambda d: ["tune", "--show", "--json", "--cache-dir", d], False),
    ("call-compile", lambda d: ["call", "--socket", sock, compile_req], False),
    ("call-prewarm", lambda d: ["call", "--socket", sock, "--events", prewarm_req], False),
]
total = 0
for name, make_args, fresh in cases:
    total += sweep(name, make_args, fresh)
server.terminate()
server.wait()
shutil.rmtree(T, True)
for f in failures:
    print("FAIL:", f)
print(f"test_cli_oom: {total} allocations failed one at a time over {len(cases)} commands, "
      f"{len(failures)} problem(s)")
sys.exit(1 if failures else 0)
