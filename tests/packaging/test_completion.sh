#!/bin/bash
# test_packaging_bash_completion (issue 25 item 5): the completion the package
# installs offers this binary's commands, verbs and options (read from its
# --help), so `sagafeed pa<TAB>` and `sagafeed pause --f<TAB>` work.
set -u
script=$SF_SOURCE_DIR/packaging/bash-completion/sagafeed
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
ln -s "$SF_SAGAFEED_BIN" "$bindir/sagafeed"
PATH=$bindir:$PATH
# shellcheck source=/dev/null
source "$script" || { echo "cannot source $script"; exit 1; }
fail=0

# complete LINE... -> COMPREPLY for the last word
complete_words() {
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _sagafeed
    printf '%s\n' "${COMPREPLY[@]}"
}

expect() { # what, want, got
    if ! grep -qx -- "$2" <<<"$3"; then
        echo "FAIL: $1: no '$2' in: $(tr '\n' ' ' <<<"$3")"
        fail=1
    fi
}

all=$(complete_words sagafeed "")
for c in init run check-config parked status lag pause resume replay saga leases demo --version; do
    expect "commands" "$c" "$all"
done
expect "a prefix" "pause" "$(complete_words sagafeed pa)"
expect "pause options" "--force" "$(complete_words sagafeed pause --f)"
expect "init options" "--dry-run" "$(complete_words sagafeed init --d)"
expect "parked verbs" "list" "$(complete_words sagafeed parked "")"
expect "parked verbs" "replay" "$(complete_words sagafeed parked "")"
expect "leases verbs" "reset" "$(complete_words sagafeed leases "")"
expect "log levels" "debug" "$(complete_words sagafeed run --log-level "")"
# every command in the top-level help is offered
for c in $("$SF_SAGAFEED_BIN" --help | awk '/^Commands:/ { on = 1; next } on && /^$/ { on = 0 }
                                            on && /^  [a-z]/ { n = split($1, a, "|"); for (i = 1; i <= n; i++) print a[i] }'); do
    expect "help's commands" "$c" "$all"
done
# and --version answers
"$SF_SAGAFEED_BIN" --version | grep -qE '^sagafeed [0-9]+\.[0-9]+' || {
    echo "FAIL: sagafeed --version: $("$SF_SAGAFEED_BIN" --version)"
    fail=1
}
[[ $fail == 0 ]] && echo "completion: OK"
exit $fail
