# Sourced by the tests of command-line tools. expect_refused RC MSG CMD...
# runs CMD and records a failure (through the caller's fail) unless it
# exits RC, writes nothing to stdout, and says MSG (a fixed string) on
# stderr. The message stays in REFUSED_ERR for further checks.
expect_refused() {
    local want=$1 msg=$2 out rc errf
    shift 2
    errf=$(mktemp)
    out=$("$@" 2>"$errf"); rc=$?
    REFUSED_ERR=$(cat "$errf")
    rm -f "$errf"
    [ "$rc" = "$want" ] || fail "$*: exit $rc, want $want"
    [ -z "$out" ] || fail "$*: wrote to stdout: $out"
    case "$REFUSED_ERR" in *"$msg"*) ;; *) fail "$*: message '$REFUSED_ERR' lacks '$msg'" ;; esac
}
