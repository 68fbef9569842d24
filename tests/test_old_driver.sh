#!/bin/sh
# usage: test_old_driver.sh KJIT_CLI CC CUDA_API_H
# The driver table against fake libcuda.so.1 libraries built here from the
# symbols src/gpu/cuda_api.h names (every function returns CUDA_SUCCESS;
# cuDriverGetVersion says 12.4, cuDeviceGetCount 0 GPUs):
# - a CUDA 12.0-12.6 driver has cuEventElapsedTime, not _v2 (CUDA 12.8):
#   it loads (kjit took such a driver for none, every context compile-only);
# - one lacking a function kjit calls is no driver, and `kjit info` says
#   which function (it said "none (compile only)" alone).
cli=$1 cc=$2 api_h=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/kjit-old-driver.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail=0
syms=$(sed -n 's/.*XX([A-Za-z0-9]*, *\(cu[A-Za-z0-9_]*\)).*/\1/p' "$api_h")
[ "$(echo "$syms" | wc -l)" -ge 40 ] || { echo "FAIL: symbols not found in $api_h: $syms"; exit 1; }
# fake DIR DROP RENAME_FROM RENAME_TO
fake() {
    mkdir -p "$T/$1"
    {
        echo "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }"
        echo "int cuDeviceGetCount(int *n) { *n = 0; return 0; }"
        for s in $syms; do
            case $s in cuDriverGetVersion | cuDeviceGetCount | "$2") continue ;; "$3") s=$4 ;; esac
            echo "int $s(void) { return 0; }"
        done
    } >"$T/$1/fake.c"
    "$cc" -shared -fPIC -o "$T/$1/libcuda.so.1" "$T/$1/fake.c" || { echo "FAIL: building $1"; exit 1; }
}
info() { LD_LIBRARY_PATH="$T/$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" info --json 2>&1; }

fake new - - -
out=$(info new)
echo "$out" | grep -q '"driver":"12.4"' || { echo "FAIL: a 12.8+ driver: $out"; fail=1; }

fake old - cuEventElapsedTime_v2 cuEventElapsedTime
out=$(info old)
echo "$out" | grep -q '"driver":"12.4"' || { echo "FAIL: a driver with cuEventElapsedTime alone: $out"; fail=1; }
echo "$out" | grep -q 'driver_error' && { echo "FAIL: an error for a usable driver: $out"; fail=1; }

fake none - cuEventElapsedTime_v2 cuSomethingElse
out=$(info none)
echo "$out" | grep -q '"driver":"none"' && echo "$out" | grep -q '"driver_error":"no CUDA driver: libcuda.so.1 lacks cuEventElapsedTime_v2' ||
    { echo "FAIL: no elapsed-time function at all: $out"; fail=1; }

fake nomem cuMemAlloc_v2 - -
out=$(LD_LIBRARY_PATH="$T/nomem" "$cli" info 2>&1)
echo "$out" | grep -q "^driver   none (compile only)" && echo "$out" | grep -q "lacks cuMemAlloc_v2" ||
    { echo "FAIL: a driver without cuMemAlloc_v2: $out"; fail=1; }

[ $fail = 0 ] && echo "test_old_driver: ok"
exit $fail
