#!/usr/bin/env bash
# bench/timeline.py without a GPU: the stamped templates it writes compile
# with NVRTC (kjit prewarm through KJIT_TEMPLATE_DIR, the fast and the
# generic path), a saved run is summarised (the numbers checked against the
# stamps written here), and bad input (a saved run without stamps, templates
# whose text moved) exits 1 with a message, writing nothing.
set -u
PY=${PYTHON:-python3}
S=$1 KJIT=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
command -v "$PY" >/dev/null || { echo "SKIP: no $PY"; exit 77; }

"$PY" "$S" --patch "$T/tpl" || fail "--patch exited $?"
grep -q kjit_tl_bwd "$T/tpl/adaln.cuh" || fail "no stamps in the patched adaln.cuh"
cmp -s "$T/tpl/partition.cuh" "$(dirname "$S")/../kernel_templates/partition.cuh" || fail "partition.cuh changed"
out=$(KJIT_TEMPLATE_DIR=$T/tpl KJIT_CACHE_DIR=$T/cache "$KJIT" prewarm --ops norm_modulate --hidden 5376,1000 \
      --dtype bf16 --arch sm_90 2>&1) || fail "prewarm of the stamped templates exited $?: $out"
echo "$out" | grep -q " 0 failed" || fail "stamped templates failed to compile: $out"

# A saved run: two backward CTAs on one SM (clock 2 GHz: 0.5 ns a cycle),
# one forward CTA. Fields: c sm t0 t1 first pre-flush end rows changes,
# 2 x (row flush start), row stamps (cycles).
{ echo "STEP 0"; echo "BWD 0 0 0 1 1 1 1 1 1 0 0 0 -1 0 0 0"; echo "STEP 1"
  rows=$(seq -s ' ' 2000 2000 40000)
  echo "FWD 0 5 1000 31000"
  echo "BWD 0 5 40000 80000 4000 76000 80000 20 1 0 0 2000 -1 0 0 $rows"
  echo "BWD 1 5 40000 90000 6000 90000 100000 20 2 0 0 2000 7 8000 4000 $rows"; } >"$T/run.txt"
out=$("$PY" "$S" --summarise "$T/run.txt" --rows 64) || fail "--summarise exited $?"
for want in "2 CTAs" "forward, 1 CTAs: span 30.00 us" "backward span 50.00 us" "CTA ends (us): *p0 40.00 .*p100 50.00" \
    "per row (us): *p0 1.00 .*p100 1.00" "first row done (us): *p0 1.00" "after their first row: 1; there, flush p0 4.00" \
    "SMs with 2 CTA(s): 1"; do
  echo "$out" | grep -q -- "$want" || fail "summary lacks '$want': $out"
done

. "$(dirname "$0")/refused.sh"
bad() { expect_refused 1 "$1" "$PY" "$S" "${@:2}"; } # expected-message args...
: >"$T/empty.txt"
bad "no STEP line" --summarise "$T/empty.txt" --rows 64
echo "STEP 0" >"$T/nobwd.txt"
bad "no backward stamps" --summarise "$T/nobwd.txt" --rows 64
bad "No such file" --summarise "$T/missing.txt" --rows 64
bad "one --rows value" --summarise "$T/run.txt" --rows 64 128
# Templates whose text moved: refused naming the stamp, no directory written.
cp -r "$(dirname "$S")/../kernel_templates" "$T/old"
sed -i 's/#include "partition.cuh"/#include "partition2.cuh"/' "$T/old/adaln.cuh"
bad "the includes not found" --patch "$T/out" --templates "$T/old"
[ ! -e "$T/out" ] || fail "--patch with moved templates wrote $T/out"
bad "No such file" --patch "$T/out2" --templates "$T/missing"
[ ! -e "$T/out2" ] || fail "--patch without templates wrote $T/out2"

[ "$fails" = 0 ] && echo "test_timeline: all checks passed"
exit $((fails > 0))
