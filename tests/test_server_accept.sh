#!/usr/bin/env bash
# `kjit serve` when accepting fails, through a preload
# (tests/util/accept_probe.c), with the server stopped while each cue is set:
# - accept4 fails with ENOBUFS twice: the listener pauses each time (the
#   reason said once, the pauses counted in stats), the connection waits in
#   the backlog and is served after; without the pause libuv retries the
#   accept at once, in a loop nothing else in the server runs during.
# - two connections out of memory in one turn of the loop: the first is
#   dropped through the spare handle, the second (the spare still closing)
#   pauses the listener, whose close drops it; both clients see the
#   connection closed unanswered, and the server serves the next client.
# Usage: test_server_accept.sh KJIT PROBE_LIB
set -u
KJIT=$1 LIB=$2
CLIENT_PY=$(cd "$(dirname "$0")/.." && pwd)/bindings/python/kjit/client.py
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
T=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$T/serve.err" ] && sed 's/^/  serve: /' "$T/serve.err" >&2; exit 1; }
S=$T/k.sock
ACCEPT_ARM=$T/accept.arm PIPE_ARM=$T/pipe.arm PROBE_OUT=$T/probe.txt LD_PRELOAD=$LIB \
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" serve --socket "$S" --cache-dir "$T/c" 2>"$T/serve.err" &
pid=$!
for _ in $(seq 200); do
  "$KJIT" call --socket "$S" '{"type":"ping"}' >/dev/null 2>&1 && break
  sleep 0.05
done
"$KJIT" call --socket "$S" '{"type":"ping"}' >/dev/null 2>&1 || fail "the server did not start"
python3 - "$CLIENT_PY" "$S" "$pid" "$T" <<'PY' || fail "see above"
import importlib.util, os, signal, socket, sys, time
spec = importlib.util.spec_from_file_location("client", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
path, pid, T = sys.argv[2], int(sys.argv[3]), sys.argv[4]

def pauses():
    c = m.Client(path, timeout=10)
    try:
        return c.stats()["accept_pauses"]
    finally:
        c.close()

def probe_lines(what):
    try:
        return open(f"{T}/probe.txt").read().split().count(what)
    except FileNotFoundError:
        return 0

# ENOBUFS twice: two pauses, then the connection is served.
p0 = pauses()
os.kill(pid, signal.SIGSTOP)
open(f"{T}/accept.arm", "w").close()
x = socket.socket(socket.AF_UNIX)
x.settimeout(10)
x.connect(path)
os.kill(pid, signal.SIGCONT)
c = m.Client(path, timeout=10)   # queued behind x in the backlog
os.unlink(f"{T}/accept.arm")
c.ping()
c.close()
x.close()
assert probe_lines("accept-failed") == 2, open(f"{T}/probe.txt").read()
p1 = pauses()
assert p1 - p0 == 2, f"ENOBUFS twice: {p1 - p0} pauses, want 2"
err = open(f"{T}/serve.err").read()
assert "kjit serve: no buffer space available: not accepting for" in err, err

# Two connections out of memory in one turn: both dropped unanswered, one pause.
os.kill(pid, signal.SIGSTOP)
open(f"{T}/pipe.arm", "w").close()
pair = []
for _ in range(2):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    pair.append(s)
os.kill(pid, signal.SIGCONT)
for i, s in enumerate(pair):
    data = b""
    while True:
        b = s.recv(4096)   # a timeout here: the connection was neither served nor closed
        if not b:
            break
        data += b
    assert data == b"", f"connection {i} out of memory got {data[:200]!r}, want it closed unanswered"
    s.close()
assert probe_lines("pipe-init-failed") == 2, open(f"{T}/probe.txt").read()
os.unlink(f"{T}/pipe.arm")
p2 = pauses()   # the next client is served
assert p2 - p1 == 1, f"the second connection out of memory: {p2 - p1} pauses, want 1"
print(f"ok: ENOBUFS twice gave 2 pauses and the connection was served; two connections out of memory "
      f"were closed unanswered with 1 pause; the server serves on")
PY
"$KJIT" call --socket "$S" '{"type":"shutdown"}' >/dev/null 2>&1 || fail "shutdown"
wait "$pid"; rc=$?; pid=
[ $rc -eq 0 ] || fail "the server exited $rc after shutdown"

# The socket appears only once the server listens: a client that connects
# the moment the path exists is not refused, though the server is held
# 700 ms between its bind and its listen.
S2=$T/d/k2.sock
mkdir -m 700 "$T/d"
LISTEN_DELAY_MS=700 LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" serve --socket "$S2" --cache-dir "$T/c" 2>"$T/serve.err" &
pid=$!
python3 - "$S2" <<'PY' || fail "see above"
import os, socket, sys, time
path = sys.argv[1]
end = time.monotonic() + 30
while not os.path.exists(path):
    assert time.monotonic() < end, "the socket did not appear in 30 s"
    time.sleep(0.001)
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(path)
except OSError as e:
    sys.exit(f"FAIL: connecting the moment {path} appeared: {e}")
s.close()
print("ok: the socket appeared listening (connected the moment it existed)")
PY
"$KJIT" call --socket "$S2" '{"type":"shutdown"}' >/dev/null 2>&1 || fail "shutdown of the second server"
wait "$pid"; rc=$?; pid=
[ $rc -eq 0 ] || fail "the second server exited $rc after shutdown"
left=$(ls -A "$T/d")
[ "$left" = "k2.sock.lock" ] || fail "the socket directory after shutdown holds '$left', want only k2.sock.lock"

# A listen or a rename that fails: the server exits 1 naming the step, and
# leaves no socket behind, under the temporary name or the path.
for cue in "LISTEN_FAIL|cannot listen on $S2" "RENAME_FAIL|cannot rename $T/d/.kjit-serve-"; do
  out=$(env "${cue%%|*}=1" LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    timeout 30 "$KJIT" serve --socket "$S2" --cache-dir "$T/c" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -qF "${cue#*|}" || fail "serve with ${cue%%|*}: exit $rc: $out"
  left=$(ls -A "$T/d")
  [ "$left" = "k2.sock.lock" ] || fail "serve with ${cue%%|*} left '$left' in the socket directory"
done
