#!/usr/bin/env bash
# bench_spills: each bad argument exits 2 with a message naming it and
# nothing on stdout; --help exits 0; a small report lists every kernel of
# the op, --spills-only only the spilling ones, --space every candidate
# (NVRTC, no GPU; skipped without NVRTC).
set -u
B=$1
ERR=$(mktemp)
trap 'rm -f "$ERR"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"
bad() { expect_refused 2 "$1" "$B" "${@:2}"; } # expected-message args...
bad "'bogus' is not an AdaLN op" --ops bogus
bad "'0' is not a hidden size" --hidden 0
bad "'16385' is not a hidden size" --hidden 16385
bad "'5k' is not a hidden size" --hidden 5k
bad "' 5' is not a hidden size" --hidden " 5"
bad "'+8' is not a hidden size" --hidden +8
bad "'int8' is not fp32, bf16 or fp16" --dtype int8
bad "--hidden: empty item" --hidden ,
bad "--dtype: empty item" --dtype bf16,
bad "--ops: empty item" --ops ""
bad "at most 16 items" --hidden 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
bad "--arch needs a value" --arch
bad "--space: 'adaln_row_gather' has no tuning space" --space --ops adaln_row_gather
bad "unknown option '--spill'" --spill
out=$("$B" --help 2>"$ERR"); rc=$?
[ "$rc" = 0 ] || fail "bench_spills --help: exit $rc, want 0"
case "$out" in usage:*--space*) ;; *) fail "bench_spills --help: no usage with --space: $out" ;; esac
out=$("$B" --ops gated_residual --hidden 256 --dtype bf16 2>"$ERR"); rc=$?
if grep -qE "NVRTC (not found|could not be loaded)" "$ERR"; then
    echo "test_bench_spills: no NVRTC: skipped"
    exit 77
fi
[ "$rc" = 0 ] || fail "bench_spills on gated_residual 256 bf16: exit $rc ($(cat "$ERR"))"
# The op's kernels: per index dtype a forward, a training forward, a
# backward; the partition, finisher and index-check kernels besides.
n=$(printf '%s\n' "$out" | grep -c "^gated_residual ")
[ "$n" -ge 6 ] || fail "bench_spills listed $n kernels of gated_residual, want >= 6: $out"
printf '%s\n' "$out" | grep -q "kjit_adaln_bwd<2, kjit::bf16, kjit::bf16, int, 256," || fail "no backward in: $out"
printf '%s\n' "$out" | grep -qE "^# $n kernels, [0-9]+ spill \(sm_90\)" || fail "no summary of $n kernels in: $out"
# A target NVRTC does not know is named (exit 2, no report).
bad "--arch:" --arch sm_1 --ops gated_residual --hidden 256 --dtype bf16
# --spills-only: the summary still counts every kernel, lines only for
# spilling ones (none spill here).
out=$("$B" --spills-only --ops gated_residual --hidden 256 --dtype bf16 2>"$ERR"); rc=$?
[ "$rc" = 0 ] || fail "bench_spills --spills-only: exit $rc ($(cat "$ERR"))"
printf '%s\n' "$out" | grep -qE "^# $n kernels, 0 spill" || fail "--spills-only: summary: $out"
[ "$(printf '%s\n' "$out" | grep -c "^gated_residual ")" = 0 ] || fail "--spills-only listed kernels that do not spill: $out"
# --space: every forward and backward candidate, each kernel once, with its config.
out=$("$B" --space --ops gated_residual --hidden 256 --dtype bf16 2>"$ERR"); rc=$?
[ "$rc" = 0 ] || fail "bench_spills --space: exit $rc ($(cat "$ERR"))"
printf '%s\n' "$out" | grep -q "bwd bwd_pf 3 accs 2: kjit_adaln_bwd<2," || fail "--space: no bwd_pf 3 accs 2 candidate: $out"
printf '%s\n' "$out" | grep -q "fwd rpc 4 pf 3 grid 1: kjit_adaln_fwd<2," || fail "--space: no rpc 4 pf 3 candidate: $out"
dups=$(printf '%s\n' "$out" | grep "^gated_residual " | sed 's/.*: //' | sort | uniq -d)
[ -z "$dups" ] || fail "--space listed a kernel twice: $dups"
[ "$fails" = 0 ] && echo "test_bench_spills: all checks passed"
exit $((fails > 0))
