#!/usr/bin/env bash
# The kjit CLI end to end, without a GPU: prewarm (twice, concurrent, killed,
# for the oldest supported and the newest arch),
# cache verify/ls/stats/clear, refused arguments, --help everywhere.
set -u
KJIT=$1
T=$(mktemp -d)
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
OPS="--ops timestep_sinusoid --hidden 256 --dtype fp32,bf16,fp16 --arch sm_90,sm_100"

"$KJIT" info >/dev/null || fail "kjit info"
for c in info prewarm cache tune serve call; do
  "$KJIT" $c --help | grep -q usage || fail "kjit $c --help"
done
"$KJIT" --help | grep -q prewarm || fail "kjit --help"
"$KJIT" nope 2>/dev/null; [ $? = 2 ] || fail "unknown command must exit 2"
"$KJIT" help prewarm extra >/dev/null 2>&1; [ $? = 2 ] || fail "kjit help with two commands must exit 2"
# kjit --help CMD is kjit help CMD (it printed the command list and ignored CMD).
"$KJIT" --help info | grep -q "usage: kjit info" || fail "kjit --help info"
"$KJIT" -h bogus >/dev/null 2>&1; [ $? = 2 ] || fail "kjit -h bogus must exit 2"
# Settings from the environment that are not what they claim are refused by
# name before anything starts (KJIT_TUNE=maybe must not mean "on").
for kv in KJIT_RUN_GRAPH=maybe KJIT_SERVE_MEMO_MAX=abc KJIT_SERVE_MEMO_MAX=0 KJIT_TUNE=maybe KJIT_PDL=enable \
          KJIT_SPIN_US=abc KJIT_SPIN_US=-1 UV_THREADPOOL_SIZE=0 UV_THREADPOOL_SIZE=abc UV_THREADPOOL_SIZE=2000 \
          KJIT_CACHE_LOCK_WAIT_S=abc KJIT_CACHE_LOCK_WAIT_S=-1 KJIT_CACHE_LOCK_WAIT_S=86401; do
  err=$(env "$kv" timeout 60 "$KJIT" serve --socket "$T/env.sock" 2>&1 >/dev/null); rc=$?
  [ $rc = 1 ] || fail "$kv kjit serve exited $rc, want 1"
  case "$err" in *"${kv%=*}='${kv#*=}'"*) ;; *) fail "$kv kjit serve: message does not name it: $err" ;; esac
  [ -e "$T/env.sock" ] && fail "$kv kjit serve left its socket"
done
# call: an unwritable --payload-out is refused before the server is asked
# (no server here: exit 2, not 1), and a file it created for a request that
# then fails is removed again.
for p in "$T/no/such/dir/out.bin" ""; do
  out=$("$KJIT" call --socket "$T/nosock" --payload-out "$p" '{"type":"stats"}' 2>"$T/err"); rc=$?
  [ $rc = 2 ] && [ -z "$out" ] && grep -q -- "--payload-out '$p'" "$T/err" || fail "call --payload-out '$p': rc $rc, out '$out', $(cat "$T/err")"
