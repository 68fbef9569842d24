#!/usr/bin/env bash
# template_variant.sh DEST MACRO VALUE [TEMPLATES]: a copy of the kernel
# templates (default: the kernel_templates folder beside bench/) in DEST with
# the default of a switch changed: every `#define MACRO ...` line becomes
# `#define MACRO VALUE`. Use it through KJIT_TEMPLATE_DIR=DEST (run_device.sh
# ab, tests/test_l2_hint.sh). Exit 2, with DEST not created, when MACRO is not
# a macro name, VALUE not a word of letters, digits and _, DEST exists, or no
# template defines MACRO.
set -u
fail() { echo "template_variant: $*" >&2; exit 2; }
[ $# -eq 3 ] || [ $# -eq 4 ] || fail "usage: template_variant.sh DEST MACRO VALUE [TEMPLATES]"
dest=$1 m=$2 v=$3 src=${4:-$(dirname "$0")/../kernel_templates}
[[ $m =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail "'$m' is not a macro name"
[[ $v =~ ^[A-Za-z0-9_]+$ ]] || fail "value '$v' is not a word of letters, digits and _"
[ -d "$src" ] || fail "$src: no templates folder"
[ ! -e "$dest" ] || fail "$dest exists"
hits=$(cd "$src" && grep -rl "^#define $m " .) || true
[ -n "$hits" ] || fail "no template in $src defines $m"
tmp=$dest.tmp.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp" && cp -r "$src/." "$tmp/" || fail "cannot copy $src to $tmp"
(cd "$tmp" && sed -i "s/^#define $m .*/#define $m $v/" $hits) || fail "cannot edit the copy"
mv "$tmp" "$dest" || fail "cannot move the copy to $dest"
trap - EXIT
