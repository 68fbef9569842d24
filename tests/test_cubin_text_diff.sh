#!/usr/bin/env bash
# bench/cubin_text_diff.py without a GPU: two caches prewarmed from the same
# kernels (the templates as they are, and a copy with a comment added) hold
# the same kernels (exit 0); a copy whose L2 hint switch is off (the default is on) changes the
# backward's code (exit 1, the kernel named); an entry whose register count
# alone is raised differs in its attributes; a damaged entry, an empty
# cache, one kernel in two entries and bad usage exit 2 with a message
# naming the problem.
set -u
PY=${PYTHON:-python3}
S=$1 KJIT=$2 TPL=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
command -v "$PY" >/dev/null || { echo "SKIP: no $PY"; exit 77; }

warm() { # templates cache
  KJIT_TEMPLATE_DIR=$1 "$KJIT" prewarm --ops norm_modulate --hidden 1000 --dtype bf16 --arch sm_90 \
    --cache-dir "$2" --json >"$T/prewarm.json" 2>&1 || fail "prewarm from $1 exited $?: $(cat "$T/prewarm.json")"
}
cp -r "$TPL" "$T/same" && echo "// a comment changes no kernel" >>"$T/same/adaln.cuh"
"$(dirname "$S")/template_variant.sh" "$T/hint" KJIT_L2_HINT 0 "$TPL" || fail "no KJIT_L2_HINT 0 variant"
warm "$TPL" "$T/a"; warm "$T/same" "$T/b"; warm "$T/hint" "$T/c"

out=$("$PY" "$S" "$T/a" "$T/b" 2>&1); rc=$?
[ "$rc" = 0 ] || fail "same kernels: exit $rc: $out"
echo "$out" | grep -q "; 0 differ in code or attributes, 0 only in their module's data, 0 only in the first, 0 only in the second" ||
  fail "same kernels: $out"
echo "$out" | grep -q "kernels: [1-9]" || fail "no kernels counted: $out"

out=$("$PY" "$S" "$T/a" "$T/c" --list 2>&1); rc=$?
[ "$rc" = 1 ] || fail "hint off: exit $rc, want 1: $out"
echo "$out" | grep -q "code: sm_90 _Z14kjit_adaln_bwd" || fail "hint off: the backward not named: $out"
echo "$out" | grep -q "code: .*kjit_adaln_fwd" && fail "hint off: a forward named: $out"

# The same code with one more register: an attribute the driver reads.
cp -r "$T/a" "$T/reg"
f=$(ls "$T/reg"/*.cubin | head -1)
"$PY" - "$S" "$f" <<'PYEOF' || fail "could not raise the register count of $f"
import struct, sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1]))
import cubin_text_diff as t
path = sys.argv[2]
raw = bytearray(open(path, "rb").read())
e = t.Elf(t.entry_image(bytes(raw)))
sec = next(s for s in e.sec if s["name"] == ".nv.info")
p = e.data(e.sec.index(sec)).find(b"\x04\x2f\x08\x00")  # EIATTR_REGCOUNT: symbol, count
if p < 0 or p % 4:
    sys.exit(1)
at = len(raw) - len(e.img) + sec["off"] + p + 8
struct.pack_into("<I", raw, at, struct.unpack_from("<I", raw, at)[0] + 8)
open(path, "wb").write(raw)
PYEOF
out=$("$PY" "$S" "$T/a" "$T/reg" 2>&1); rc=$?
[ "$rc" = 1 ] || fail "register count raised: exit $rc, want 1: $out"
echo "$out" | grep -q "; 1 differ in code or attributes, 0 only in their module's data" || fail "register count raised: $out"

. "$(dirname "$0")/refused.sh"
bad() { expect_refused 2 "$1" "$PY" "$S" "${@:2}"; } # expected-message args...
mkdir -p "$T/empty" "$T/cut"
bad "no kernel in any cache entry" "$T/a" "$T/empty"
f=$(ls "$T/a"/*.cubin | head -1)
head -c 200 "$f" >"$T/cut/$(basename "$f")"
bad "$(basename "$f"): has header lengths" "$T/a" "$T/cut"
bad "not a directory" "$T/a" "$T/missing"
cp -r "$T/a" "$T/twice"
cp "$f" "$T/twice/$(basename "$f" | sed 's/\.[0-9a-f]\{32\}\./.00000000000000000000000000000000./')"
bad "in two entries" "$T/a" "$T/twice"
bad "usage" "$T/a"
[ "$fails" = 0 ] && echo "test_cubin_text_diff: all checks passed"
