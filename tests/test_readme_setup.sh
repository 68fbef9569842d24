#!/usr/bin/env bash
# The README's set-up command installs the Debian packages only where one is
# missing: on a machine that has them a user without root or sudo builds
# (apt-get needs root and would stop the && list before the build). Runs the
# README's first command line with its build part replaced by a marker,
# against stub pkg-config / apt-get / sudo that log their calls.
# Usage: test_readme_setup.sh SOURCE_DIR
set -u
S=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The first indented line that runs apt-get is the set-up command.
line=$(grep -m1 '^    .*apt-get install' "$S/README.md" | sed 's/^    //')
[ -n "$line" ] || { echo "FAIL: no set-up command with apt-get in the README" >&2; exit 1; }
case $line in
*"&& cmake -S . -B build "*) ;;
*) echo "FAIL: the set-up command does not build with 'cmake -S . -B build': $line" >&2; exit 1 ;;
esac
cmd="${line%%&& cmake -S . -B build *}&& echo BUILD"
mkdir -p "$T/bin"
for t in apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n[ "%s" = sudo ] && exec "$@"\nexit 0\n' "$t" "$T" "$t" >"$T/bin/$t"
done
for t in cmake python3; do printf '#!/bin/sh\nexit 0\n' >"$T/bin/$t"; done
chmod +x "$T"/bin/*
run() { # $1: pkg-config's exit status; runs the command, prints its output
  printf '#!/bin/sh\nexit %s\n' "$1" >"$T/bin/pkg-config"
  chmod +x "$T/bin/pkg-config"
  rm -f "$T/calls"
  PATH="$T/bin:/usr/bin:/bin" bash -c "$cmd" 2>&1
}
out=$(run 0)
[ "$out" = BUILD ] && [ ! -e "$T/calls" ] ||
  { echo "FAIL: with every package present: output '$out', calls '$(cat "$T/calls" 2>/dev/null)'" >&2; exit 1; }
out=$(run 1)
[ "$out" = BUILD ] && grep -q "apt-get install -y .*libuv1-dev" "$T/calls" ||
  { echo "FAIL: with a package missing: output '$out', calls '$(cat "$T/calls" 2>/dev/null)'" >&2; exit 1; }
echo "ok: the set-up command runs apt-get only where a package is missing"
