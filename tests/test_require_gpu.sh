#!/bin/sh
# usage: test_require_gpu.sh KJIT_CLI GPU_TEST_BINARY
# On a machine without a GPU: a gpu test skips (77), and fails (1) when
# KJIT_REQUIRE_GPU is set, as run_device.sh sets it on the GPU host; the
# same for the run_if_gpu.sh wrapper. Skipped where a GPU is present.
cli=$1 bin=$2
here=$(dirname "$0")
"$cli" info --json | grep -q '"gpus":\[{' && { echo "a GPU is present: skipped"; exit 77; }
fail=0
expect() { # WANT ENV-VALUE COMMAND...
    want=$1 val=$2; shift 2
    if [ "$val" = unset ]; then (unset KJIT_REQUIRE_GPU; "$@") >/dev/null 2>&1; else KJIT_REQUIRE_GPU=$val "$@" >/dev/null 2>&1; fi
    got=$?
    [ "$got" = "$want" ] || { echo "FAIL: KJIT_REQUIRE_GPU=$val $*: exit $got, want $want"; fail=1; }
}
for v in unset 0 ""; do
    expect 77 "$v" "$bin"
    expect 77 "$v" "$here/run_if_gpu.sh" "$cli" true
done
for v in 1 yes; do
    expect 1 "$v" "$bin"
    expect 1 "$v" "$here/run_if_gpu.sh" "$cli" true
done
KJIT_REQUIRE_GPU=1 "$bin" 2>&1 | grep -q "KJIT_REQUIRE_GPU is set: failed" || { echo "FAIL: no message naming KJIT_REQUIRE_GPU"; fail=1; }
[ $fail = 0 ] && echo "test_require_gpu: ok"
exit $fail
