#!/usr/bin/env bash
# bench_ops' arguments: each bad one exits 2 with a message naming it, before
# any GPU work and with nothing on stdout; --help exits 0. No GPU needed.
set -u
B=$1
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
bad() { # expected-message args...
    local want=$1
    shift
    local out err rc
    out=$("$B" "$@" 2>/tmp/bench_args_err.$$); rc=$?
    err=$(cat /tmp/bench_args_err.$$)
    [ "$rc" = 2 ] || fail "bench_ops $*: exit $rc, want 2"
    [ -z "$out" ] || fail "bench_ops $*: wrote to stdout: $out"
    case "$err" in *"$want"*) ;; *) fail "bench_ops $*: message '$err' lacks '$want'" ;; esac
}
bad "unknown op 'bogus'" --ops bogus
bad "unknown op 'nope'" --ops norm_modulate,nope
bad "'0' is not a row count" --rows 0
bad "'4k' is not a row count" --rows 4k
bad "'65537' is not a row count" --rows 65537
bad "at most 8 row counts" --rows 1,2,3,4,5,6,7,8,9
bad "'zipf' is not uniform or runs" --index zipf
bad "usage" --sweeep
"$B" --help 2>/dev/null | grep -q usage || fail "bench_ops --help must print the usage and exit 0"
rm -f /tmp/bench_args_err.$$
[ "$fails" = 0 ] && echo "test_bench_args: all checks passed"
exit $((fails > 0))
