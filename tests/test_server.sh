#!/usr/bin/env bash
# kjit serve and kjit call from the shell: --help, the default socket and its
# modes, a live server not displaced, a stale socket replaced, shutdown and
# signals, exit codes, and the Python client (bindings/python/kjit/client.py).
set -u
KJIT=$1
CLIENT_PY=$(cd "$(dirname "$0")/.." && pwd)/bindings/python/kjit/client.py
UTIL_PY=$(cd "$(dirname "$0")" && pwd)/util
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())$1)"; }
wait_line() { for _ in $(seq $(( $3 * 50 ))); do grep -q "$2" "$1" && return 0; sleep 0.02; done; grep -q "$2" "$1"; }  # file, pattern, seconds
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && "$KJIT" call --socket "$1" '{"type":"ping"}' >/dev/null 2>&1 && return 0; sleep 0.05; done; return 1; }

for c in serve call; do "$KJIT" $c --help | grep -q usage || fail "kjit $c --help"; done
"$KJIT" --help | grep -q serve || fail "kjit --help lists serve"
"$KJIT" serve --max-clients 0 2>/dev/null; [ $? = 2 ] || fail "--max-clients 0 must exit 2"
"$KJIT" serve --idle-timeout x 2>/dev/null; [ $? = 2 ] || fail "--idle-timeout x must exit 2"
for v in 0x10 1e3 1.2.3 .; do  # plain decimal seconds only (strtod took 0x10 as 16)
  timeout 10 "$KJIT" serve --idle-timeout "$v" 2>/dev/null; [ $? = 2 ] || fail "--idle-timeout $v must exit 2"
