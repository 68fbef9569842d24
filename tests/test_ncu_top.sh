#!/usr/bin/env bash
# bench/ncu_top.py on synthetic ncu source pages: the summary of a page
# (samples by opcode, by reason, the top instructions, N of them); a page
# with no samples; and each bad input (no page, a missing file, a page
# without the source header, a header without instructions, no sampling
# column, a bad N) exits 1 or 2 with a message on stderr that names what is
# wrong, and nothing on stdout.
set -u
PY=${PYTHON:-python3}
S=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"
bad() { expect_refused "$1" "$2" "$PY" "$S" "${@:3}"; } # want-rc expected-message args...
H='"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_barrier"'
{ echo '==PROF== Connected to process'; echo '"Kernel Name","kjit_adaln_bwd"'; echo "$H"
  echo '"0x0","LDG.E.128 R4, [R2.64]","100","30","10","25","0"'
  echo '"0x10","@P0 BRA 0x100","100","10","0","0","0"'
  echo '"0x20","FFMA R1, R2, R3, R1","200","50","20","5","0"'
  echo '"0x30","BAR.SYNC.DEFER_BLOCKING 0x0","100","10","0","0","9"'; } >"$T/page.csv"

out=$("$PY" "$S" "$T/page.csv") || fail "ncu_top page.csv exited $?"
echo "$out" | grep -q "^4 instructions, 100 samples (30 not issued)" || fail "totals: $out"
echo "$out" | grep -q "samples by opcode: FFMA 50.0%, LDG 30.0%, BRA 10.0%, BAR 10.0%" || fail "opcodes: $out"
echo "$out" | grep -q "by reason: stall_long_sb 30, stall_barrier 9" || fail "reasons: $out"
echo "$out" | grep -q "0x20  *50.00  *20.00  *200  FFMA R1, R2, R3, R1  \[stall_long_sb 5\]" || fail "top row: $out"
[ "$(echo "$out" | grep -c '^ *0x')" = 4 ] || fail "want 4 instruction rows: $out"
out=$("$PY" "$S" "$T/page.csv" 2) || fail "ncu_top page.csv 2 exited $?"
[ "$(echo "$out" | grep -c '^ *0x')" = 2 ] || fail "N = 2: want 2 rows: $out"
echo "$out" | grep -q "LDG.E.128" || fail "N = 2 dropped the second busiest: $out"
echo "$out" | grep -q "@P0 BRA" && fail "N = 2 kept a 10% row: $out"

{ echo "$H"; echo '"0x0","NOP","1","0","0","0","0"'; } >"$T/zero.csv"
out=$("$PY" "$S" "$T/zero.csv") || fail "a page with no samples exited $?"
echo "$out" | grep -q "^1 instructions, 0 samples" || fail "no samples: $out"

bad 2 "expected PAGE.csv"
bad 2 "N must be a positive integer, got '0'" "$T/page.csv" 0
bad 2 "N must be a positive integer, got 'x'" "$T/page.csv" x
bad 1 "cannot read $T/missing.csv" "$T/missing.csv"
echo '"Kernel Name","k"' >"$T/nohead.csv"
bad 1 "$T/nohead.csv: no source-page header" "$T/nohead.csv"
echo "$H" >"$T/norows.csv"
bad 1 "$T/norows.csv: a source-page header but no instructions" "$T/norows.csv"
{ echo '"Address","Source","Sampling"'; echo '"0x0","NOP","1"'; } >"$T/nocol.csv"
bad 1 "$T/nocol.csv: no 'Source' or 'Warp Stall Sampling" "$T/nocol.csv"
out=$("$PY" "$S" --help) || fail "--help exited $?"
echo "$out" | grep -q "^Usage: ncu_top.py PAGE.csv" || fail "--help: $out"
[ $fails = 0 ] && echo "test_ncu_top: all checks passed" || { echo "test_ncu_top: $fails check(s) FAILED"; exit 1; }
