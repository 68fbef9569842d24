#!/usr/bin/env bash
# The binding's GPU tests under CTest (label gpu): tests/python/test_torch_gpu.py
# in both eager modes (autograd.Function, KJIT_EAGER=custom_op) and
# tests/python/test_client_gpu.py. CTest sets KJIT_LIBRARY and KJIT_BIN.
# Exit 77 (skipped) without python3, or torch with a CUDA device, as the C
# gpu tests skip without a driver; with KJIT_REQUIRE_GPU set that is a
# failure instead. A sanitizer build is always skipped: torch is not built
# for ASan.
set -u
PY=${PYTHON:-python3}
skip() {
  case "${KJIT_REQUIRE_GPU:-0}" in
    0) echo "test_python_gpu: $1: skipped"; exit 77 ;;
    *) echo "test_python_gpu: $1, and KJIT_REQUIRE_GPU is set: failed" >&2; exit 1 ;;
  esac
}
if [ -n "${KJIT_LIBRARY:-}" ] && readelf -d "$KJIT_LIBRARY" 2>/dev/null | grep -q libasan; then
  echo "test_python_gpu: a sanitizer build (torch is not built for ASan): skipped"
  exit 77
fi
command -v "$PY" >/dev/null 2>&1 || skip "no $PY"
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' >/dev/null 2>&1 ||
  skip "no torch with a CUDA device"
d=$(dirname "$0")/python
fail=0
run() {
  echo "== $*"
  "$@" || { echo "test_python_gpu: FAILED: $*" >&2; fail=1; }
}
run "$PY" "$d/test_torch_gpu.py"
run env KJIT_EAGER=custom_op "$PY" "$d/test_torch_gpu.py"
run "$PY" "$d/test_client_gpu.py"
exit $fail
