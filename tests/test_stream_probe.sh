#!/usr/bin/env bash
# bench/stream_probe.py's arguments, checked before torch is imported (so on
# a machine without torch or a GPU): each bad one exits 1 with a message
# naming it and nothing on stdout.
set -u
S=$1
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: no $PY"; exit 77; }
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"
bad() { expect_refused 1 "$1" "$PY" "$S" "${@:2}"; } # expected-message args...
bad "--flush 'disk': choose from read, memset, both" --flush disk
bad "--upstream 'zeros': choose from random, ones, both" --upstream zeros
bad "--streams 'own,side': choose from default, own" --streams own,side
bad "--streams 'both': choose from default, own" --streams both
bad "--rows '4097,abc': a comma list of positive row counts" --rows 4097,abc
bad "--rows '0': a comma list of positive row counts" --rows 0
[ "$fails" = 0 ] && echo "test_stream_probe: all checks passed"
exit $((fails > 0))
