#!/usr/bin/env bash
# bench/run_device.sh refuses a bad KJIT_CTEST_JOBS or KJIT_CLUSTER_PROBES
# before it builds or writes anything: exit 2, the variable and its value
# named on stderr, no $OUT and no build directory made. No GPU needed.
# Usage: test_run_device_args.sh RUN_DEVICE_SH
set -u
S=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
refused() { # WANT-IN-STDERR VAR=VALUE...
  local want=$1; shift
  rm -rf "$T/cwd" "$T/out"; mkdir "$T/cwd"
  err=$(cd "$T/cwd" && env "$@" OUT="$T/out" bash "$S" tests cluster 2>&1 >/dev/null); rc=$?
  [ "$rc" = 2 ] || fail "$*: exit $rc, want 2"
  case $err in *"$want"*) ;; *) fail "$*: stderr '$err' does not say \"$want\"" ;; esac
  [ ! -e "$T/out" ] || fail "$*: \$OUT was made"
  [ -z "$(ls -A "$T/cwd")" ] || fail "$*: it wrote into its directory: $(ls -A "$T/cwd")"
}
for v in x 0 04 -1 2a "2 3"; do # (empty is the default, 1)
  refused "KJIT_CTEST_JOBS must be a positive whole number, got '$v'" KJIT_CTEST_JOBS="$v"
done
refused "KJIT_CLUSTER_PROBES: 'norm_probe' is not cluster_probe or cluster_fwd_probe" \
  KJIT_CLUSTER_PROBES="cluster_fwd_probe norm_probe"
# A good KJIT_CTEST_JOBS passes its check (the refusal is then the probes').
refused "KJIT_CLUSTER_PROBES: 'x' is not" KJIT_CTEST_JOBS=4 KJIT_CLUSTER_PROBES=x
[ "$fails" = 0 ] && echo "test_run_device_args: all checks passed"
exit $((fails > 0))
