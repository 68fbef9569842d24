#!/usr/bin/env bash
# bench_ops' arguments: each bad one exits 2 with a message naming it, before
# any GPU work and with nothing on stdout; --help exits 0. No GPU needed.
set -u
B=$1
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"
bad() { expect_refused 2 "$1" "$B" "${@:2}"; } # expected-message args...
bad "unknown op 'bogus'" --ops bogus
bad "unknown op 'nope'" --ops norm_modulate,nope
bad "'0' is not a row count" --rows 0
bad "'4k' is not a row count" --rows 4k
bad "'65537' is not a row count" --rows 65537
bad "at most 8 row counts" --rows 1,2,3,4,5,6,7,8,9
bad "'zipf' is not uniform or runs" --index zipf
bad "usage" --sweeep
"$B" --help 2>/dev/null | grep -q usage || fail "bench_ops --help must print the usage and exit 0"
[ "$fails" = 0 ] && echo "test_bench_args: all checks passed"
exit $((fails > 0))
