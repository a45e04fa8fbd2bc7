#!/usr/bin/env bash
# The run is assembled once (scripts/check-assembly.sh): the tree passes, and a
# copy with a second dispatcher built and fed outside processor/proc_pipeline.c
# fails, naming the file and line: in the library (as proc_replay.c did before
# issue 23) and in the program (cli/, where a command is tempted to wire its own).
set -euo pipefail
src=${1:?usage: test_one_assembly.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$src/scripts/check-assembly.sh" "$src"
mkdir -p "$tmp/processor" "$tmp/cli"
cp "$src"/processor/*.[ch] "$tmp/processor/"
cp "$src"/cli/*.[ch] "$tmp/cli/"
second=$(cat <<'C'
static void second(struct proc_dispatch **d, const struct proc_item *it)
{
    struct proc_dispatch_opts o = {0};

    (void)proc_dispatch_new(&o, d, NULL);
    (void)proc_dispatch_submit(*d, it, NULL);
}
C
)
echo "$second" >>"$tmp/processor/proc_replay.c"
echo "$second" >>"$tmp/cli/cli.c"
rc=0
out=$(bash "$src/scripts/check-assembly.sh" "$tmp" 2>&1) || rc=$?
echo "$out"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1 for a second assembly, got $rc" >&2; exit 1; }
# the options, the new and the submit: one line each
n=$(grep -c 'processor/proc_replay.c:[0-9]*: a second assembly' <<<"$out")
[ "$n" -eq 3 ] || { echo "FAIL: expected 3 offences in proc_replay.c, got $n" >&2; exit 1; }
n=$(grep -c 'cli/cli.c:[0-9]*: a second assembly' <<<"$out")
[ "$n" -eq 3 ] || { echo "FAIL: expected 3 offences in cli/cli.c, got $n" >&2; exit 1; }
echo "ok: a second assembly is reported and fails the check"
