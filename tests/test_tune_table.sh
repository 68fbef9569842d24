#!/usr/bin/env bash
# bench/tune_table.py: a missing file, a log without a `kjit tune --json`
# result and a cut-off result each exit 1 with a message naming the file and
# nothing on stdout; two results in one log are both read; a result that was
# tuned but not saved (ok false) keeps its times; --min-gap filters.
set -u
PY=${PYTHON:-python3}
S=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"
bad() { # file expected-message
    expect_refused 1 "$2" "$PY" "$S" "$1"
    case "$REFUSED_ERR" in *"$1"*) ;; *) fail "tune_table $1: message does not name the file" ;; esac
}
result() { # op hidden ok default_fwd_us tuned_fwd_us
    printf '{"op":"%s","hidden":%s,"dtype":"bf16","ok":%s,"rows":[32768],' "$1" "$2" "$3"
    printf '"fwd":{"rpc":2,"pf":1,"grid_per_sm":2},"default_fwd":{"rpc":4,"pf":1,"grid_per_sm":1},'
    printf '"bwd":{"bwd_pf":1,"accs":1},"default_bwd":{"bwd_pf":1,"accs":1},'
    printf '"fwd_us_rows":[%s],"default_fwd_us_rows":[%s],"bwd_us_rows":[100.0],"default_bwd_us_rows":[100.0]}' "$5" "$4"
}
bad "$T/missing.log" "No such file"
echo "no result here" >"$T/none.log"
bad "$T/none.log" "no kjit tune --json result"
{ echo "kjit: tuner: a log line"; printf '{"device":"H200","results":[%s' "$(result norm_modulate 5376 true 200.0 100.0)"; } >"$T/cut.log"
bad "$T/cut.log" "cut off or damaged"

{ echo "log"; printf '{"device":"H200","results":[%s]}\n' "$(result norm_modulate 5376 true 200.0 100.0)"
  echo "more log"; printf '{"device":"H200","results":[%s]}\n' "$(result gated_residual 4096 false 101.0 100.0)"; } >"$T/two.log"
out=$("$PY" "$S" "$T/two.log") || fail "tune_table two.log exited $?"
echo "$out" | grep -q "^norm_modulate .*5376.*100.0%" || fail "first result missing or wrong gap: $out"
echo "$out" | grep -q "^gated_residual .*4096.*101.0" || fail "unsaved result dropped: $out"
out=$("$PY" "$S" "$T/two.log" --min-gap 50) || fail "tune_table --min-gap exited $?"
echo "$out" | grep -q "^norm_modulate" || fail "--min-gap 50 dropped the 100% gap: $out"
echo "$out" | grep -q "^gated_residual" && fail "--min-gap 50 kept the 1% gap: $out"
[ $fails = 0 ] && echo "test_tune_table: all checks passed" || { echo "test_tune_table: $fails check(s) FAILED"; exit 1; }
