#!/usr/bin/env bash
# `kjit prewarm` checks at its end that the kernels it built are in the
# cache directory; when that final listing fails it says so and exits 1,
# with every kernel still stored. The listing is made to fail by a preload
# (tests/util/kill_probe.c: fdopendir fails from its N-th call): a first run
# under the probe counts the calls, a second run in a fresh directory fails
# the last of them. Usage: test_prewarm_list_fail.sh KJIT PROBE_LIB
set -u
KJIT=$1 LIB=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
base=(prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32,bf16 --arch sm_90 --jobs 1)
# A sanitizer build wants its runtime first; the preload comes after it.
probe() { LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 "$@"; }
mkdir -m 700 "$T/a" "$T/b"
PROBE_OUT=$T/count.txt probe "$KJIT" "${base[@]}" --cache-dir "$T/a" >"$T/a.txt" 2>&1 ||
  fail "the counting run: $(cat "$T/a.txt")"
calls=$(grep -c '^fdopendir$' "$T/count.txt")
[ "$calls" -ge 1 ] || fail "the counting run listed the directory $calls times"
LIST_FAIL_FROM=$calls probe "$KJIT" "${base[@]}" --cache-dir "$T/b" >"$T/b.txt" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "want exit 1 when the final listing fails, got $rc: $(cat "$T/b.txt")"
grep -q "kjit prewarm: cannot list $T/b to check that this run's kernels are there: cannot list cache directory $T/b: Input/output error" "$T/b.txt" ||
  fail "the message does not name the directory and the error: $(cat "$T/b.txt")"
n=$(ls "$T/b" | grep -c '\.cubin$')
[ "$n" -eq 2 ] || fail "want both kernels stored, found $n: $(ls -A "$T/b")"
# --json: ok false, missing -1 (not counted), the reason in list_error
mkdir -m 700 "$T/c"
LIST_FAIL_FROM=$calls probe "$KJIT" "${base[@]}" --cache-dir "$T/c" --json >"$T/c.txt" 2>"$T/c.err"
rc=$?
[ $rc -eq 1 ] || fail "--json: want exit 1, got $rc: $(cat "$T/c.txt" "$T/c.err")"
python3 - "$T/c.txt" "$T/c" <<'PY' || fail "--json: $(cat "$T/c.txt")"
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert o["ok"] is False and o["missing"] == -1 and o["compiled"] == 2, o
assert o["list_error"].endswith("Input/output error") and sys.argv[2] in o["list_error"], o
PY
echo "ok: the final listing's failure (call $calls of fdopendir) reported, exit 1, both kernels stored"
