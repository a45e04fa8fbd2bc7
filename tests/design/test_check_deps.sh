#!/usr/bin/env bash
# The dependency check must fail on an edge the table forbids. Each case is a
# copy of the tree's modules and docs/architecture.md with one edge put back:
# - outbox/ linking feed/ and including its header (the edge issue 14 removed);
# - processor/ including demo/ or cli/: the library never includes the program
#   or the demo (issue 23; the table once carried a parenthesised exception
#   for demo/ that the check dropped, so any processor/ file could include it).
# Expect exit 1 and the file:line of each offence; a folder of C sources
# without a row fails too (it would escape the check); the untouched copy passes,
# and a "may use" entry the check cannot enforce (a note in parentheses) is
# refused with exit 2.
set -euo pipefail
src=${1:?usage: test_check_deps.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A fresh copy of the tree's modules in $tmp/t.
fresh() {
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/docs" "$tmp/t/scripts"
    cp "$src/docs/architecture.md" "$tmp/t/docs/"
    cp "$src/scripts/check-deps.py" "$tmp/t/scripts/"
    local d
    for d in common record config cosmos feed steps outbox processor demo console cli emulator \
        plugins tools; do
        cp -r "$src/$d" "$tmp/t/$d"
    done
}

# check EXPECTED_RC: runs the check on the copy; its output in $out.
check() {
    local rc=0
    out=$(python3 "$tmp/t/scripts/check-deps.py" --root "$tmp/t" 2>&1) || rc=$?
    echo "$out"
    if [ "$rc" -ne "$1" ]; then
        echo "FAIL: expected exit $1, got $rc" >&2
        exit 1
    fi
}

fresh
check 0

printf 'target_link_libraries(sf_outbox PUBLIC sf_feed)\n' >>"$tmp/t/outbox/CMakeLists.txt"
printf '#include "feed/feed.h"\n' >>"$tmp/t/outbox/outbox_relay.c"
check 1
grep -q 'outbox/CMakeLists.txt:[0-9]*: sf_outbox links sf_feed (feed), which docs/architecture.md does not allow outbox/' <<<"$out" ||
    { echo "FAIL: link line not reported" >&2; exit 1; }
grep -q 'outbox/outbox_relay.c:[0-9]*: includes feed/, which docs/architecture.md does not allow outbox/' <<<"$out" ||
    { echo "FAIL: include not reported" >&2; exit 1; }
echo "ok: outbox/ -> feed/ is reported and fails the check"

fresh
printf '#include "demo/demo.h"\n' >>"$tmp/t/processor/proc_engine.c"
printf '#include "cli/cli.h"\n' >>"$tmp/t/processor/proc_service.c"
check 1
grep -q 'processor/proc_engine.c:[0-9]*: includes demo/, which docs/architecture.md does not allow processor/' <<<"$out" ||
    { echo "FAIL: processor/ -> demo/ not reported" >&2; exit 1; }
grep -q 'processor/proc_service.c:[0-9]*: includes cli/, which docs/architecture.md does not allow processor/' <<<"$out" ||
    { echo "FAIL: processor/ -> cli/ not reported" >&2; exit 1; }
echo "ok: the library including the demo or the program is reported and fails the check"

fresh
mkdir -p "$tmp/t/newmod"
printf '#include "processor/proc_engine.h"\n' >"$tmp/t/newmod/newmod.c"
check 1
grep -q "newmod/: holds C sources but has no row in docs/architecture.md's module table" <<<"$out" ||
    { echo "FAIL: a folder without a row not reported" >&2; exit 1; }
echo "ok: a folder of C sources without a row in the table fails the check"

fresh
sed -i 's/^\(| `processor\/` |.*\) |$/\1, demo (the sagafeed binary only) |/' "$tmp/t/docs/architecture.md"
grep -q '^| `processor/` |.*demo (the sagafeed binary only) |$' "$tmp/t/docs/architecture.md" ||
    { echo "FAIL: could not put the note back into the copy's table" >&2; exit 1; }
check 2
grep -q "docs/architecture.md:[0-9]*: processor/ may use 'demo (the sagafeed binary only)'" <<<"$out" ||
    { echo "FAIL: the note in the table is not named" >&2; exit 1; }
echo "ok: a 'may use' entry the check cannot enforce is refused"
