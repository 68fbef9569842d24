#!/usr/bin/env bash
# Every cache writer holds an OFD lock on its temp file up to the rename
# (what tells another process's tidying scan that the write is live):
# `kjit prewarm` under a preload that probes each temp file's lock as it is
# renamed (tests/util/rename_probe.c). Usage: test_cache_lock.sh KJIT PROBE_LIB
set -u
KJIT=$1 LIB=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# A sanitizer build wants its runtime first; the preload comes after it.
RENAME_PROBE_OUT=$T/probe.txt LD_PRELOAD=$LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
  "$KJIT" prewarm --ops timestep_sinusoid --hidden 8 --dtype fp32,bf16 --arch sm_90 --cache-dir "$T/c" \
  >"$T/out.txt" 2>&1 || fail "prewarm: $(cat "$T/out.txt")"
[ -s "$T/probe.txt" ] || fail "the probe saw no rename of a temp file (is the preload used?): $(cat "$T/out.txt")"
n=$(grep -c '^held ' "$T/probe.txt")
[ "$n" -ge 2 ] || fail "want 2 entries renamed, the probe saw: $(cat "$T/probe.txt")"
grep -q '^unheld ' "$T/probe.txt" && fail "a temp file was renamed without its writer's lock: $(cat "$T/probe.txt")"
echo "ok: $n temp files renamed, each under its writer's lock"
