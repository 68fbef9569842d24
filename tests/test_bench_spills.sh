#!/usr/bin/env bash
# bench_spills: each bad argument exits 2 with a message naming it and
# nothing on stdout; --help exits 0; a small report lists every kernel of
# the op (NVRTC, no GPU; skipped without NVRTC).
set -u
B=$1
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
bad() { # expected-message args...
    local want=$1
    shift
    local out err rc
    out=$("$B" "$@" 2>/tmp/bench_spills_err.$$); rc=$?
    err=$(cat /tmp/bench_spills_err.$$)
    [ "$rc" = 2 ] || fail "bench_spills $*: exit $rc, want 2"
    [ -z "$out" ] || fail "bench_spills $*: wrote to stdout: $out"
    case "$err" in *"$want"*) ;; *) fail "bench_spills $*: message '$err' lacks '$want'" ;; esac
}
bad "'bogus' is not an AdaLN op" --ops bogus
bad "'0' is not a hidden size" --hidden 0
bad "'16385' is not a hidden size" --hidden 16385
bad "'5k' is not a hidden size" --hidden 5k
bad "'int8' is not fp32, bf16 or fp16" --dtype int8
bad "--hidden: empty list" --hidden ,
bad "at most 16 items" --hidden 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
bad "--arch needs a value" --arch
bad "unknown option '--spill'" --spill
"$B" --help 2>/dev/null | grep -q usage || fail "bench_spills --help must print the usage and exit 0"
out=$("$B" --ops gated_residual --hidden 256 --dtype bf16 2>/tmp/bench_spills_err.$$); rc=$?
if grep -q "NVRTC not found" /tmp/bench_spills_err.$$; then
    echo "test_bench_spills: no NVRTC: skipped"
    rm -f /tmp/bench_spills_err.$$
    exit 77
fi
[ "$rc" = 0 ] || fail "bench_spills on gated_residual 256 bf16: exit $rc ($(cat /tmp/bench_spills_err.$$))"
# The op's kernels: per index dtype a forward, a training forward, a
# backward; the partition, finisher and index-check kernels besides.
n=$(printf '%s\n' "$out" | grep -c "^gated_residual ")
[ "$n" -ge 6 ] || fail "bench_spills listed $n kernels of gated_residual, want >= 6: $out"
printf '%s\n' "$out" | grep -q "kjit_adaln_bwd<2, kjit::bf16, kjit::bf16, int, 256," || fail "no backward in: $out"
printf '%s\n' "$out" | grep -qE "^# [0-9]+ kernels, [0-9]+ spill \(sm_90\)" || fail "no summary line in: $out"
rm -f /tmp/bench_spills_err.$$
[ "$fails" = 0 ] && echo "test_bench_spills: all checks passed"
exit $((fails > 0))
