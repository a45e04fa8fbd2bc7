#!/usr/bin/env bash
# The dependency check must fail on an edge the table forbids: a copy of the
# tree's modules and docs/architecture.md, then the edge issue 14 removed put
# back (outbox/ linking feed/ and including its header). Expect exit 1 and
# the file:line of each offence; then the untouched copy must pass.
set -euo pipefail
src=${1:?usage: test_check_deps.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/scripts"
cp "$src/docs/architecture.md" "$tmp/docs/"
cp "$src/scripts/check-deps.py" "$tmp/scripts/"
for d in common record config cosmos feed steps outbox processor demo console emulator plugins tools; do
    cp -r "$src/$d" "$tmp/$d"
done

python3 "$tmp/scripts/check-deps.py" --root "$tmp" >/dev/null

printf 'target_link_libraries(sf_outbox PUBLIC sf_feed)\n' >>"$tmp/outbox/CMakeLists.txt"
printf '#include "feed/feed.h"\n' >>"$tmp/outbox/outbox_relay.c"
rc=0
out=$(python3 "$tmp/scripts/check-deps.py" --root "$tmp" 2>&1) || rc=$?
echo "$out"
if [ "$rc" -ne 1 ]; then
    echo "FAIL: expected exit 1 for outbox/ -> feed/, got $rc" >&2
    exit 1
fi
grep -q 'outbox/CMakeLists.txt:[0-9]*: sf_outbox links sf_feed (feed), which docs/architecture.md does not allow outbox/' <<<"$out" ||
    { echo "FAIL: link line not reported" >&2; exit 1; }
grep -q 'outbox/outbox_relay.c:[0-9]*: includes feed/, which docs/architecture.md does not allow outbox/' <<<"$out" ||
    { echo "FAIL: include not reported" >&2; exit 1; }
echo "ok: the forbidden edge is reported and fails the check"
