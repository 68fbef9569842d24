#!/usr/bin/env bash
# A cache writer killed mid-write leaves nothing in the directory: its bytes
# go to an unnamed file (O_TMPFILE) that is named only after its fsync.
# `kjit prewarm` under a preload that kills it at its first fsync
# (tests/util/kill_probe.c); then the directory holds no temp file, and a
# second prewarm stores every kernel, each written once and linked from its
# unnamed file (the probe logs the fsyncs and links). Skipped (77) where the file system
# has no O_TMPFILE (the named temp file is then the fallback, and a tidying
# scan removes it later). Usage: test_cache_kill.sh KJIT PROBE_LIB
set -u
KJIT=$1 LIB=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -m 700 "$T/c"
command -v python3 >/dev/null || { echo "skip: no python3 to probe for O_TMPFILE"; exit 77; }
# What the writer needs: an unnamed file in the directory, and a name for it
# through /proc/thread-self (else the library writes named temp files).
why=$(python3 - "$T/c" 2>&1 <<'PY'
import os, sys
d = sys.argv[1]
try:
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o600)
except OSError as e:
    sys.exit(f"no O_TMPFILE in {d}: {e}")
try:  # a dst_dir_fd makes it linkat(AT_SYMLINK_FOLLOW), as the writer's; plain link() does not follow
    dfd = os.open(d, os.O_RDONLY)
    os.link(f"/proc/thread-self/fd/{fd}", "probe", dst_dir_fd=dfd, follow_symlinks=True)
    os.unlink("probe", dir_fd=dfd)
except OSError as e:
    sys.exit(f"no link through /proc/thread-self: {e}")
PY
) || { echo "skip: $why"; exit 77; }
base=(prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32,bf16 --arch sm_90)
args=("${base[@]}" --cache-dir "$T/c")
# A sanitizer build wants its runtime first; the preload comes after it.
KILL_PROBE=1 LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" "${args[@]}" >"$T/out.txt" 2>&1
rc=$?
[ $rc -eq 137 ] || fail "want the prewarm killed (rc 137), got rc $rc: $(cat "$T/out.txt")"
left=$(ls -A "$T/c" | grep -v '^locks$')
[ -z "$left" ] || fail "the killed writer left in the cache directory: $left"
# The second prewarm under the probe's log: each entry written and fsync'd
# once, in an unnamed file that is then linked (not through the fallback).
PROBE_OUT=$T/probe.txt LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" "${args[@]}" >"$T/out2.txt" 2>&1 || fail "second prewarm: $(cat "$T/out2.txt")"
n=$(ls "$T/c" | grep -c '\.cubin$')
[ "$n" -eq 2 ] || fail "want 2 entries after the second prewarm, found $n: $(ls -A "$T/c")"
links=$(grep -c '^link \.tmp\.' "$T/probe.txt")
syncs=$(grep -c '^fsync$' "$T/probe.txt")
[ "$links" -eq 2 ] && [ "$syncs" -eq 2 ] ||
  fail "want 2 unnamed files linked and 2 fsyncs, the probe saw $links and $syncs: $(cat "$T/probe.txt")"
"$KJIT" cache verify --cache-dir "$T/c" >"$T/v.txt" 2>&1 || fail "verify: $(cat "$T/v.txt")"
# The fallbacks, one writer at a time: every entry still stored and whole,
# the reason logged, no temp file left. $1: the probe's switch; $2: the log
# line wanted once; $3: the links from an unnamed file wanted.
fallback() {
  local d=$T/$1
  mkdir -m 700 "$d"
  env "$1=1" PROBE_OUT="$d.probe" KJIT_LOG=1 LD_PRELOAD=$LIB \
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    "$KJIT" "${base[@]}" --cache-dir "$d" --jobs 1 >"$d.out" 2>&1 || fail "$1: prewarm: $(cat "$d.out")"
  [ "$(grep -c "$2" "$d.out")" -eq 1 ] || fail "$1: want one log line '$2': $(cat "$d.out")"
  [ "$(ls "$d" | grep -c '\.cubin$')" -eq 2 ] || fail "$1: want 2 entries: $(ls -A "$d")"
  [ -z "$(ls -A "$d" | grep '^\.tmp\.')" ] || fail "$1: temp files left: $(ls -A "$d")"
  [ "$(grep -c '^link ' "$d.probe")" -eq "$3" ] || fail "$1: want $3 links: $(cat "$d.probe")"
  "$KJIT" cache verify --cache-dir "$d" >"$d.v" 2>&1 || fail "$1: verify: $(cat "$d.v")"
}
# No link from /proc: logged once, both entries through named temp files.
fallback LINK_FAIL "cannot name an unnamed file" 0
# The unnamed file's fsync fails: that entry through a named temp file, the
# next one unnamed again.
fallback FSYNC_FAIL_FIRST "could not write an unnamed file" 1
echo "ok: the killed writer left nothing; then $n entries stored and verified; both fallbacks stored every entry"
