#!/usr/bin/env bash
# A cluster probe (bench/cluster_probe, bench/cluster_fwd_probe) without a
# GPU: --compile-only compiles every one of its COUNT kernels with NVRTC for
# sm_90 (the forward probe for sm_90a; exit 0, ptxas's report printed), and a
# bad ROWS argument (or environment variable ENV, when given) exits 2 naming
# it. The probe links
# the driver library, so on a machine without one it runs against the
# toolkit's stub (STUB: its libcuda.so), which answers every call with an
# error. 77 without a stub.
# Usage: test_cluster_probe.sh PROBE STUB COUNT [ENV]
set -u
P=$1 STUB=$2 COUNT=$3 ENV=${4:-}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
if ! ldd "$P" | grep -q "libcuda.so.1 => /"; then
  [ -f "$STUB" ] || { echo "SKIP: no driver library and no stub at $STUB"; exit 77; }
  ln -s "$STUB" "$T/libcuda.so.1"
  export LD_LIBRARY_PATH=$T${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
out=$("$P" --compile-only 2>&1); rc=$?
[ "$rc" = 0 ] || fail "--compile-only exited $rc: $(echo "$out" | tail -n 5)"
echo "$out" | grep -q "every variant compiled for sm_90" || fail "--compile-only: no success line: $(echo "$out" | tail -n 3)"
[ "$(echo "$out" | grep -c "Used [0-9]* registers")" = "$COUNT" ] || fail "--compile-only: not $COUNT kernels in ptxas's report"
. "$(dirname "$0")/refused.sh"
expect_refused 2 "ROWS must be integers in 1..262144, got '4k'" "$P" 4k
expect_refused 2 "ROWS must be integers in 1..262144, got '0'" "$P" 4097 0
if [ -n "$ENV" ]; then
  expect_refused 2 "$ENV must be an integer in 0..$((COUNT - 1)), got '$COUNT'" env "$ENV=$COUNT" "$P"
  expect_refused 2 "$ENV must be an integer in 0..$((COUNT - 1)), got '1x'" env "$ENV=1x" "$P"
fi
[ "$fails" = 0 ] && echo "test_cluster_probe $(basename "$P"): all checks passed"
exit $((fails > 0))