done
"$KJIT" call --socket "$T/nosock" --payload-out "$T/pay.bin" '{"type":"stats"}' >/dev/null 2>&1
[ $? = 1 ] && [ ! -e "$T/pay.bin" ] || fail "call without a server: exit 1 and no payload file left"
# A dangling link is refused, not followed (nor removed).
ln -s "$T/nowhere" "$T/dangling"
out=$("$KJIT" call --socket "$T/nosock" --payload-out "$T/dangling" '{"type":"stats"}' 2>&1); rc=$?
[ $rc = 2 ] && [ -L "$T/dangling" ] && [ ! -e "$T/nowhere" ] || fail "call --payload-out through a dangling link"
echo "$out" | grep -q "a symbolic link to a missing file" || fail "call --payload-out, dangling link: $out"
# A socket path the environment makes too long is not a usage error (1, not 2).
long=/tmp/$(printf 'x%.0s' $(seq 120))
out=$(KJIT_SERVER=$long "$KJIT" call '{"type":"ping"}' 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "longer than" || fail "call with a too long KJIT_SERVER: $rc $out"
out=$("$KJIT" call --socket "$long" '{"type":"ping"}' 2>&1); rc=$?
[ $rc = 2 ] || fail "call with a too long --socket: $rc $out"
# A relative XDG_RUNTIME_DIR is ignored (the XDG spec): never rel/kjit/kjit.sock.
out=$(cd "$T" && env -u KJIT_SERVER XDG_RUNTIME_DIR=rel "$KJIT" call --timeout 2000 '{"type":"ping"}' 2>&1)
echo "$out" | grep -q "rel/kjit" && fail "call with a relative XDG_RUNTIME_DIR: $out"
# Invalid JSON is called that, not "not a JSON object".
out=$("$KJIT" call --socket "$T/nosock" '{"x":NaN}' 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "not valid JSON" || fail "call with invalid JSON: $rc $out"
# An option where a command goes is called an option.
out=$("$KJIT" -V 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "unknown option '-V'" || fail "kjit -V: $rc $out"
# A FIFO nobody reads is refused at once (exit 2, named), not waited on.
mkfifo "$T/fifo"
out=$(timeout 20 "$KJIT" call --socket "$T/nosock" --payload-out "$T/fifo" '{"type":"stats"}' 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--payload-out '$T/fifo': a FIFO with no reader" || fail "call --payload-out FIFO: rc $rc, $out"
# A report that cannot be written is a failure, said on stderr.
if [ -w /dev/full ]; then
  mkdir -m 700 "$T/empty"  # a cache that exists: its report is what is lost
  for c in "info --json" "--help" "cache stats --json --cache-dir $T/empty"; do
    err=$("$KJIT" $c 2>&1 >/dev/full); rc=$?
    [ $rc = 1 ] || fail "kjit $c >/dev/full exited $rc, want 1"
    case "$err" in *"cannot write the output"*) ;; *) fail "kjit $c >/dev/full: no message: $err" ;; esac
  done
fi

# Refused values name themselves, exit 2.
check_refused() {
  local want=$1; shift
  out=$("$KJIT" prewarm --cache-dir "$T/c0" "$@" 2>&1); rc=$?
  [ $rc = 2 ] || fail "prewarm $* exited $rc, want 2"
  echo "$out" | grep -q -- "$want" || fail "prewarm $*: message does not name '$want': $out"
}
check_refused "nope" --ops nope
check_refused "'0'" --hidden 0
check_refused "sm_12" --arch sm_12
check_refused "fp8" --dtype fp8
check_refused "--jobs" --jobs 0
check_refused "sm_ 90" --arch "sm_ 90"
check_refused "sm_+90" --arch "sm_+90"
check_refused "sm_000000000000000090" --arch sm_000000000000000090
# A list with an empty item says which one.
check_refused "item 2 of 3 is empty" --hidden 5376,,4096
check_refused "item 2 of 2 is empty" --hidden 5376,
check_refused "item 1 of 2 is empty" --hidden ,
check_refused "65 items, more than 64" --hidden "$(seq -s, 8 8 520)"
check_refused "--arch: a list of 1205 characters (at most 1023)" --arch "$(printf 'sm_90,%.0s' $(seq 1 200))sm_90"
# A list option given twice is refused (the first list was dropped unsaid).
check_refused "--ops given twice: give one comma list" --ops timestep_sinusoid --ops adaln_row_gather
check_refused "--hidden given twice" --hidden 256 --hidden 512
check_refused "--arch given twice" --arch sm_90 --arch sm_100
check_refused "(see kjit prewarm --help)" --arch sm_12
[ -e "$T/c0" ] && fail "a refused prewarm created its cache directory"
# info says why NVRTC is missing, naming the variable that points nowhere.
out=$(KJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so "$KJIT" info --json)
echo "$out" | grep -q '"nvrtc_error":"KJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so could not be loaded' ||
  fail "info with a bad KJIT_NVRTC_LIBRARY does not say why: $out"
# Not the arguments' fault: no NVRTC (exit 1, no --arch blamed); a template
# folder that cannot be read is named.
out=$(KJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so "$KJIT" prewarm --ops timestep_sinusoid --hidden 8 \
      --cache-dir "$T/c0" 2>&1); rc=$?
[ $rc = 1 ] || fail "prewarm without NVRTC exited $rc, want 1: $out"
echo "$out" | grep -q -- "--arch" && fail "prewarm without NVRTC blames --arch: $out"
echo "$out" | grep -q "/nonexistent/libnvrtc.so" || fail "prewarm without NVRTC: $out"
# Templates that cannot be read: said once, before any compile (every job
# failed with the same line).
out=$(KJIT_TEMPLATE_DIR=/nonexistent "$KJIT" prewarm --ops timestep_sinusoid,norm_modulate --hidden 8 --cache-dir "$T/c0" 2>&1); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | grep -c "KJIT_TEMPLATE_DIR=/nonexistent")" = 1 ] &&
  echo "$out" | grep -q "(nothing compiled)" || fail "prewarm with a missing template dir: $rc $out"
# A template including a file that only the working directory holds: not
# found (NVRTC searched the source's directory, the cwd for these names,
# and such a file was not in the cache key: an edit to it went unseen).
TPL_SRC=$(cd "$(dirname "$0")/../kernel_templates" && pwd)
cp -r "$TPL_SRC" "$T/tpl"
{ echo '#include "kjit_cwd_probe.cuh"'; cat "$TPL_SRC/timestep_sinusoid.cuh"; } >"$T/tpl/timestep_sinusoid.cuh"
mkdir -p "$T/cwd" && echo '#define KJIT_CWD_PROBE 1' >"$T/cwd/kjit_cwd_probe.cuh"
out=$(cd "$T/cwd" && KJIT_TEMPLATE_DIR=$T/tpl "$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 \
      --arch sm_90 --cache-dir "$T/c0" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "kjit_cwd_probe" || fail "a template's include from the cwd: rc $rc: $out"
# A FIFO in a template's place: refused at once, naming it (an open without
# O_NONBLOCK waited for a writer forever).
cp -r "$TPL_SRC" "$T/tpl2" && rm "$T/tpl2/timestep_sinusoid.cuh" && mkfifo "$T/tpl2/timestep_sinusoid.cuh"
out=$(KJIT_TEMPLATE_DIR=$T/tpl2 timeout 30 "$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "$T/c0" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "timestep_sinusoid.cuh: not a regular file" || fail "a FIFO template: rc $rc: $out"

# Prewarm twice into an empty cache: second run all cached and >= 10x faster.
C=$T/c1
j1=$("$KJIT" prewarm $OPS --cache-dir "$C" --json) || fail "first prewarm failed: $j1"
j2=$("$KJIT" prewarm $OPS --cache-dir "$C" --json) || fail "second prewarm failed: $j2"
[ "$(echo "$j1" | field kernels)" = 6 ] || fail "kernels: $j1"
[ "$(echo "$j1" | field compiled)" = 6 ] || fail "first run compiled: $j1"
[ "$(echo "$j2" | field cached)" = 6 ] || fail "second run cached: $j2"
[ "$(echo "$j2" | field failed)" = 0 ] || fail "second run failed: $j2"
s1=$(echo "$j1" | field seconds); s2=$(echo "$j2" | field seconds)
python3 -c "import sys; sys.exit(0 if $s1 >= 10 * $s2 else 1)" || fail "second prewarm not 10x faster: $s1 s vs $s2 s"
echo "prewarm: cold $s1 s, warm $s2 s"
# On a terminal the bar is drawn at 0 before any kernel is done (it used to
# appear with the first finished one) and at the end (script(1) gives the
# terminal; skipped where it is missing).
if command -v script >/dev/null 2>&1; then
  out=$(script -qec "'$KJIT' prewarm $OPS --cache-dir '$C'" /dev/null </dev/null 2>&1 | tr '\r' '\n')
  first=$(echo "$out" | grep -m1 "prewarm \[")
  case $first in "prewarm [................................] 0/6"*) ;; *) fail "the bar's first line: '$first' in $out" ;; esac
  echo "$out" | grep -q "prewarm \[################################\] 6/6" || fail "the bar's last line: $out"
fi

"$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify of a fresh cache"
[ "$("$KJIT" cache stats --cache-dir "$C" --json | field entries)" = 6 ] || fail "stats entries"
[ "$("$KJIT" cache ls --cache-dir "$C" | wc -l)" = 6 ] || fail "ls lines"
# An empty cache: ls prints no line on stdout and says so on stderr, exit 0.
mkdir -p "$T/empty-cache"
out=$("$KJIT" cache ls --cache-dir "$T/empty-cache" 2>"$T/ls.err"); rc=$?
[ $rc = 0 ] && [ -z "$out" ] && grep -q "no entries" "$T/ls.err" || fail "cache ls on an empty cache: $rc '$out' $(cat "$T/ls.err")"

# --space adds the tuner's candidates (norm_modulate at 1024 bf16: 16 kernels
# alone, 38 with the space), compiled once; an op that is not tuned gets none.
CS=$T/c8
js1=$("$KJIT" prewarm --ops norm_modulate --hidden 1024 --dtype bf16 --arch sm_90 --cache-dir "$CS" --json) \
  || fail "prewarm norm_modulate: $js1"
js2=$("$KJIT" prewarm --ops norm_modulate --hidden 1024 --dtype bf16 --arch sm_90 --cache-dir "$CS" --space --json) \
  || fail "prewarm --space: $js2"
js3=$("$KJIT" prewarm --ops norm_modulate --hidden 1024 --dtype bf16 --arch sm_90 --cache-dir "$CS" --space --json) \
  || fail "prewarm --space again: $js3"
k1=$(echo "$js1" | field kernels); k2=$(echo "$js2" | field kernels)
[ "$(echo "$js1" | field ok)" = True ] || fail "prewarm --json without a failure: ok is not true: $js1"
[ "$k2" -gt "$k1" ] || fail "--space listed $k2 kernels, the plain prewarm $k1"
[ "$(echo "$js2" | field cached)" = "$k1" ] || fail "--space recompiled the op's own kernels: $js2"
[ "$(echo "$js3" | field compiled)" = 0 ] && [ "$(echo "$js3" | field cached)" = "$k2" ] \
  || fail "--space the second time: $js3"
# Ops share the partition's kernels but look them up under their own names:
# after a prewarm of two ops, the second alone finds every kernel.
js5=$("$KJIT" prewarm --ops norm_modulate,gated_residual --hidden 1024 --dtype bf16 --arch sm_90 --cache-dir "$CS" \
  --json) || fail "prewarm of two ops: $js5"
js6=$("$KJIT" prewarm --ops gated_residual --hidden 1024 --dtype bf16 --arch sm_90 --cache-dir "$CS" --json) \
  || fail "prewarm gated_residual: $js6"
[ "$(echo "$js6" | field compiled)" = 0 ] || fail "a kernel shared with norm_modulate was compiled again: $js6"
js4=$("$KJIT" prewarm $OPS --cache-dir "$CS" --space --json) || fail "prewarm --space of timestep_sinusoid: $js4"
[ "$(echo "$js4" | field kernels)" = 6 ] || fail "--space added kernels to timestep_sinusoid: $js4"

# A flipped byte is named by verify, and the next prewarm rebuilds it.
victim=$(ls "$C"/*.cubin | head -1)
python3 - "$victim" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x40; open(p, 'wb').write(b)
PY
out=$("$KJIT" cache verify --cache-dir "$C"); rc=$?
[ $rc = 1 ] || fail "verify after a flipped byte exited $rc"
echo "$out" | grep -q "$(basename "$victim")" || fail "verify does not name $(basename "$victim"): $out"
# --json: ok false, as the exit status says.
out=$("$KJIT" cache verify --cache-dir "$C" --json); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | field ok)" = False ] && [ "$(echo "$out" | field bad)" = 1 ] ||
  fail "verify --json after a flipped byte: $rc $out"
j3=$("$KJIT" prewarm $OPS --cache-dir "$C" --json) || fail "prewarm after corruption: $j3"
[ "$(echo "$j3" | field compiled)" = 1 ] || fail "prewarm did not rebuild exactly the bad entry: $j3"
[ "$(echo "$j3" | field bad_entries)" = 1 ] || fail "prewarm --json does not count the replaced entry: $j3"
"$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify after rebuild"
# ... and the text output says so too (a note: exit 0).
victim=$(ls "$C"/*.cubin | head -1); : >"$victim"
out=$("$KJIT" prewarm $OPS --cache-dir "$C" 2>&1) || fail "prewarm after truncation: $out"
echo "$out" | grep -q "note: 1 damaged cache entry was removed, and compiled again where this run needs it" ||
  fail "prewarm does not report the replaced entry: $out"

# 8 processes prewarming one empty cache at once.
C=$T/c2
pids=()
for i in 1 2 3 4 5 6 7 8; do "$KJIT" prewarm $OPS --cache-dir "$C" --jobs 2 --json >"$T/p$i.json" 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent prewarm failed: $(cat "$T"/p*.json)"; done
"$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify after concurrent prewarm"
[ -z "$(ls -A "$C" | grep '^\.tmp')" ] || fail "temp files left: $(ls -A "$C")"
total=0; for i in 1 2 3 4 5 6 7 8; do total=$((total + $(field compiled <"$T/p$i.json"))); done
[ "$total" = 6 ] || fail "8 concurrent prewarms compiled $total kernels, want 6 (one per key)"

# A prewarm killed with SIGKILL mid-way: no partial entry, the next run neither hangs nor fails.
# The folder exists first: a kill before the process makes it (a loaded
# machine, a sanitizer build) would leave verify nothing to open.
C=$T/c3
mkdir -p "$C"
for delay in 0.05 0.2 0.5; do
  "$KJIT" prewarm $OPS --cache-dir "$C" --jobs 2 >/dev/null 2>&1 &
  pid=$!; sleep $delay; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  "$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify after SIGKILL at $delay s"
done
timeout 120 "$KJIT" prewarm $OPS --cache-dir "$C" >/dev/null || fail "prewarm after SIGKILL"
"$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify after recovery"

# SIGTERM while the workers compile: the process says so and dies by the
# signal (143), not by libnvrtc's handler (exit 4, no message, at times a
# crash); what was stored verifies.
C=$T/c6
for delay in 0.02 0.1 0.3; do
  rm -rf "$C/locks"
  "$KJIT" prewarm $OPS --cache-dir "$C" --jobs 4 >/dev/null 2>"$T/term.err" &
  pid=$!
  # The cache (and its locks folder) opens after the signals are taken
  # over: a signal before that meets the default action, as it should.
  for _ in $(seq 200); do [ -d "$C/locks" ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
  sleep $delay; kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
  if [ $rc != 0 ]; then  # 0: it finished before the signal
    [ $rc = 143 ] || fail "prewarm after SIGTERM at $delay s exited $rc, want 143: $(cat "$T/term.err")"
    grep -q "SIGTERM: stopping" "$T/term.err" || fail "prewarm after SIGTERM at $delay s: no message"
  fi
  "$KJIT" cache verify --cache-dir "$C" >/dev/null || fail "verify after SIGTERM at $delay s"
done

# Compiled but not stored (an entry's name taken by a directory: rename
# fails, even for root): exit 1, and the message says so.
C=$T/c7
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "$C" >/dev/null || fail "prewarm into $C"
for f in "$C"/*.cubin; do rm "$f"; mkdir -p "$f/x"; done
out=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "$C" 2>&1); rc=$?
[ $rc = 1 ] || fail "prewarm that stored nothing exited $rc, want 1: $out"
echo "$out" | grep -q "could not be written to $C" || fail "prewarm that stored nothing: $out"
echo "$out" | grep -q "a directory under an entry's name" || fail "prewarm does not name the directory case: $out"
out=$(KJIT_LOG=1 "$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "$C" 2>&1)
echo "$out" | grep -q "left alone, so this kernel cannot be stored" && ! echo "$out" | grep -q "removing it" \
  || fail "the log claims a directory under an entry's name is removed: $out"
j=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "$C" --json 2>/dev/null)
[ "$(echo "$j" | field not_stored)" = 1 ] && [ "$(echo "$j" | field ok)" = False ] || fail "--json not_stored: $j"
out=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --cache-dir "" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "memory-only" || fail "prewarm --cache-dir '': $rc $out"

# A cache directory writable by others is refused, with its path in the message.
C=$T/c4; mkdir -p "$C"; chmod 0777 "$C"
out=$("$KJIT" prewarm $OPS --cache-dir "$C" 2>&1) && fail "world-writable cache dir accepted"
echo "$out" | grep -q "$C" || fail "refusal does not name the directory: $out"
chmod 0700 "$C"

# Every op's kernels compile for the oldest arch from sm_75 on that NVRTC
# knows and the newest (sm_75 has neither cp.async nor a bf16 conversion:
# the templates fall back to plain copies and integer rounding there; NVRTC
# 12 also lists older archs, which the templates do not support).
archs=$("$KJIT" info --json | python3 -c "
import json, sys
a = [x for x in json.load(sys.stdin)['archs'] if int(x[3:]) >= 75]
print(a[0] + ',' + a[-1])")
j=$("$KJIT" prewarm --ops all --hidden 256,5376 --dtype bf16,fp32 --arch "$archs" --cache-dir "$T/c5" --json) ||
  fail "prewarm for $archs: $j"
[ "$(echo "$j" | field failed)" = 0 ] || fail "prewarm for $archs failed: $j"
echo "prewarm for $archs: $(echo "$j" | field compiled) kernels compiled"

# The read-only cache commands touch nothing: a mistyped directory is an
# error (not an empty cache that verifies), and is not created.
out=$("$KJIT" cache verify --cache-dir "$T/typo/cache" 2>&1); rc=$?
[ $rc = 1 ] || fail "cache verify of a missing dir exited $rc, want 1: $out"
[ -e "$T/typo" ] && fail "cache verify created $T/typo"
out=$("$KJIT" cache ls --cache-dir "" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--cache-dir ''" || fail "cache ls --cache-dir '': $rc $out"
KJIT_CACHE_MAX_MB=abc "$KJIT" cache stats --cache-dir "$T/c1" >/dev/null || fail "cache stats with a bad size cap"
# clear is idempotent: a cache never created has nothing to clear (exit 0), and is not created.
"$KJIT" cache clear --cache-dir "$T/never/cache" >/dev/null || fail "cache clear of a missing dir"
[ -e "$T/never" ] && fail "cache clear created $T/never"
# An entry larger than the format allows (a sparse 1100 MiB file, over the
# 1 GiB default cap) is damaged: replaced and counted, and it pushes no good
# entry out (counted in the cap's sum, it had evicted them all).
"$KJIT" prewarm $OPS --jobs 1 --cache-dir "$T/big" >/dev/null 2>&1 || fail "prewarm into $T/big"
set -- "$T"/big/*.cubin
truncate -s 100 "$1"; truncate -s 1100M "$3"; touch "$3"
# stats counts it apart, as the size cap does (not 1.1 GB of entries).
st=$("$KJIT" cache stats --json --cache-dir "$T/big")
[ "$(echo "$st" | field entries)" = 5 ] && [ "$(echo "$st" | field other_files)" = 1 ] &&
  [ "$(echo "$st" | field bytes)" -lt 1000000 ] || fail "stats over an oversized entry: $st"
out=$("$KJIT" prewarm $OPS --jobs 1 --cache-dir "$T/big" --json 2>/dev/null)
for kv in compiled=2 bad_entries=2 evicted=0 cached=4; do
  [ "$(echo "$out" | field "${kv%=*}")" = "${kv#*=}" ] || fail "prewarm over a damaged oversized entry: want ${kv}: $out"
done
set --
# A set larger than the size cap evicts some of its own kernels: the run
# fails, naming how many are missing (it exited 0 with a note before).
out=$(KJIT_CACHE_MAX_MB=1 "$KJIT" prewarm --ops norm_modulate --hidden 5376,4096,3072 --dtype bf16 --arch sm_90 \
  --cache-dir "$T/cap" --json 2>"$T/cap.err"); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | field ok)" = False ] && [ "$(echo "$out" | field missing)" -ge 1 ] &&
  grep -q "of this run's kernels are not in" "$T/cap.err" || fail "prewarm over the size cap: rc $rc $out $(cat "$T/cap.err")"
[ "$(echo "$(KJIT_CACHE_MAX_MB=1 "$KJIT" prewarm $OPS --cache-dir "$T/cap2" --json 2>/dev/null)" | field missing)" = 0 ] ||
  fail "prewarm under the size cap reports missing kernels"
# A cache path of exactly 4095 bytes keeps its entry when a longer path
# that begins with it is named (once shortened to 4096-byte buffers, such a
# path named the other cache: clear emptied it); an error about a path
# past the 4 KiB message buffer still ends with the reason.
L=$T/l
while [ ${#L} -lt 3890 ]; do L=$L/dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd; done
L=$L/$(printf 'e%.0s' $(seq 1 $((4094 - ${#L}))))
[ ${#L} = 4095 ] || fail "test setup: a ${#L}-byte path, want 4095"
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --cache-dir "$L" >/dev/null 2>&1 || fail "prewarm into a 4095-byte path"
for other in "$L-old" "$L/some/other/cache"; do
  out=$("$KJIT" cache clear --cache-dir "$other" 2>&1) && fail "cache clear of a ${#other}-byte path succeeded: ${out: -200}"
  case "$out" in *"File name too long") ;; *) fail "cache clear, ${#other}-byte path: the reason is not last: ${out: -200}" ;; esac
done
[ "$("$KJIT" cache stats --cache-dir "$L" --json | field entries)" = 1 ] || fail "the 4095-byte cache lost its entry"

# Temp files and non-files are not entries: stats counts them apart, ls
# marks them; an mtime localtime cannot convert prints as seconds.
n0=$("$KJIT" cache stats --cache-dir "$T/c1" --json | field entries)
b0=$("$KJIT" cache stats --cache-dir "$T/c1" --json | field bytes)
head -c 5000 /dev/zero >"$T/c1/.tmp.op.Ab12Cd"; touch -d '-20 minutes' "$T/c1/.tmp.op.Ab12Cd"
head -c 100 /dev/zero >"$T/c1/.tmp.op.Fresh1"
mkdir "$T/c1/dir.cubin"
# A *.cubin of a name kjit does not write is not an entry either.
head -c 300000 /dev/zero >"$T/c1/libfoo.cubin"
j=$("$KJIT" cache stats --cache-dir "$T/c1" --json)
[ "$(echo "$j" | field entries)" = "$n0" ] && [ "$(echo "$j" | field bytes)" = "$b0" ] \
  && [ "$(echo "$j" | field other_files)" = 4 ] \
  || fail "stats counted a temp file, a directory or a foreign *.cubin as an entry: $j"
"$KJIT" cache stats --cache-dir "$T/c1" | grep -q "and 4 temp or other files, not counted" \
  || fail "stats text: $("$KJIT" cache stats --cache-dir "$T/c1")"
out=$("$KJIT" cache ls --cache-dir "$T/c1")
echo "$out" | grep -q "\.tmp\.op\.Ab12Cd  # temp file" || fail "ls does not mark the temp file: $out"
echo "$out" | grep -q "dir\.cubin  # not a regular file" || fail "ls does not mark the directory: $out"
echo "$out" | grep -q "libfoo\.cubin  # not kjit's (name)" || fail "ls does not mark the foreign *.cubin: $out"
victim=$(ls "$T/c1"/timestep_sinusoid.*.cubin | head -1)
# (A file system may clamp the time: then ls prints a date, and must not crash either way.)
if touch -d @9223372036854775807 "$victim" 2>/dev/null; then
  out=$("$KJIT" cache ls --cache-dir "$T/c1" 2>&1) || fail "ls with an mtime localtime cannot convert: $out"
  echo "$out" | grep -q "  $(basename "$victim")\$" || fail "ls of a far mtime: $out"
  [ "$(stat -c %Y "$victim")" = 9223372036854775807 ] && ! echo "$out" | grep -q "@9223372036854775807" \
    && fail "ls did not print the unconvertible mtime as seconds: $out"
fi
# clear leaves a directory named like an entry, a foreign *.cubin and a
# write in progress (a temp file younger than 10 minutes) alone, and
# removes the rest.
out=$("$KJIT" cache clear --cache-dir "$T/c1") || fail "clear: $out"
echo "$out" | grep -q "(spared 1 temp file of writes in progress)" || fail "clear does not say what it spared: $out"
[ "$("$KJIT" cache stats --cache-dir "$T/c1" --json | field entries)" = 0 ] || fail "entries after clear"
[ -d "$T/c1/dir.cubin" ] && [ ! -e "$T/c1/.tmp.op.Ab12Cd" ] || fail "clear removed the directory or kept the old temp file"
[ -e "$T/c1/.tmp.op.Fresh1" ] && [ -e "$T/c1/libfoo.cubin" ] || fail "clear removed a fresh temp file or a foreign *.cubin"
rmdir "$T/c1/dir.cubin"; rm "$T/c1/.tmp.op.Fresh1" "$T/c1/libfoo.cubin"

# Only names kjit writes are its own: a file of the user's that merely
# starts with ".tmp." is not a temp file, a lock file not named
# "<32 hex>.lock" is not a lock, and clear leaves both; the removed count
# includes the stale locks it did remove. A directory of a temp file's name
# is not a temp file: verify names it as what it is, clear leaves it.
for f in .tmp.session .tmp..AB12 .tmp.op.Ab_12C .tmp.op.Ab12C; do
  echo mine >"$T/c1/$f"; touch -d '-1 day' "$T/c1/$f"
done
mkdir -p "$T/c1/locks" "$T/c1/.tmp.dir.Ab12Cd"; touch -d '-1 day' "$T/c1/.tmp.dir.Ab12Cd"
echo mine >"$T/c1/locks/db.lock"
: >"$T/c1/locks/0123456789abcdef0123456789abcdef.lock"
out=$("$KJIT" cache ls --cache-dir "$T/c1")
echo "$out" | grep -q "\.tmp\.session\|\.tmp\.op\.Ab12C\b" && fail "ls lists a user's .tmp.* file as kjit's: $out"
j=$("$KJIT" cache verify --cache-dir "$T/c1" --json); rc=$?
[ $rc = 1 ] && echo "$j" | python3 -c '
import json, sys
d = json.load(sys.stdin)
bad = {e["file"]: e.get("problem", "") for e in d["entries_list"] if not e["ok"]}
assert list(bad) == [".tmp.dir.Ab12Cd"], bad
assert bad[".tmp.dir.Ab12Cd"].startswith("a directory, so not a temp file"), bad' ||
  fail "verify of a temp-named directory: $rc $j"
out=$("$KJIT" cache clear --cache-dir "$T/c1") || fail "clear: $out"
echo "$out" | grep -q "^removed 1 files" || fail "clear removed other than the one stale lock: $out"
for f in .tmp.session .tmp..AB12 .tmp.op.Ab_12C .tmp.op.Ab12C locks/db.lock .tmp.dir.Ab12Cd; do
  [ -e "$T/c1/$f" ] || fail "clear removed $f, not kjit's"
done
[ -e "$T/c1/locks/0123456789abcdef0123456789abcdef.lock" ] && fail "clear kept a stale lock"
rm -r "$T/c1"/.tmp.session "$T/c1"/.tmp..AB12 "$T/c1"/.tmp.op.Ab_12C "$T/c1"/.tmp.op.Ab12C "$T/c1/locks/db.lock" \
  "$T/c1/.tmp.dir.Ab12Cd"
# A lock directory's place taken by a file: verify says so as kjit's own
# name (not a foreign file), clear removes it and counts it.
rmdir "$T/c1/locks"; echo x >"$T/c1/locks"
j=$("$KJIT" cache verify --cache-dir "$T/c1" --json)
echo "$j" | python3 -c '
import json, sys
e = [e for e in json.load(sys.stdin)["entries_list"] if e["file"] == "locks"]
assert len(e) == 1 and not e[0]["ok"] and "kind" not in e[0], e' || fail "verify --json of a file named locks: $j"
out=$("$KJIT" cache clear --cache-dir "$T/c1") && echo "$out" | grep -q "^removed 1 files" && [ ! -e "$T/c1/locks" ] ||
  fail "clear of a file named locks: $out"
# A cache directory that does not exist: nothing to clear, and said.
out=$("$KJIT" cache clear --cache-dir "$T/no/such/dir"); rc=$?
[ $rc = 0 ] && [ "$out" = "nothing to clear: $T/no/such/dir does not exist" ] || fail "clear of a missing dir: $rc $out"
[ "$("$KJIT" cache clear --cache-dir "$T/no/such/dir" --json | field exists)" = False ] || fail "clear --json of a missing dir"
[ "$("$KJIT" cache clear --cache-dir "$T/c1" --json | field exists)" = True ] || fail "clear --json of a cache dir"
[ -e "$T/no" ] && fail "clear created the missing dir"

# --opt=VALUE is not taken; the message shows how to write it. A stray
# word is an unexpected argument, not an unknown option.
for args in "prewarm --ops=norm_modulate|unknown option '--ops=norm_modulate' (an option's value follows it after a space: --ops norm_modulate)" \
            "cache stats --cache-dir=/tmp|follows it after a space: --cache-dir /tmp" "info extra|unexpected argument 'extra'" \
            "tune extra|unexpected argument 'extra'" "cache stats -x|unknown option '-x'"; do
  out=$("$KJIT" ${args%%|*} 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -qF -- "${args#*|}" || fail "${args%%|*}: $rc $out"
done
# An option that takes no value, given one: said so, not "write it after a space".
for args in "info --json=1|unknown option '--json=1' (--json takes no value)" \
            "cache stats --json=yes|(--json takes no value)" "prewarm --list=x|(--list takes no value)"; do
  out=$("$KJIT" ${args%%|*} 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -qF -- "${args#*|}" && ! echo "$out" | grep -q "after a space" || fail "${args%%|*}: $rc $out"
done
"$KJIT" --help | grep -q -- "--version" || fail "kjit --help does not list --version"
# Without NVRTC, info's archs line says so rather than ending blank.
KJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so "$KJIT" info | grep -q "^archs    none" ||
  fail "info without NVRTC: $(KJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so "$KJIT" info)"
# "--=x" names no option: no hint built from it.
out=$("$KJIT" cache stats --=x 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -qF -- "unknown option '--=x'" && ! echo "$out" | grep -q "follows it" ||
  fail "cache stats --=x: $rc $out"

# A socket path longer than a Unix socket takes: a usage error in serve as in call.
long=$T/$(printf 'x%.0s' $(seq 120))/k.sock
for c in "serve --socket $long" "call --socket $long {}"; do
  out=$(timeout 10 "$KJIT" $c 2>&1); rc=$?
  [ $rc = 2 ] || fail "${c%% *} with a ${#long}-byte socket path: $rc $out"
done

# kjit serve's usage errors name the argument (exit 2, nothing started).
for args in "--bogus|unknown option '--bogus'" "--socket|--socket needs a value" \
            "stray|unexpected argument 'stray'" "--socket=|--socket '': expected a path" \
            "--allow-uid 1,,2|--allow-uid '1,,2': item 2 of 3 is empty" "--allow-gid 7,|--allow-gid '7,': item 2 of 2 is empty"; do
  a=${args%%|*}; want=${args#*|}
  # (timeout: the code before started a server on --socket '')
  if [ "$a" = "--socket=" ]; then out=$(timeout 10 "$KJIT" serve --socket "" 2>&1)
  else out=$(timeout 10 "$KJIT" serve $a 2>&1); fi
  rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q -- "$want" || fail "serve $a: $rc $out"
done

# kjit tune: --show works without a GPU; tuning without one says so; bad ops are refused.
"$KJIT" tune --show --cache-dir "$T/c1" >/dev/null || fail "tune --show"
if ! "$KJIT" info --json | grep -q '"gpus":\[{'; then
  out=$("$KJIT" tune --ops norm_modulate --hidden 256 --cache-dir "$T/c1-new" 2>&1); rc=$?
  [ $rc = 1 ] || fail "tune without a GPU exited $rc, want 1"
  echo "$out" | grep -qi "GPU" || fail "tune without a GPU: $out"
  [ -e "$T/c1-new" ] && fail "tune without a GPU created its cache directory"
  # A damaged tuning file is named before anything else (its entries are not
  # used; a save keeps it as tune.json.damaged), and left as it is here.
  mkdir -m 700 "$T/dmg"
  printf '{"format":2,"entries":[' >"$T/dmg/tune.json"
  out=$("$KJIT" tune --ops norm_modulate --cache-dir "$T/dmg" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "warning: the tuning file $T/dmg/tune.json is damaged" &&
    echo "$out" | grep -q "the first save keeps it as tune.json.damaged" || fail "tune with a damaged file: $rc $out"
  [ "$(cat "$T/dmg/tune.json")" = '{"format":2,"entries":[' ] || fail "tune without a GPU changed a damaged file"
  out=$("$KJIT" tune --show --cache-dir "$T/dmg" 2>&1)
  echo "$out" | grep -q "is damaged (.*): ignored; the next save keeps it as tune.json.damaged" || fail "tune --show, damaged: $out"
  # ... saying why, in JSON too.
  "$KJIT" tune --show --json --cache-dir "$T/dmg" | grep -q '"reason":"[^"]' || fail "tune --show --json, damaged: no reason"
  : >"$T/dmg/tune.json"
  out=$("$KJIT" tune --show --cache-dir "$T/dmg" 2>&1)
  echo "$out" | grep -q "the next save replaces it (not a regular file, or empty" || fail "tune --show, empty: $out"
fi
# An unknown op is called unknown; a known one without a launch config is named as such.
for a in "nope|unknown op 'nope'" "timestep_sinusoid|the op 'timestep_sinusoid' has no launch config to tune"; do
  out=$("$KJIT" tune --ops "${a%%|*}" --cache-dir "$T/c1" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -qF -- "${a#*|}" || fail "tune --ops ${a%%|*}: $rc $out"
done
out=$("$KJIT" tune --hidden 0 --cache-dir "$T/c1" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "'0' is not a size (tuned: multiples of 8 up to 16384)" || fail "tune --hidden 0: $rc $out"
for a in "--dtype bf16 --dtype fp16|--dtype given twice" "--show --device 3|--show takes no --ops, --hidden, --dtype or --device"; do
  out=$("$KJIT" tune ${a%%|*} --cache-dir "$T/c1" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -qF -- "${a#*|}" || fail "tune ${a%%|*}: $rc $out"
done
out=$("$KJIT" --version extra 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "takes no arguments, got 'extra'" || fail "kjit --version extra: $rc $out"
# Repeated ops are listed once (each 'all' added three names to a 64-slot
# list, and the names after it were written past its end); the list is read
# to its end, so the last bad name is still named.
many=$(printf 'all,%.0s' $(seq 22))norm_modulate,fused,nope
out=$("$KJIT" tune --ops "$many" --cache-dir "$T/c1" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "'nope'" || fail "tune --ops with 68 names: $rc $out"
# --show reads: a missing directory is reported, not created.
out=$("$KJIT" tune --show --cache-dir "$T/no/such/dir" 2>&1) || fail "tune --show of a missing dir: $out"
echo "$out" | grep -q "no tuning file" || fail "tune --show of a missing dir: $out"
[ -e "$T/no" ] && fail "tune --show created $T/no"
# ... but a directory that no use of the cache would accept is an error
# (not "damaged, rebuilt by the next kjit tune": no tune could write there).
echo x >"$T/afile"
out=$("$KJIT" tune --show --cache-dir "$T/afile" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "not a directory" || fail "tune --show of a file: $rc $out"
# ... and a path under a file says which is which.
out=$("$KJIT" cache stats --cache-dir "$T/afile/sub" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "$T/afile/sub: a directory on its path is a file" || fail "cache stats under a file: $rc $out"
out=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --arch sm_90 --cache-dir "$T/afile/sub" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "cannot create cache directory $T/afile/sub: a directory on its path is a file" ||
  fail "prewarm under a file: $rc $out"
# ... and from kjit serve, whose start-up error kept its first 1023 bytes:
# with a long path the reason was cut off.
D1500=$(printf 'd%.0s' $(seq 1500))
out=$(timeout 60 "$KJIT" serve --socket "$T/lp.sock" --cache-dir "$T/afile/$D1500" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | tail -n 1 | grep -q ": a directory on its path is a file$" ||
  fail "serve with a long cache path under a file: $rc $(echo "$out" | tail -c 200)"
[ -e "$T/lp.sock" ] && fail "a refused serve made its socket"
# A directory in the tuning file's place: left as it is (no save can rename
# over it), not "damaged, rebuilt by the next kjit tune".
mkdir -m 700 "$T/tdir" "$T/tdir/tune.json"
out=$("$KJIT" tune --show --cache-dir "$T/tdir" 2>&1) || fail "tune --show, a directory for the file: $out"
echo "$out" | grep -q "could not be read (a directory): ignored, and left as it is" || fail "tune --show, a directory for the file: $out"
# A file no save may replace (a newer format's, or a directory) refuses kjit
# tune before anything is tuned, with or without a GPU, and is left as it is.
mkdir -m 700 "$T/foreign"
printf '{"format":3,"entries":[]}' >"$T/foreign/tune.json"
for d in foreign tdir; do
  out=$("$KJIT" tune --ops norm_modulate --hidden 256 --cache-dir "$T/$d" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "no result could be saved into it; nothing tuned" &&
    ! echo "$out" | grep -q "needs a GPU" || fail "tune with an unsavable tuning file ($d): $rc $out"
done
echo "$out" | grep -q "could not be read (a directory)" || fail "tune, a directory for the file: $out"
[ "$(cat "$T/foreign/tune.json")" = '{"format":3,"entries":[]}' ] || fail "tune changed a newer format's file"
# A memory-only cache ('') keeps no tuning file: refused as prewarm refuses it
# (it read ./tune.json before).
# (In a directory of its own: $T/dmg exists only where no GPU is.)
mkdir -m 700 "$T/memonly"
printf 'garbage' >"$T/memonly/tune.json"
for a in "--show" "--ops norm_modulate"; do
  out=$(cd "$T/memonly" && "$KJIT" tune $a --cache-dir "" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q "a memory-only cache keeps no tuning file" || fail "tune $a --cache-dir '': $rc $out"
done
[ "$(ls -A "$T/memonly")" = tune.json ] && [ "$(cat "$T/memonly/tune.json")" = garbage ] ||
  fail "tune --cache-dir '' touched the working directory: $(ls -A "$T/memonly")"
# A cache path with no room left for tune.json under PATH_MAX: said, exit 1
# (it said "no tuning file", exit 0), and nothing made.
deep=$T/$(printf 'd%.0s' $(seq 200))
while [ ${#deep} -lt 4090 ]; do deep=$deep/$(printf 'd%.0s' $(seq 200)); done
deep=${deep:0:4090}
out=$("$KJIT" tune --show --cache-dir "$deep" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "no tuning file can be read under" || fail "tune --show, a path too long: $rc ${out:0:200}"
[ -e "$T/$(printf 'd%.0s' $(seq 200))" ] && fail "tune --show of a too long path created a directory"
mkdir -m 777 "$T/open"; chmod 777 "$T/open"
out=$("$KJIT" tune --show --cache-dir "$T/open" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "writable by group or others" || fail "tune --show of a 0777 dir: $rc $out"
# Device names are shown whole: two that differ only at their end stay apart.
mkdir -m 700 "$T/show"
ver=$("$KJIT" tune --show --json --cache-dir "$T/show" | field kjit)
ent='"op":"gated_residual","hidden":3072,"dtype":"bf16","fwd":{"rpc":1,"pf":0,"grid_per_sm":0},"bwd":{"bwd_pf":1,"accs":0}'
printf '{"format":1,"kjit":"%s","entries":[{"device":"NVIDIA GeForce RTX 4090",%s},{"device":"NVIDIA GeForce RTX 4090 D",%s}]}\n' \
  "$ver" "$ent" "$ent" >"$T/show/tune.json"
out=$("$KJIT" tune --show --cache-dir "$T/show" 2>&1) || fail "tune --show of two entries: $out"
echo "$out" | grep -q "NVIDIA GeForce RTX 4090 D " || fail "tune --show cut a device name: $out"
[ "$(echo "$out" | grep -c "NVIDIA GeForce RTX 4090")" = 2 ] || fail "tune --show: two devices expected: $out"
echo "$out" | grep -q "not used" && fail "tune --show marked a config of the space: $out"
# A config no device's space holds (rpc 3: a hand edit) is listed with a mark.
printf '{"format":1,"kjit":"%s","entries":[{"device":"X",%s}]}\n' "$ver" \
  "$(echo "$ent" | sed 's/"rpc":1/"rpc":3/')" >"$T/show/tune.json"
out=$("$KJIT" tune --show --cache-dir "$T/show" 2>&1) || fail "tune --show of an entry outside the space: $out"
echo "$out" | grep -q "^X .*(not used: outside the tuning space)" || fail "tune --show, rpc 3 not marked: $out"
"$KJIT" tune --show --json --cache-dir "$T/show" | python3 -c 'import json,sys; e=json.load(sys.stdin)["entries"]; sys.exit(not (len(e) == 1 and e[0]["usable"] is False))' ||
  fail "tune --show --json: rpc 3 not usable: false"
# kjit tune's name for the fused op works in prewarm too.
out=$("$KJIT" prewarm --ops fused --hidden 256 --arch sm_90 --cache-dir "$T/fused" --json 2>&1) ||
  fail "prewarm --ops fused: $out"
# kjit call: any option it does not know is named, '-x' as much as '--x'.
out=$("$KJIT" call -x '{}' 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "unknown option '-x'" || fail "call -x: $rc $out"

# prewarm lists each op and each arch once, however often or however spelled.
ja=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --arch sm_90 --cache-dir "$T/c9" --json) || fail "prewarm: $ja"
jb=$("$KJIT" prewarm --ops timestep_sinusoid,adaln_row_gather,timestep_sinusoid --hidden 8 --arch sm90,sm_90,90 \
     --cache-dir "$T/c9" --json) || fail "prewarm with repeats: $jb"
jc=$("$KJIT" prewarm --ops timestep_sinusoid,adaln_row_gather --hidden 8 --arch sm_90 --cache-dir "$T/c9" --json) \
  || fail "prewarm of two ops: $jc"
[ "$(echo "$jb" | field kernels)" = "$(echo "$jc" | field kernels)" ] || fail "repeated ops or archs: $jb vs $jc"
[ "$(echo "$ja" | field kernels)" -lt "$(echo "$jc" | field kernels)" ] || fail "two ops vs one: $ja vs $jc"

# A cache directory that cannot be created: the message gives mkdir's own
# reason, not that of a stat after it.
if [ "$(id -u)" != 0 ]; then
  mkdir -m 500 "$T/ro"; nodir=$T/ro/sub/c; want="Permission denied"
else
  nodir=/sys/kjit-test-$$/c; want=$(mkdir /sys/kjit-test-$$ 2>&1 | sed 's/.*: //')
fi
if [ -n "$want" ] && [ "$want" != "No such file or directory" ]; then
  out=$("$KJIT" prewarm $OPS --cache-dir "$nodir" 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q "cannot create cache directory.*: $want" || fail "mkdir failure: $rc $out (want $want)"
fi
# A path too long for the system fails only after its first 4 KB of
# directories are made: they are removed again.
deep=$T/deep
for i in $(seq 25); do deep=$deep/$(printf 'd%.0s' $(seq 200)); done
out=$("$KJIT" prewarm $OPS --cache-dir "$deep" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "cannot create cache directory.*: the path is too long" && [ ! -e "$T/deep" ] ||
  fail "too long a cache path: rc $rc, $(echo "$out" | tail -c 200), left: $(ls -d "$T/deep" 2>&1)"

# Every --json answer has "ok" (true on success), and parses whatever bytes
# a file name holds: one that is not UTF-8 comes as \udcXX escapes, which
# os.fsencode turns back into its bytes.
mkdir -m 700 "$T/j8"
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --arch sm_90 --cache-dir "$T/j8" >/dev/null 2>&1 || fail "prewarm into j8"
: >"$T/j8/x"$'\xff'"y.cubin"
for c in "cache ls" "cache verify" "cache stats" "tune --show" "info"; do
  [ "$c" = info ] && dir=() || dir=(--cache-dir "$T/j8")
  "$KJIT" $c --json "${dir[@]}" >"$T/j8.out" 2>/dev/null
  python3 - "$T/j8.out" "$c" <<'PY' || fail "$c --json: $(cat "$T/j8.out")"
import json, os, sys
o = json.loads(open(sys.argv[1], "rb").read())
want = sys.argv[2] != "cache verify"  # the non-UTF-8 name is a bad entry there
assert o["ok"] is want, o
if sys.argv[2] in ("cache ls", "cache verify"):
    names = [os.fsencode(e["file"]) for e in o["entries_list"]]
    assert b"x\xffy.cubin" in names, names
PY
done
# In text, a name's newline, escape and non-ASCII bytes are written as \xNN
# (they split the line and reached the terminal as they were).
: >"$T/j8/a"$'\n'"b"$'\e'"[2J\\.cubin"
for c in ls verify; do
  "$KJIT" cache $c --cache-dir "$T/j8" >"$T/j8.txt" 2>/dev/null
  grep -qF 'x\xffy.cubin' "$T/j8.txt" && grep -qF 'a\x0ab\x1b[2J\\.cubin' "$T/j8.txt" &&
    ! grep -q $'\e' "$T/j8.txt" || fail "cache $c prints a name's control bytes: $(od -c "$T/j8.txt" | head)"
done
rm -f "$T/j8/a"$'\n'"b"$'\e'"[2J\\.cubin"

# An existing cache directory this user cannot write to: the run only
# checks that the kernels are there, compiling none (each was compiled and
# then thrown away): one not there fails at once, and a read-only cache
# that holds them all passes. As root, as nobody where setpriv exists (root
# writes through the mode bits).
as_user=()
ro=$T/ro-cache
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null; then
    ro=$(mktemp -d /tmp/kjit-ro.XXXXXX); chmod 755 "$ro"; mkdir "$ro/c"; chown 65534:65534 "$ro/c"; ro=$ro/c
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    ro=
  fi
else
  mkdir "$ro"
fi
if [ -n "$ro" ]; then
  chmod 500 "$ro"
  out=$(HOME=/nonexistent "${as_user[@]}" "$KJIT" prewarm $OPS --cache-dir "$ro" --json 2>"$T/ro.err"); rc=$?
  [ $rc = 1 ] && [ "$(echo "$out" | field compiled)" = 0 ] && [ "$(echo "$out" | field failed)" = 6 ] &&
    grep -q "cannot write to the cache directory $ro (Permission denied): checking that the kernels are there" "$T/ro.err" &&
    echo "$out" | grep -q "not in the cache directory $ro, which cannot be written: not compiled" ||
    fail "prewarm into an empty unwritable cache directory: $rc $out $(cat "$T/ro.err")"
  chmod 700 "$ro"
  HOME=/nonexistent "${as_user[@]}" "$KJIT" prewarm $OPS --cache-dir "$ro" >/dev/null 2>&1 || fail "prewarm as the owner"
  chmod 500 "$ro"
  out=$(HOME=/nonexistent "${as_user[@]}" "$KJIT" prewarm $OPS --cache-dir "$ro" --json 2>/dev/null); rc=$?
  [ $rc = 0 ] && [ "$(echo "$out" | field cached)" = 6 ] || fail "prewarm of a read-only cache that holds every kernel: $rc $out"
  # A damaged entry there cannot be removed: not counted as replaced (it
  # was counted twice, with a note that it was removed and compiled again).
  chmod 700 "$ro"
  bad=$(find "$ro" -maxdepth 1 -name '*.cubin' | head -n 1)
  truncate -s 10 "$bad"
  chmod 500 "$ro"
  out=$(HOME=/nonexistent "${as_user[@]}" "$KJIT" prewarm $OPS --cache-dir "$ro" --json 2>"$T/ro.err"); rc=$?
  [ $rc = 1 ] && [ "$(echo "$out" | field bad_entries)" = 0 ] && [ "$(echo "$out" | field failed)" = 1 ] &&
    ! grep -q "damaged cache entr" "$T/ro.err" && [ "$(stat -c %s "$bad")" = 10 ] ||
    fail "prewarm of a read-only cache with a damaged entry: $rc $out $(cat "$T/ro.err")"
  [ "$(id -u)" = 0 ] && rm -rf "$(dirname "$ro")"
fi

# A file in the lock directory's place: prewarm warns (builds are not
# shared between processes), verify names it and fails, clear removes it,
# and the next open makes the directory again (all silent before).
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --arch sm_90 --cache-dir "$T/lk" >/dev/null 2>&1 ||
  fail "prewarm into lk"
rm -rf "$T/lk/locks" && echo x >"$T/lk/locks"
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype bf16 --arch sm_90 --cache-dir "$T/lk" >/dev/null 2>"$T/lk.err" &&
  grep -q "locks is not a directory kjit can use" "$T/lk.err" || fail "prewarm with a file as locks: $(cat "$T/lk.err")"
out=$("$KJIT" cache verify --cache-dir "$T/lk" 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q "^BAD  locks: not a directory" || fail "verify with a file as locks: $rc $out"
"$KJIT" cache clear --cache-dir "$T/lk" >/dev/null 2>&1 && [ ! -e "$T/lk/locks" ] || fail "clear left the file named locks"
"$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --arch sm_90 --cache-dir "$T/lk" >/dev/null 2>"$T/lk.err" &&
  [ -d "$T/lk/locks" ] && ! grep -q "locks" "$T/lk.err" && "$KJIT" cache verify --cache-dir "$T/lk" >/dev/null 2>&1 ||
  fail "prewarm after clear: $(cat "$T/lk.err")"

# Past a file-size limit the store fails (EFBIG) and the run reports it:
# the signal ended it before, with no report (exit 153).
out=$(ulimit -f 4; "$KJIT" prewarm --ops timestep_sinusoid --hidden 256 --dtype fp32 --arch sm_90 \
  --cache-dir "$T/fsize" --json 2>"$T/fsize.err"); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | field not_stored)" = 1 ] && grep -q "file-size limit" "$T/fsize.err" &&
  [ -z "$(find "$T/fsize" -maxdepth 1 -type f)" ] ||
  fail "prewarm past a file-size limit: rc $rc, $out $(cat "$T/fsize.err")"

# --list: the kernels a prewarm would compile, each arch's own (the AdaLN
# ops' default config fitted to its shared memory: an sm_86 card launches
# another backward at 8192 than an H200; sm_90 and sm_100 the same), with
# no directory made.
for a in sm_86 sm_90 sm_100; do
  "$KJIT" prewarm --ops norm_modulate --hidden 8192 --arch $a --list --cache-dir "$T/never-made" | cut -d' ' -f2- >"$T/list_$a" ||
    fail "prewarm --list --arch $a"
done
[ "$(wc -l <"$T/list_sm_90")" -ge 10 ] && cmp -s "$T/list_sm_90" "$T/list_sm_100" && ! cmp -s "$T/list_sm_86" "$T/list_sm_90" &&
  [ "$(diff "$T/list_sm_86" "$T/list_sm_90" | grep -c '^< adaln.cuh kjit_adaln_bwd<')" = 2 ] ||
  fail "prewarm --list per arch: $(diff "$T/list_sm_86" "$T/list_sm_90")"
[ -e "$T/never-made" ] && fail "prewarm --list made its cache directory"
# An arch however spelled is listed as sm_<n>, once (it was listed as typed).
[ "$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --arch 90,sm90,sm_90 --list | cut -d' ' -f1)" = sm_90 ] ||
  fail "prewarm --list --arch 90,sm90,sm_90: $("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --arch 90,sm90 --list)"
# sm_110 takes 227 KiB a block as sm_90 does (the fused op's fp32 backward at
# 12296 fits the fast path there); sm_88, not in the table, gets the 200 KiB
# the built-in configs assume (the generic backward).
# (Where NVRTC knows both: 13.0 and later.)
if "$KJIT" info | grep -q ' sm_88 .* sm_110 '; then
  for a in sm_88 sm_90 sm_110; do
    "$KJIT" prewarm --ops gated_residual_norm_modulate --hidden 12296 --dtype fp32 --arch $a --list | cut -d' ' -f2- >"$T/flist_$a" ||
      fail "prewarm --list --arch $a (fused fp32 12296)"
  done
  cmp -s "$T/flist_sm_90" "$T/flist_sm_110" && grep -q 'kjit_adaln_bwd<3, float, float, int, 12296,' "$T/flist_sm_90" &&
    grep -q 'kjit_adaln_bwd<3, float, float, int, 0,' "$T/flist_sm_88" ||
    fail "prewarm --list sm_110 / sm_88: $(diff "$T/flist_sm_90" "$T/flist_sm_110") / $(diff "$T/flist_sm_88" "$T/flist_sm_90")"
fi
out=$("$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --arch sm_90 --list --json) &&
  echo "$out" | python3 -c 'import json,sys; o=json.load(sys.stdin); assert o["ok"] and o["kernels"][0]["kernel"].startswith("kjit_sinusoid<"), o' ||
  fail "prewarm --list --json: $out"

# An option given twice is refused (the first value was dropped unsaid).
for a in "prewarm --jobs 2 --jobs 3" "cache stats --cache-dir $T/a --cache-dir $T/b" \
         "serve --socket $T/s1 --socket $T/s2" "serve --max-clients 5 --max-clients 7" "call --timeout 5 --timeout 6 {}"; do
  out=$(timeout 20 "$KJIT" $a 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q "given twice" || fail "$a: $rc $out"
done
[ -e "$T/s1" ] || [ -e "$T/s2" ] && fail "a refused serve made its socket"
# ... except serve's id lists, which add up (the second list is read: its bad id is named).
out=$(timeout 20 "$KJIT" serve --socket "$T/s3" --allow-uid 1 --allow-uid x 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "'x' is not a numeric id" || fail "serve --allow-uid twice: $rc $out"

# An option's value is never the next option; numbers are plain digits.
for args in "prewarm --cache-dir --json|--cache-dir needs a value" "prewarm --ops --hidden 256|--ops needs a value" \
            "prewarm --hidden +256|'+256' is not a size" "prewarm --hidden _256|' 256' is not a size" \
            "prewarm --jobs --json|--jobs needs a value" "tune --device --json|--device needs a value" \
            "cache stats --cache-dir --json|--cache-dir needs a value" "call --socket --events {}|--socket needs a value" \
            "serve --max-clients --socket x|--max-clients needs a value" "serve --idle-timeout _5|expected seconds" \
            "serve --idle-timeout 0.0001|below the 1 ms resolution" "tune --hidden 12abc|'12abc' is not a size" \
            "help --version|unknown command '--version'" "call {} {}|one JSON request only" \
            "call --timeout -1 {}|--timeout '-1': expected milliseconds" "call --timeout x {}|--timeout 'x': expected" \
            "call --payload-out $T {}|--payload-out '$T': cannot write it: Is a directory" \
            "cache|missing subcommand: stats, ls, verify or clear" "cache bogus|unknown subcommand 'bogus'" \
            "serve --socket $T/s4 --max-pending 0|--max-pending '0': expected 1..4096" \
            "serve --socket $T/s4 --allow-uid $(seq -s, 1 20) --allow-uid $(seq -s, 21 40)|more than 32 ids in all" \
            "prewarm --ops timestep_sinusoid --hidden 8 --dtype int32|--dtype: 'int32' is not one of fp32, bf16, fp16" \
            "tune --ops norm_modulate --hidden 256 --dtype int32|--dtype: 'int32' is not one of" \
            "prewarm --ops _|--ops '': expected a comma list of op names"; do
  a=${args%%|*}; want=${args#*|}
  # (_: a leading space in the value)
  case "$a" in
    *" _256") out=$("$KJIT" prewarm --hidden " 256" --cache-dir "$T/never2" 2>&1) ;;
    *" _5") out=$(timeout 10 "$KJIT" serve --idle-timeout " 5" 2>&1) ;;
    *"--ops _") out=$("$KJIT" prewarm --ops "" 2>&1) ;;
    *) out=$(timeout 10 "$KJIT" $a 2>&1) ;;
  esac
  rc=$?
  [ $rc = 2 ] && echo "$out" | grep -qF -- "$want" || fail "kjit $a: $rc $out"
done
[ -e "$T/never2" ] || [ -e ./--json ] && fail "a refused option value created a directory"
[ -e "$T/s4" ] && fail "a serve refused for its options made its socket"
# kjit help CMD is kjit CMD --help.
[ "$("$KJIT" help prewarm)" = "$("$KJIT" prewarm --help)" ] || fail "kjit help prewarm"
"$KJIT" help | grep -q "kjit help <command>" || fail "kjit help"

# --json and work that fails: one JSON object on stdout naming the error (and
# the line on stderr), exit 1, for every cache subcommand on a missing
# directory and for tune without a GPU.
for sub in stats ls verify; do
  out=$("$KJIT" cache $sub --json --cache-dir "$T/missing-dir" 2>/dev/null); rc=$?
  [ $rc = 1 ] && [ "$(echo "$out" | field ok)" = False ] && echo "$out" | field error | grep -q "does not exist" \
    || fail "cache $sub --json on a missing directory: $rc '$out'"
done
if ! "$KJIT" info --json | grep -q '"gpus":\[{'; then
  out=$("$KJIT" tune --ops norm_modulate --hidden 256 --dtype bf16 --cache-dir "$T/tune-nogpu" --json 2>/dev/null); rc=$?
  [ $rc = 1 ] && [ "$(echo "$out" | field command)" = tune ] && echo "$out" | field error | grep -q "needs a GPU" \
    || fail "tune --json without a GPU: $rc '$out'"
fi

[ $fails = 0 ] && echo "test_cli: all checks passed" || echo "test_cli: $fails check(s) FAILED"
[ $fails = 0 ]
