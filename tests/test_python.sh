#!/usr/bin/env bash
# The Python binding's CPU tests (tests/python/test_core.py): no GPU needed,
# torch optional. CTest sets KJIT_LIBRARY to the built libkjit.so.
# Exit 77 (skipped) when there is no python3.
set -eu
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "no $PY: skipped"; exit 77; }
exec "$PY" "$(dirname "$0")/python/test_core.py" -v
