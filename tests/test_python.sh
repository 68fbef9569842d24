#!/usr/bin/env bash
# The Python binding's CPU tests (tests/python/test_core.py): no GPU needed,
# torch optional. CTest sets KJIT_LIBRARY to the built libkjit.so.
# Exit 77 (skipped) when there is no python3.
set -eu
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "no $PY: skipped"; exit 77; }
if [ -n "${KJIT_LIBRARY:-}" ] && readelf -d "$KJIT_LIBRARY" 2>/dev/null | grep -q 'libasan'; then
  # A sanitizer build: the ASan runtime must be loaded before python itself;
  # python's own allocations are not ours to leak-check, and torch is left
  # out (it is not built for ASan).
  export LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so)${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export KJIT_TEST_WITHOUT_TORCH=1
fi
exec "$PY" "$(dirname "$0")/python/test_core.py" -v
