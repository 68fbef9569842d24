#!/bin/sh
# usage: test_pip_install.sh SOURCE_DIR LIBKJIT
# `pip install ./bindings/python` as bindings/python/README.md says, into a
# fresh virtual environment, offline (the build backend is in the tree):
# once told where the library is through KJIT_LIBRARY, once with a copy of
# the library bundled into the package. Each time the installed package
# (not the tree's) is imported from outside the tree and its torch-free core
# answers: the runtime info, a workspace size, a refused op name.
# Exit 77 (skipped) when python3 cannot make a virtual environment with pip.
set -eu
src=$1
lib=$2
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
if ! python3 -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 || [ ! -x "$tmp/venv/bin/pip" ]; then
    echo "test_pip_install: python3 -m venv with pip is not available: skipped"
    cat "$tmp/venv.log"
    exit 77
fi
# A sanitizer build's library needs its runtime loaded before python:
# packaging is checked on the plain build.
if readelf -d "$lib" 2>/dev/null | grep -q libasan; then
    echo "test_pip_install: a sanitizer build: skipped"
    exit 77
fi
py=$tmp/venv/bin/python
check() { # $1: the library path the package must report (a prefix)
    (cd "$tmp" && env -u PYTHONPATH "$py" - "$1" <<'PY'
import os, sys
import kjit
import kjit.core as core

venv = os.path.realpath(sys.prefix)
where = os.path.realpath(kjit.__file__)
assert where.startswith(venv + os.sep), f"kjit imported from {where}, not the venv {venv}"
lib = os.path.realpath(core.library_path())
assert lib.startswith(os.path.realpath(sys.argv[1])), f"library {lib}, want under {sys.argv[1]}"
info = core.runtime_info()
assert isinstance(info["archs"], list) and info["device_count"] >= 0, info
ws = core.adaln_workspace("norm_modulate", 32768, 5376, 9)
assert 0 < ws <= 32 << 20, ws
try:
    core.adaln_workspace("norm_modulat", 1, 8, 1)
except ValueError as e:
    assert "norm_modulat" in str(e), e
else:
    raise AssertionError("an unknown op name was not refused")
print(f"test_pip_install: kjit {kjit.__file__} with {core.library_path()}: workspace {ws} bytes")
PY
    )
}

# 1. The package alone, the library named by KJIT_LIBRARY.
"$tmp/venv/bin/pip" install --no-index -q "$src/bindings/python" >"$tmp/pip1.log" 2>&1 ||
    { cat "$tmp/pip1.log"; echo "FAIL: pip install of bindings/python"; exit 1; }
KJIT_LIBRARY=$lib check "$(dirname "$lib")" || { echo "FAIL: the installed package with KJIT_LIBRARY"; exit 1; }

# 2. A copy of the library bundled into the package (in a copy of the
# package's folder: the tree is not written to), no KJIT_LIBRARY.
cp -R "$src/bindings/python" "$tmp/pkg"
chmod -R u+w "$tmp/pkg" # a read-only source tree's modes come along
rm -rf "$tmp/pkg/build" "$tmp/pkg"/*.egg-info "$tmp/pkg/kjit"/libkjit.so*
cp -L "$lib" "$tmp/pkg/kjit/libkjit.so" || { echo "FAIL: cannot bundle $lib"; exit 1; }
"$tmp/venv/bin/pip" install --no-index -q --force-reinstall "$tmp/pkg" >"$tmp/pip2.log" 2>&1 ||
    { cat "$tmp/pip2.log"; echo "FAIL: pip install with the library bundled"; exit 1; }
(unset KJIT_LIBRARY; check "$tmp/venv") || { echo "FAIL: the installed package with its bundled library"; exit 1; }
echo "test_pip_install: passed"
