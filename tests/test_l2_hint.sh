#!/usr/bin/env bash
# The templates' non-default L2 hint paths (common/kjit_l2.cuh: KJIT_L2_HINT
# 0, 1, 2, 8 and all three; the default is 3) compile with NVRTC for sm_90 and for sm_75 (no cache policies
# there), through KJIT_TEMPLATE_DIR and kjit prewarm, so that a switch the
# default leaves off does not rot. No GPU needed.
set -u
KJIT=$1 TPL=$2 VARIANT=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

grep -q '^#define KJIT_L2_HINT 3$' "$TPL/common/kjit_l2.cuh" || fail "kjit_l2.cuh: the default is not 3"
for v in 0 1 2 8 11; do
  rm -rf "$T/tpl"
  "$VARIANT" "$T/tpl" KJIT_L2_HINT "$v" "$TPL" || { fail "KJIT_L2_HINT $v not set"; continue; }
  out=$(KJIT_TEMPLATE_DIR=$T/tpl "$KJIT" prewarm --ops norm_modulate,gated_residual,fused,adaln_row_gather \
        --hidden 5376 --dtype bf16 --arch sm_90,sm_75 --cache-dir "$T/cache$v" --json 2>&1) ||
    fail "KJIT_L2_HINT $v: prewarm exited $?: $out"
  echo "$out" | grep -q '"failed":0,' || fail "KJIT_L2_HINT $v: kernels failed to compile: $out"
  echo "$out" | grep -q '"compiled":0,' && fail "KJIT_L2_HINT $v: nothing compiled: $out"
done
[ "$fails" = 0 ] && echo "test_l2_hint: all checks passed"
