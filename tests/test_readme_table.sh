#!/usr/bin/env bash
# The README's side-by-side table is what bench/report_table.py prints from
# the stored conformance reports (bench/reports, bench/prior_art): a new
# report without the README's table, or a hand edit of a number, fails.
# Usage: test_readme_table.sh SOURCE_DIR
set -u
S=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 "$S/bench/report_table.py" >"$T/want.md" || { echo "FAIL: report_table.py failed" >&2; exit 1; }
head=$(head -n 1 "$T/want.md")
# The README's block: from the table's header line to the first blank line.
awk -v h="$head" '$0 == h {on = 1} on && $0 == "" {exit} on {print}' "$S/README.md" >"$T/got.md"
[ -s "$T/got.md" ] || { echo "FAIL: the README has no table headed: $head" >&2; exit 1; }
diff -u "$T/want.md" "$T/got.md" >&2 || { echo "FAIL: the README's table differs from report_table.py (above)" >&2; exit 1; }
# No report: exit 1 naming the directory, nothing on stdout.
python3 "$S/bench/report_table.py" --reports "$T/none" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 1 ] && [ ! -s "$T/out" ] && grep -q "no report in $T/none" "$T/err" ||
  { echo "FAIL: report_table.py without reports: rc $rc, stdout '$(cat "$T/out")', stderr '$(cat "$T/err")'" >&2; exit 1; }
echo "ok: the README's table is report_table.py's ($(wc -l <"$T/want.md") lines)"