done
"$KJIT" serve --allow-uid 1,x 2>/dev/null; [ $? = 2 ] || fail "--allow-uid 1,x must exit 2"
# Below the timers' 1 ms: refused before anything is made (no socket, no lock file).
out=$(timeout 10 "$KJIT" serve --socket "$T/idle.sock" --idle-timeout 0.0001 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "below the 1 ms resolution" || fail "--idle-timeout 0.0001: $rc $out"
[ -e "$T/idle.sock" ] || [ -e "$T/idle.sock.lock" ] && fail "a refused --idle-timeout made the socket or its lock"
"$KJIT" serve --bogus 1 2>/dev/null; [ $? = 2 ] || fail "unknown option must exit 2"
# A memory-only cache ('') is said in words (it printed "cache )").
out=$(timeout 3 "$KJIT" serve --socket "$T/mem.sock" --cache-dir "" 2>&1)
echo "$out" | grep -q "cache in memory only)" || fail "serve --cache-dir '': $out"
"$KJIT" call 2>/dev/null; [ $? = 2 ] || fail "call without JSON must exit 2"

# No server: a message and exit 1.
out=$("$KJIT" call --socket "$T/none.sock" '{"type":"ping"}' 2>&1); rc=$?
[ $rc = 1 ] || fail "call with no server exited $rc"
echo "$out" | grep -q "no kjit server" || fail "call with no server: $out"
# A request no server would take is a usage error before any connect.
for bad in 'x' '{"type":"ping"} {"type":"shutdown"}' '[1]'; do
  out=$("$KJIT" call --socket "$T/none.sock" "$bad" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q "the request" || fail "call '$bad' with no server: $rc $out"
done

# The default socket: $XDG_RUNTIME_DIR/kjit/kjit.sock, 0600 in a 0700 directory.
export XDG_RUNTIME_DIR=$T/run
mkdir -m 700 "$XDG_RUNTIME_DIR"
S=$XDG_RUNTIME_DIR/kjit/kjit.sock
"$KJIT" serve --cache-dir "$T/cache" 2>"$T/s1.log" & P1=$!; pids+=($P1)
wait_sock "$S" || fail "serve did not come up on the default socket: $(cat "$T/s1.log")"
[ "$(stat -c %a "$XDG_RUNTIME_DIR/kjit")" = 700 ] || fail "socket directory mode $(stat -c %a "$XDG_RUNTIME_DIR/kjit")"
[ "$(stat -c %a "$S")" = 600 ] || fail "socket mode $(stat -c %a "$S")"
[ "$("$KJIT" call '{"type":"ping"}' | field '["ok"]')" = True ] || fail "call on the default socket"
KJIT_SERVER=$S "$KJIT" call '{"type":"stats"}' >/dev/null || fail "call through KJIT_SERVER"

# A second server on the same socket is refused; the first keeps serving.
out=$("$KJIT" serve --cache-dir "$T/cache" 2>&1); rc=$?
[ $rc = 1 ] || fail "a second serve on a live socket exited $rc"
echo "$out" | grep -q "already" || fail "second serve's message: $out"
"$KJIT" call '{"type":"ping"}' >/dev/null || fail "the first server after a second one tried"

# Exit codes of call: an error reply is 1 (and printed), bad JSON is 2.
out=$("$KJIT" call '{"type":"compile","op":"nope","hidden":8,"dtype":"bf16"}'); rc=$?
[ $rc = 1 ] || fail "call with an error reply exited $rc"
[ "$(echo "$out" | field '["error"]["code"]')" = unknown_op ] || fail "error reply: $out"
"$KJIT" call 'not json' 2>/dev/null; [ $? = 2 ] || fail "call with bad JSON must exit 2"
# A second object after the first (only the first was sent), and an id
# given twice (the reply came under it, not ours, and call waited out its
# timeout): refused at once, or answered.
out=$(timeout 20 "$KJIT" call '{"type":"ping"} {"type":"shutdown"}' 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "text after its JSON object" || fail "call with two objects: $rc $out"
out=$(timeout 20 "$KJIT" call --timeout 10000 '{"id":7,"id":7,"type":"ping"}' 2>&1) || fail "call with two ids: $out"
echo "$out" | grep -q '"ok":true' || fail "call with two ids: $out"
out=$("$KJIT" call --socket '' '{"type":"ping"}' 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--socket" || fail "call --socket '': $rc $out"
"$KJIT" call --payload-out "$T/cubin" '{"type":"compile","op":"timestep_sinusoid","hidden":256,"dtype":"fp32"}' >"$T/c.json" \
  || fail "call compile: $(cat "$T/c.json")"
[ "$(head -c 4 "$T/cubin" | od -An -c | tr -d ' ')" = "177ELF" ] || fail "the payload is not a cubin"
[ "$(stat -c %s "$T/cubin")" = "$(field '["payload_bytes"]' <"$T/c.json")" ] || fail "payload size"
# A refused request writes no payload: no file made, an existing one kept.
"$KJIT" call --payload-out "$T/none.bin" '{"type":"nope"}' >/dev/null 2>&1
[ $? = 1 ] && [ ! -e "$T/none.bin" ] || fail "call --payload-out with a refused request left a file"
cp "$T/cubin" "$T/kept.bin"
"$KJIT" call --payload-out "$T/kept.bin" '{"type":"compile","op":"nope","hidden":256,"dtype":"fp32"}' >/dev/null 2>&1
cmp -s "$T/cubin" "$T/kept.bin" || fail "call --payload-out with a refused request changed an existing file"
# An ok reply without a payload: the existing file kept, no new one made.
"$KJIT" call --payload-out "$T/kept.bin" '{"type":"stats"}' >/dev/null || fail "call stats --payload-out: exit $?"
cmp -s "$T/cubin" "$T/kept.bin" || fail "call --payload-out with a payload-less reply changed an existing file"
"$KJIT" call --payload-out "$T/none.bin" '{"type":"stats"}' >/dev/null && [ ! -e "$T/none.bin" ] ||
  fail "call --payload-out with a payload-less reply left a file"
# Files that are not regular: written as they are, not truncated.
"$KJIT" call --payload-out /dev/null '{"type":"compile","op":"timestep_sinusoid","hidden":256,"dtype":"fp32"}' >/dev/null ||
  fail "call --payload-out /dev/null: exit $?"
"$KJIT" call --payload-out >(cat >"$T/piped.bin") '{"type":"compile","op":"timestep_sinusoid","hidden":256,"dtype":"fp32"}' >/dev/null ||
  fail "call --payload-out to a pipe: exit $?"
wait $!
cmp -s "$T/cubin" "$T/piped.bin" || fail "call --payload-out to a pipe: not the cubin"
# A write that fails (a file-size limit, a full device): an existing file is
# left as it was and a new one is not made (both used to hold a 1024-byte
# ELF fragment), and no temporary file stays.
COMPILE='{"type":"compile","op":"timestep_sinusoid","hidden":256,"dtype":"fp32"}'
echo old >"$T/old.bin"
for f in old.bin new.bin; do
  out=$( (ulimit -f 1; trap '' XFSZ; exec "$KJIT" call --payload-out "$T/$f" "$COMPILE") 2>&1 >/dev/null); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "cannot write $T/$f: File too large" || fail "call --payload-out $f past a file-size limit: $rc $out"
done
[ "$(cat "$T/old.bin")" = old ] || fail "a failed payload write changed the existing file"
[ -e "$T/new.bin" ] && fail "a failed payload write left a new file"
ls "$T" | grep -q '\.bin\.' && fail "a failed payload write left a temporary file: $(ls "$T")"
if [ -c /dev/full ]; then
  out=$("$KJIT" call --payload-out /dev/full "$COMPILE" 2>&1 >/dev/null); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "cannot write /dev/full: No space left on device" || fail "call --payload-out /dev/full: $rc $out"
fi
# Replaced whole, a file keeps its mode; written in place through a link
# (the link stays a link) and where the file has a second name (both names
# see the payload).
chmod 640 "$T/kept.bin" && echo old >"$T/hl.bin" && ln "$T/hl.bin" "$T/hl2.bin" && ln -s kept.bin "$T/link.bin"
"$KJIT" call --payload-out "$T/old.bin" "$COMPILE" >/dev/null && cmp -s "$T/cubin" "$T/old.bin" ||
  fail "call --payload-out over an existing file"
"$KJIT" call --payload-out "$T/link.bin" "$COMPILE" >/dev/null || fail "call --payload-out through a link: exit $?"
[ -L "$T/link.bin" ] && cmp -s "$T/cubin" "$T/kept.bin" && [ "$(stat -c %a "$T/kept.bin")" = 640 ] ||
  fail "call --payload-out through a link: $(ls -l "$T/link.bin" "$T/kept.bin")"
"$KJIT" call --payload-out "$T/hl.bin" "$COMPILE" >/dev/null && cmp -s "$T/cubin" "$T/hl2.bin" ||
  fail "call --payload-out to a file with two names: the other name does not see the payload"
ls "$T" | grep -q '\.bin\.' && fail "a payload write left a temporary file: $(ls "$T")"
n=$("$KJIT" call --events '{"type":"prewarm","ops":"timestep_sinusoid","hidden":[8,16],"dtype":"bf16"}' | grep -c '"event"')
[ "$n" = 2 ] || fail "prewarm printed $n events, want 2"
# A template that does not compile (KJIT_TEMPLATE_DIR): compile and prewarm
# requests fail with compile_failed and NVRTC's words; the prewarm's other
# op is still built, and its reply counts and lists the failure.
TD=$T/tmpl
cp -r "$(dirname "$0")/../kernel_templates" "$TD" && echo '#error broken' >>"$TD/timestep_sinusoid.cuh"
KJIT_TEMPLATE_DIR=$TD "$KJIT" serve --socket "$T/bt.sock" --cache-dir "$T/cache-bt" 2>"$T/bt.log" & PB=$!; pids+=($PB)
wait_sock "$T/bt.sock" || fail "serve with a broken template: $(cat "$T/bt.log")"
out=$("$KJIT" call --socket "$T/bt.sock" "$COMPILE"); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | field '["error"]["code"]')" = compile_failed ] &&
  echo "$out" | grep -q 'NVRTC_ERROR_COMPILATION.*#error directive: broken' || fail "compile of a broken template: $rc $out"
out=$("$KJIT" call --socket "$T/bt.sock" --events \
  '{"type":"prewarm","ops":["timestep_sinusoid","adaln_row_gather"],"hidden":[256],"dtype":"fp32"}'); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | grep -c '"event"')" = 2 ] || fail "prewarm with a broken template: $rc $out"
ev=$(echo "$out" | grep '"adaln_row_gather"') && [ "$(echo "$ev" | field '["ok"]')" = True ] ||
  fail "prewarm with a broken template: the other op: $out"
last=$(echo "$out" | tail -n 1)
[ "$(echo "$last" | field '["error"]["code"]')" = compile_failed ] && [ "$(echo "$last" | field '["failed"]')" = 1 ] &&
  [ "$(echo "$last" | field '["failures"][0]["op"]')" = timestep_sinusoid ] &&
  echo "$last" | grep -q '"1 of 2 combinations failed' || fail "prewarm with a broken template: reply $last"
kill -TERM $PB; wait $PB

# The Python client.
# KJIT_SPIN_US: the client polls for its runs' replies (its default on 4+ CPUs).
KJIT_SPIN_US=500 python3 - "$CLIENT_PY" "$S" <<'PY' || fail "python client"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
with m.Client(sys.argv[2], timeout=120) as c:
    assert c.hello["version"] == 1, c.hello
    assert c._spin_s == 500e-6, c._spin_s  # KJIT_SPIN_US=500: its runs poll
    import os
    dflt = 2000 if (os.cpu_count() or 1) >= 4 else 0
    for bad in ("", "-5", "abc", "12x", "1000001"):  # ignored: the default
        os.environ["KJIT_SPIN_US"] = bad
        assert m._spin_us() == dflt, (bad, m._spin_us())
    os.environ["KJIT_SPIN_US"] = "0"
    assert m._spin_us() == 0
    os.environ["KJIT_SPIN_US"] = "500"
    assert c.ping()["ok"]
    r = c.compile("timestep_sinusoid", 256, "fp32")
    k = r["kernels"][0]
    assert k["cubin"][:4] == b"\x7fELF" and len(k["cubin"]) == k["size"], k["size"]
    r = c.kernel("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid<float>")
    assert r["kernels"][0]["cubin"][:4] == b"\x7fELF", r
    try:
        c.kernel("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid<(float)>")
        raise AssertionError("a non-template-id expr accepted")
    except m.ServerError as e:
        assert e.code == "bad_request" and "expr" in e.message, e
    events = []
    r = c.prewarm("timestep_sinusoid", [32, 48], ["bf16", "fp16"], on_event=events.append)
    assert r["combinations"] == 4 and len(events) == 4, (r, events)
    try:
        c.compile("timestep_sinusoid", 0, "bf16")
        raise AssertionError("hidden 0 accepted")
    except m.ServerError as e:
        assert e.code == "bad_request" and "hidden" in e.message, e
    # run and tune: refused before any GPU work when malformed; without a
    # GPU, unsupported.
    nm = {"op": "norm_modulate", "hidden": 5376, "dtype": "bf16", "n": 4097, "rows": 9,
          "buffers": [{"name": "x", "handle": 0, "stride": 5376}, {"name": "shift", "handle": 1, "stride": 32256},
                      {"name": "scale", "handle": 1, "offset": 10752, "stride": 32256},
                      {"name": "out", "handle": 2, "stride": 5376}, {"name": "index", "handle": 3}],
          "event": 4}
    try:
        c.run_raw(dict(nm, buffers=nm["buffers"][:-1]), [b"\x01" * 64] * 5)
        raise AssertionError("a run without its index accepted")
    except m.ServerError as e:
        assert e.code == "bad_request" and "'index' is missing" in e.message, e
    try:
        c.run_raw(nm, [b"\x01" * 64] * 4)
        raise AssertionError("an event outside the payload accepted")
    except m.ServerError as e:
        assert e.code == "bad_request" and "'event'" in e.message, e
    try:
        c.run_raw(nm, [b"\x01" * 63])
        raise AssertionError("a 63-byte handle sent")
    except ValueError:
        pass
    try:
        c.run("norm_modulate", {}, order="later")
        raise AssertionError("order='later' accepted")
    except ValueError as e:
        assert "order must be 'auto', 'event' or 'host'" in str(e), e
    if not c.hello["gpu"]:
        for call in (lambda: c.run_raw(nm, [b"\x01" * 64] * 5), lambda: c.tune("norm_modulate", 5376, "bf16")):
            try:
                call()
                raise AssertionError("run or tune without a GPU accepted")
            except m.ServerError as e:
                assert e.code == "unsupported" and "no GPU" in e.message, e
    s = c.stats()
    assert s["compiles"] >= 1 and s["hits"] >= 0, s
    # A run sent again unchanged is the server's memo hit (the client writes
    # the id first, compact), and answered as the first was.
    if not c.hello["gpu"]:
        replies = []
        for _ in range(3):
            try:
                c.run_raw(nm, [b"\x01" * 64] * 5)
            except m.ServerError as e:
                replies.append((e.code, e.message))
        assert len(set(replies)) == 1 and replies[0][0] == "unsupported", replies
        s2 = c.stats()
        # 3: the no-GPU check above sent this text last.
        assert s2["run_memo_hits"] - s["run_memo_hits"] == 3, (s, s2)
print("python client: ok")
PY

# shutdown from the server's own user: reply ok, exit 0, socket removed.
"$KJIT" call '{"type":"shutdown"}' >/dev/null || fail "shutdown"
wait $P1; rc=$?
[ $rc = 0 ] || fail "serve after shutdown exited $rc: $(cat "$T/s1.log")"
[ ! -e "$S" ] || fail "socket left after shutdown"

# A full server: the Python client reports `busy` every time, never the
# broken pipe of sending hello to a connection the server already closed.
"$KJIT" serve --socket "$T/full.sock" --max-clients 1 --cache-dir "$T/cache" 2>"$T/full.log" & PF=$!; pids+=($PF)
wait_sock "$T/full.sock" || fail "serve --max-clients 1 did not come up: $(cat "$T/full.log")"
python3 - "$CLIENT_PY" "$T/full.sock" <<'PY' || fail "python client against a full server"
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
held = m.Client(sys.argv[2], timeout=30)
seen = {}
for _ in range(30):
    try:
        m.Client(sys.argv[2], timeout=30)
        k = "connected"
    except m.ServerError as e:
        k = e.code
    except Exception as e:
        k = type(e).__name__
    seen[k] = seen.get(k, 0) + 1
    time.sleep(0.005)
held.close()
assert seen == {"busy": 30}, seen
print("python client, full server: busy 30 of 30")
PY
kill -TERM $PF; wait $PF

# A signal after a `shutdown` request (replies still to write) is the first
# signal (a service manager's stop): the stop goes on, exit 0, whether the
# signal reaches the drain or the teardown after the loop. A second one ends
# the server at once: exit 128 + SIGTERM. (The first used to kill it, logged
# as a "second SIGTERM"; later, one that reached the teardown did.) The
# drain is held open by a client that asked for 64 compiles of a tuple in
# the memo (~0.45 MB of cubins each) and reads none of its replies: the
# server waits up to 5 s for them to be written, on any machine (a drain of
# compiles alone ends in ms on a fast host). An attempt whose server had
# finished before a signal was sent proves nothing and is made again, up to
# 3 times.
stall_client() {  # $1: socket; prints "asked" once its requests are sent
  python3 - "$CLIENT_PY" "$1" <<'PY'
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
c = m.Client(sys.argv[2], timeout=120)
c.compile("norm_modulate", 64, "fp32", "sm_90")  # in the memo: the 64 below are answered at once
for i in range(1000, 1064):
    body = json.dumps({"id": i, "type": "compile", "op": "norm_modulate", "hidden": 64, "dtype": "fp32",
                       "arch": "sm_90"}).encode()
    c._sock.sendall(m._HEADER.pack(b"KJIT", m.PROTO_VERSION, 0, len(body), 0) + body)
print("asked", flush=True)
time.sleep(60)
PY
}
shut_try() {  # $1: signals to send, $2: attempt (a fresh cache each); sets rc, lost (1: the server ended first)
  "$KJIT" serve --socket "$T/shut.sock" --cache-dir "$T/cache-shut$1-$2" 2>"$T/shut.log" & PS=$!; pids+=($PS)
  wait_sock "$T/shut.sock" || fail "serve for the shutdown test did not come up: $(cat "$T/shut.log")"
  stall_client "$T/shut.sock" >"$T/stall.out" 2>&1 & PC=$!; pids+=($PC)
  wait_line "$T/stall.out" asked 8 || fail "the stalled client did not start: $(cat "$T/stall.out")"
  sleep 0.2  # the server has read them
  "$KJIT" call --socket "$T/shut.sock" '{"type":"shutdown"}' >/dev/null 2>&1
  lost=0
  kill -TERM $PS 2>/dev/null || lost=1
  if [ $1 = 2 ] && [ $lost = 0 ]; then  # after the first was read (two pending would merge into one)
    wait_line "$T/shut.log" "already stopping" 5
    kill -TERM $PS 2>/dev/null || lost=1
  fi
  t0=$(date +%s%N); wait $PS; rc=$?; t1=$(date +%s%N)
  kill $PC 2>/dev/null; wait $PC 2>/dev/null
  if [ $rc = 0 ] && grep -q "kjit serve: stopped" "$T/shut.log"; then
    [ $1 = 2 ] && lost=1
    grep -q "already stopping" "$T/shut.log" || lost=1
  fi
  [ $(( (t1 - t0) / 1000000 )) -lt 20000 ] || fail "$1 signal(s) after shutdown took $(( (t1 - t0) / 1000000 )) ms"
}
for signals in 1 2; do
  for attempt in 1 2 3; do
    shut_try $signals $attempt
    [ $lost = 0 ] && break
    echo "shutdown test, $signals signal(s): the server ended before the signal (attempt $attempt)"
  done
  [ $lost = 0 ] || fail "$signals signal(s) after shutdown: the server ended before the signal in 3 attempts: $(cat "$T/shut.log")"
  want=$([ $signals = 1 ] && echo 0 || echo 143)
  [ $rc = "$want" ] || fail "$signals signal(s) after shutdown: exit $rc ($want expected): $(cat "$T/shut.log")"
  grep -q "SIGTERM: already stopping (a shutdown request)" "$T/shut.log" || fail "after shutdown: $(cat "$T/shut.log")"
done

# Signals in the teardown, after the loop has ended (the preload
# SLOW_TEARDOWN_LIB holds the server there): after a `shutdown` request the
# first lets the stop go on (exit 0), a second ends it at once (143); after
# a signal's stop, the next one is a second.
if [ -n "${SLOW_TEARDOWN_LIB:-}" ]; then
  for case in "shutdown 1 0" "shutdown 2 143" "signal 1 143"; do
    set -- $case
    LD_PRELOAD=$SLOW_TEARDOWN_LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
      "$KJIT" serve --socket "$T/td.sock" --cache-dir "$T/cache-td" 2>"$T/td.log" & PS=$!; pids+=($PS)
    wait_sock "$T/td.sock" || fail "serve for the teardown test did not come up: $(cat "$T/td.log")"
    if [ $1 = shutdown ]; then "$KJIT" call --socket "$T/td.sock" '{"type":"shutdown"}' >/dev/null 2>&1
    else kill -TERM $PS; fi
    wait_line "$T/td.log" "slow_teardown: in the teardown" 10 || fail "teardown test ($case): no teardown: $(cat "$T/td.log")"
    kill -TERM $PS
    if [ $2 = 2 ]; then
      wait_line "$T/td.log" "already stopping" 5
      kill -TERM $PS
    fi
    wait $PS; rc=$?
    [ $rc = $3 ] || fail "teardown test ($case): exit $rc ($3 expected): $(cat "$T/td.log")"
    if [ $3 = 0 ]; then
      grep -q "SIGTERM: already stopping (a shutdown request)" "$T/td.log" && grep -q "kjit serve: stopped" "$T/td.log" ||
        fail "teardown test ($case): $(cat "$T/td.log")"
    else
      grep -q "SIGTERM during the teardown: exiting now" "$T/td.log" || fail "teardown test ($case): $(cat "$T/td.log")"
    fi
  done
fi

# A server killed with SIGKILL leaves its socket; the next one replaces it.
"$KJIT" serve --cache-dir "$T/cache" 2>"$T/s2.log" & P2=$!; pids+=($P2)
wait_sock "$S" || fail "serve 2 did not come up"
kill -9 $P2; wait $P2 2>/dev/null
[ -S "$S" ] || fail "SIGKILL should leave the socket file"
"$KJIT" serve --cache-dir "$T/cache" 2>"$T/s3.log" & P3=$!; pids+=($P3)
wait_sock "$S" || fail "serve did not replace a stale socket: $(cat "$T/s3.log")"
grep -q "stale" "$T/s3.log" || fail "no word about the stale socket: $(cat "$T/s3.log")"
kill -INT $P3; wait $P3; rc=$?
[ $rc = 0 ] || fail "serve after SIGINT exited $rc"
[ ! -e "$S" ] || fail "socket left after SIGINT"
# SIGHUP (a foreground server's terminal closed) stops it as SIGTERM does:
# exit 0, the socket removed (its default action killed it, the socket left).
# The server gets SIGHUP at its default even where this script runs with it
# ignored (under nohup, which a shell cannot undo by trap).
if env --default-signal=HUP true 2>/dev/null; then hup_default="env --default-signal=HUP"
elif [ $(( 0x$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status) & 1 )) = 0 ]; then hup_default=""
else hup_default=skip; fi
if [ "$hup_default" = skip ]; then
  echo "test_server.sh: SIGHUP is ignored here and env --default-signal is missing: SIGHUP case not run"
else
$hup_default "$KJIT" serve --cache-dir "$T/cache" 2>"$T/s3h.log" & P3=$!; pids+=($P3)
wait_sock "$S" || fail "serve for SIGHUP did not come up: $(cat "$T/s3h.log")"
kill -HUP $P3; wait $P3; rc=$?
[ $rc = 0 ] || fail "serve after SIGHUP exited $rc: $(cat "$T/s3h.log")"
[ ! -e "$S" ] || fail "socket left after SIGHUP"
grep -q "SIGHUP" "$T/s3h.log" || fail "no word of SIGHUP: $(cat "$T/s3h.log")"
fi
# Started with SIGHUP ignored (nohup): it stays ignored and the server serves on.
(trap '' HUP && exec "$KJIT" serve --cache-dir "$T/cache") 2>"$T/s3n.log" & P3=$!; pids+=($P3)
wait_sock "$S" || fail "serve with SIGHUP ignored did not come up: $(cat "$T/s3n.log")"
kill -HUP $P3; sleep 0.5
kill -0 $P3 2>/dev/null || fail "serve started with SIGHUP ignored died of it: $(cat "$T/s3n.log")"
"$KJIT" call --socket "$S" '{"type":"ping"}' >/dev/null || fail "serve started with SIGHUP ignored stopped serving"
kill -TERM $P3; wait $P3; rc=$?
[ $rc = 0 ] || fail "serve with SIGHUP ignored, then SIGTERM, exited $rc"

# A socket directory that is a symbolic link is refused as one (the message
# said "not a directory").
mkdir -m 700 "$T/real"; ln -s "$T/real" "$T/link"
out=$("$KJIT" serve --socket "$T/link/kjit.sock" --cache-dir "$T/cache" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "is a symbolic link (to $(realpath "$T/real"))" || fail "serve in a linked directory: $rc $out"
[ -z "$(ls -A "$T/real")" ] || fail "the refused server left something in the link's target: $(ls -A "$T/real")"

# Something that is not a socket at the path is never replaced.
mkdir -m 700 "$T/x"; touch "$T/x/kjit.sock"
out=$("$KJIT" serve --socket "$T/x/kjit.sock" --cache-dir "$T/cache" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "not a socket" || fail "serve over a regular file: $rc $out"
[ -f "$T/x/kjit.sock" ] || fail "the regular file was removed"
# ... and nothing is made beside it (a FILE.lock beside e.g. /etc/passwd is
# another program's lock file).
[ "$(ls -A "$T/x")" = kjit.sock ] || fail "the refused server left beside the file: $(ls -A "$T/x")"
# Another program's live socket (no kjit lock held) is not displaced: its
# owner still accepts.
mkdir -m 700 "$T/fl"
python3 -c "
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
open(sys.argv[1] + '.up', 'w').close(); time.sleep(30)" "$T/fl/k.sock" & PL=$!; pids+=($PL)
for _ in $(seq 200); do [ -e "$T/fl/k.sock.up" ] && break; sleep 0.05; done
out=$(timeout 20 "$KJIT" serve --socket "$T/fl/k.sock" --cache-dir "$T/fl/cache" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "a server is already listening on $T/fl/k.sock" || fail "serve over a live foreign socket: $rc $out"
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$T/fl/k.sock" ||
  fail "the foreign socket no longer accepts"
kill $PL 2>/dev/null; wait $PL 2>/dev/null
# A socket directory that cannot be made, or is a file: named, no socket.
echo x >"$T/sockfile"
for a in "$T/no/such/k.sock|cannot create socket directory $T/no/such: No such file or directory" \
         "$T/sockfile/k.sock|socket directory $T/sockfile is not a directory"; do
  out=$(timeout 20 "$KJIT" serve --socket "${a%%|*}" --cache-dir "$T/nc" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -qF "${a#*|}" || fail "serve --socket ${a%%|*}: $rc $out"
  [ -e "${a%%|*}" ] && fail "serve --socket ${a%%|*} made its socket"
done
# A directory that exists keeps its mode (the server never chmods what it
# did not create); one writable by others without the sticky bit is refused.
mkdir -m 755 "$T/d755"
"$KJIT" serve --socket "$T/d755/kjit.sock" --cache-dir "$T/cache" 2>"$T/s4.log" & P4=$!; pids+=($P4)
wait_sock "$T/d755/kjit.sock" || fail "serve in an existing 0755 directory: $(cat "$T/s4.log")"
[ "$(stat -c %a "$T/d755")" = 755 ] || fail "the server changed an existing directory to $(stat -c %a "$T/d755")"
[ "$(stat -c %a "$T/d755/kjit.sock")" = 600 ] || fail "socket mode in an existing directory"
kill -TERM $P4; wait $P4
# Compiled but not stored (the entries' names taken by directories: rename
# fails, even for root): the reply is still ok, but stats counts it and the
# server says so (it was silent, and the kernels were lost at its stop).
CN=$T/cache-ns
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --cache-dir "$CN" >/dev/null || fail "prewarm into $CN"
for f in "$CN"/*.cubin; do rm "$f"; mkdir -p "$f/x"; done
"$KJIT" serve --socket "$T/d755/ns.sock" --cache-dir "$CN" 2>"$T/s6.log" & P6=$!; pids+=($P6)
wait_sock "$T/d755/ns.sock" || fail "serve on $CN: $(cat "$T/s6.log")"
"$KJIT" call --socket "$T/d755/ns.sock" '{"type":"compile","op":"timestep_sinusoid","hidden":8,"dtype":"fp32"}' \
  >/dev/null || fail "compile on a cache that cannot store"
ns=$("$KJIT" call --socket "$T/d755/ns.sock" '{"type":"stats"}' | field '["cache"]["not_stored"]')
[ "$ns" -ge 1 ] 2>/dev/null || fail "stats not_stored after a failed store: $ns"
kill -TERM $P6; wait $P6
grep -q "could not be written to the cache $CN" "$T/s6.log" || fail "no log line for a failed store: $(cat "$T/s6.log")"
# An open-file limit below --max-clients: the server serves what fits and
# says so, and a client past it gets "busy" (it saw a reset connection).
# 256, not less: with a GPU the CUDA driver holds ~60 descriptors itself.
(ulimit -n 256 && exec "$KJIT" serve --socket "$T/d755/fd.sock" --max-clients 1000 --cache-dir "$T/cache") \
  2>"$T/s7.log" & P7=$!; pids+=($P7)
wait_sock "$T/d755/fd.sock" || fail "serve under ulimit -n 256: $(cat "$T/s7.log")"
room=$(sed -n 's/.*open-file limit (256, ulimit -n) leaves room for \([0-9]*\) clients.*/\1/p' "$T/s7.log")
[ -n "$room" ] && [ "$room" -ge 8 ] && [ "$room" -le 248 ] || fail "fd limit: $(cat "$T/s7.log")"
python3 - "$CLIENT_PY" "$T/d755/fd.sock" "${room:-0}" $P7 "$UTIL_PY" <<'PY' || fail "clients past the open-file limit"
import importlib.util, os, signal, socket, sys
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
room, held, busy = int(sys.argv[3]), [], 0
for _ in range(room + 8):  # 8 past the room: "busy", not a reset connection
    try:
        held.append(m.Client(sys.argv[2], timeout=20))
    except m.ServerError as e:
        assert e.code == "busy", e
        busy += 1
assert len(held) == room and busy == 8, (room, len(held), busy)
assert held[0].hello["limits"]["max_clients"] == room, held[0].hello["limits"]
# A burst larger than the descriptors left, all in the backlog when the
# server next runs: each still gets "busy" (the listener pauses while the
# refused ones hold descriptors; before, accepts failed with EMFILE and
# connections were dropped unanswered, or the accept loop spun for good).
pid = int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from server_burst import burst_answered
answered = burst_answered(sys.argv[2], pid, 150)
assert answered == 150, f"{answered} of 150 refused connections were answered busy"
for c in held:
    c.close()
# Still serving. The slots free as the server reads the closes: on a loaded
# machine (a sanitizer build beside other work) that may take a moment, and
# a client before then is rightly told "busy".
import time
end = time.monotonic() + 30
while True:
    try:
        c = m.Client(sys.argv[2], timeout=20)
        break
    except m.ServerError as e:
        assert e.code == "busy" and time.monotonic() < end, e
        time.sleep(0.2)
assert c.stats()["accept_pauses"] >= 1, c.stats()
c.close()
# No descriptor free even for the listener's duplicate when the pause ends
# (the soft limit below every descriptor the server holds): the relisten
# tries again until one is. It gave up after the first try before, and
# the server never accepted again.
import resource
c = m.Client(sys.argv[2], timeout=10)
pauses = c.stats()["accept_pauses"]
c.close()
soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, hard))
try:
    x = socket.socket(socket.AF_UNIX)
    x.settimeout(5)
    x.connect(sys.argv[2])
    time.sleep(0.5)
finally:
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
x.close()
c = m.Client(sys.argv[2], timeout=10)  # timed out before: the listener never came back
assert c.stats()["accept_pauses"] > pauses, (pauses, c.stats())  # the limit did make it pause
c.close()
PY
kill -TERM $P7; wait $P7
# A limit that leaves fewer descriptors than a client and BUSY_SLOTS refused
# connections: the listener must pause at the descriptors left. It paused at
# max_clients + 32 before, past the limit: libuv, out of descriptors, accepts
# and closes the backlog's connections itself, and they went unanswered.
# The limit is the descriptors a started server holds (counted on one) + 20:
# fewer than one client and the busy slots, and fewer than the 32 the
# server keeps for its compiles' files (none is compiled here, so the
# connections could take them all).
"$KJIT" serve --socket "$T/d755/fc.sock" --cache-dir "$T/cache" 2>/dev/null & P8=$!; pids+=($P8)
wait_sock "$T/d755/fc.sock" || fail "serve for the descriptor count"
nfd=$(ls /proc/$P8/fd | wc -l)
kill -TERM $P8; wait $P8
lim=$((nfd + 20))
(ulimit -n $lim && exec "$KJIT" serve --socket "$T/d755/fl.sock" --cache-dir "$T/cache") 2>"$T/s8.log" & P8=$!; pids+=($P8)
wait_sock "$T/d755/fl.sock" || fail "serve under ulimit -n $lim: $(cat "$T/s8.log")"
grep -q "leaves room for 1 clients" "$T/s8.log" || fail "fd limit $lim ($nfd held): $(cat "$T/s8.log")"
python3 - "$CLIENT_PY" "$T/d755/fl.sock" $P8 "$UTIL_PY" <<'PY' || fail "a burst with fewer descriptors than busy slots (ulimit -n $lim, $nfd held)"
import importlib.util, os, signal, socket, sys
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
held = m.Client(sys.argv[2], timeout=20)
sys.path.insert(0, sys.argv[4])
from server_burst import burst_answered
answered = burst_answered(sys.argv[2], int(sys.argv[3]), 60)
assert answered == 60, f"{answered} of 60 connections were answered busy (the rest closed unanswered)"
assert held.stats()["accept_pauses"] >= 1
held.close()
PY
kill -TERM $P8; wait $P8
mkdir -m 777 "$T/d777"; chmod 777 "$T/d777"
out=$(timeout 20 "$KJIT" serve --socket "$T/d777/kjit.sock" --cache-dir "$T/cache" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "writable by its group or others" || fail "serve in a world-writable directory: $rc $out"
[ "$(stat -c %a "$T/d777")" = 777 ] || fail "the refused server changed the directory's mode"
chmod 1777 "$T/d777"
"$KJIT" serve --socket "$T/d777/kjit.sock" --cache-dir "$T/cache" 2>"$T/s5.log" & P5=$!; pids+=($P5)
wait_sock "$T/d777/kjit.sock" || fail "serve in a sticky world-writable directory: $(cat "$T/s5.log")"
[ "$(stat -c %a "$T/d777")" = 1777 ] || fail "the server changed a sticky directory to $(stat -c %a "$T/d777")"
kill -TERM $P5; wait $P5
mkdir -m 700 "$T/d700"
out=$(timeout 20 "$KJIT" serve --socket "$T/d700/kjit.sock" --allow-uid 4242 --cache-dir "$T/cache" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "o+x" || fail "shared serve in an existing 0700 directory: $rc $out"
[ "$(stat -c %a "$T/d700")" = 700 ] || fail "the refused shared server changed the directory's mode"

# A socket directory that belongs to someone else is refused (root can make one).
if [ "$(id -u)" = 0 ]; then
  mkdir -m 700 "$T/theirs"; chown 65534 "$T/theirs"
  out=$("$KJIT" serve --socket "$T/theirs/kjit.sock" --cache-dir "$T/cache" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "belongs to uid" || fail "serve in another user's directory: $rc $out"
fi

# A server of another user (not root): the clients do not use it, even where
# it lets them in (it could hand back any kernel under a matching key).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod o+x "$T"  # uid 65534 reaches its directories in it
  mkdir -m 755 "$T/other" "$T/other/s" "$T/other/c"; chown 65534 "$T/other/s" "$T/other/c"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$KJIT" serve --socket "$T/other/s/k.sock" \
    --cache-dir "$T/other/c" --allow-uid 0 2>"$T/s8.log" & P8=$!; pids+=($P8)
  for _ in $(seq 200); do grep -q listening "$T/s8.log" 2>/dev/null && break; sleep 0.05; done
  if grep -q listening "$T/s8.log"; then  # (wait_sock's own client refuses it)
    out=$("$KJIT" call --socket "$T/other/s/k.sock" '{"type":"stats"}' 2>&1); rc=$?
    [ $rc != 0 ] && echo "$out" | grep -q "runs as uid 65534, neither this user" \
      || fail "the C client used another user's server: $rc $out"
    python3 - "$CLIENT_PY" "$T/other/s/k.sock" <<'PY' || fail "the Python client used another user's server"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kjit_client", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
try:
    m.Client(sys.argv[2], timeout=20)
except PermissionError as e:
    assert "runs as uid 65534, neither this user" in str(e), e
else:
    raise AssertionError("connected to another user's server")
PY
  else
    fail "serve as uid 65534: $(cat "$T/s8.log")"
  fi
  kill -TERM $P8; wait $P8
fi

[ $fails = 0 ] && echo "test_server.sh: all checks passed"
exit $((fails > 0))
