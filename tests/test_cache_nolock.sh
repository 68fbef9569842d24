#!/usr/bin/env bash
# The tidying scan where the file system has no OFD locks (a preload makes
# F_OFD_* fail, tests/util/nolock_probe.c): a temp file is a leftover by its
# age alone, and only by a past one (an mtime ahead of the clock could be a
# live write on a file system whose clock runs ahead). With locks (the
# control), an unheld temp file more than 10 minutes from now either way is
# a leftover. Usage: test_cache_nolock.sh KJIT PROBE_LIB
set -u
KJIT=$1 LIB=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
args=(prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32 --arch sm_90)
"$KJIT" "${args[@]}" --cache-dir "$T/c" >"$T/out.txt" 2>&1 || fail "prewarm: $(cat "$T/out.txt")"
cp -a "$T/c" "$T/d"
# Three temp files in each directory: an hour old, an hour ahead, fresh.
for d in "$T/c" "$T/d"; do
  touch -d "-1 hour" "$d/.tmp.t.past00"
  touch -d "+1 hour" "$d/.tmp.t.ahead0"
  touch "$d/.tmp.t.fresh0"
  chmod 600 "$d"/.tmp.t.*
done
# The scan runs when the cache opens: a prewarm of the same kernel.
KJIT_LOG=1 LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" "${args[@]}" --cache-dir "$T/c" >"$T/out1.txt" 2>&1 || fail "prewarm without OFD locks: $(cat "$T/out1.txt")"
got=$(cd "$T/c" && ls -A | grep '^\.tmp\.' | sort | tr '\n' ' ')
[ "$got" = ".tmp.t.ahead0 .tmp.t.fresh0 " ] || fail "without OFD locks, want the past one removed and the others kept, left: '$got'"
"$KJIT" "${args[@]}" --cache-dir "$T/d" >"$T/out2.txt" 2>&1 || fail "prewarm with OFD locks: $(cat "$T/out2.txt")"
got=$(cd "$T/d" && ls -A | grep '^\.tmp\.' | sort | tr '\n' ' ')
[ "$got" = ".tmp.t.fresh0 " ] || fail "with OFD locks, want only the fresh one kept, left: '$got'"
echo "ok: without OFD locks only the past leftover went; with them both unheld old ones"
