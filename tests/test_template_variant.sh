#!/usr/bin/env bash
# bench/template_variant.sh: a variant differs from the templates in the
# switch's #define line alone; each bad input (not a macro name, a value that
# is not a word, an existing destination, a macro no template defines, a
# missing templates folder, bad usage) exits 2 with a message and leaves no
# destination (or the existing one untouched).
set -u
S=$1 TPL=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/refused.sh"

"$S" "$T/v" KJIT_L2_HINT 1 "$TPL" || fail "a good variant exited $?"
d=$(diff -r "$TPL" "$T/v")
[ "$(echo "$d" | grep -c '^[<>]')" = 2 ] || fail "the variant differs in more than one line: $d"
echo "$d" | grep -q '^> #define KJIT_L2_HINT 1$' || fail "the variant lacks '#define KJIT_L2_HINT 1': $d"

refused() { # message dest macro value [templates]
  local msg=$1 dest=$2
  shift
  expect_refused 2 "$msg" "$S" "$@"
  [ ! -e "$dest" ] || fail "template_variant.sh $*: left $dest"
  [ -z "$(ls "$T" | grep -v '^v$\|^keep$')" ] || fail "template_variant.sh $*: left $(ls "$T")"
}
refused "'9X' is not a macro name" "$T/a" 9X 1 "$TPL"
refused "value 'a/b' is not a word" "$T/b" KJIT_L2_HINT a/b "$TPL"
refused "no template in $TPL defines KJIT_NO_SUCH" "$T/c" KJIT_NO_SUCH 1 "$TPL"
refused "$T/missing: no templates folder" "$T/d" KJIT_L2_HINT 1 "$T/missing"
refused "usage" "$T/e" KJIT_L2_HINT
mkdir "$T/keep" && echo x >"$T/keep/f"
expect_refused 2 "$T/keep exists" "$S" "$T/keep" KJIT_L2_HINT 1 "$TPL"
[ "$(ls "$T/keep")" = f ] || fail "an existing destination was changed: $(ls "$T/keep")"
[ "$fails" = 0 ] && echo "test_template_variant: all checks passed"
