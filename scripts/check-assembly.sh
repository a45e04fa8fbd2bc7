#!/usr/bin/env bash
# The run is assembled in one place, processor/proc_pipeline.c (issue 23): no
# other product file creates a dispatcher, fills its options or submits items
# to it. tests/ and bench/ may (they test the pieces). Prints file:line of each
# offence and exits 1; 0 when the tree keeps the rule.
set -euo pipefail
root=${1:-.}
cd "$root"
allowed='^(processor/proc_pipeline\.c|processor/proc_dispatch\.[ch]):'
pattern='proc_dispatch_new[[:space:]]*\(|proc_dispatch_submit[[:space:]]*\(|struct proc_dispatch_opts[[:space:]]+[A-Za-z_]|proc_dispatch_range_open[[:space:]]*\('
dirs=()
for d in common record config cosmos feed steps outbox processor demo console cli emulator plugins tools; do
    [ -d "$d" ] && dirs+=("$d")
done
hits=$(grep -rnE --include='*.c' --include='*.h' "$pattern" "${dirs[@]}" | grep -vE "$allowed" || true)
if [ -n "$hits" ]; then
    while IFS= read -r h; do
        echo "${h%%:*:*}:$(cut -d: -f2 <<<"$h"): a second assembly of the run: only processor/proc_pipeline.c builds and feeds the dispatcher"
    done <<<"$hits"
    exit 1
fi
echo "check-assembly: the run is assembled in processor/proc_pipeline.c only"
