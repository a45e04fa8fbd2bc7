#!/bin/sh
# Instructions per request of two cosmolite binaries, side by side (bench/README.md).
# Each runs under callgrind with the same scripted, signed workload
# (bench/cosmolite_instr.py); the figures do not depend on the machine's load.
# Prints a table and asserts nothing.
#
# Usage: bench/cosmolite_instr.sh OLD_BIN NEW_BIN [cosmolite_instr.py options]
#   e.g. bench/cosmolite_instr.sh /tmp/old/build-rel/emulator/cosmolite \
#            build-rel/emulator/cosmolite --requests 300 --fill 1000
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_BIN NEW_BIN [--requests N] [--fill N]" >&2
    exit 2
fi
old=$1
new=$2
shift 2
here=$(dirname "$0")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cosmolite-instr.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# One after the other: two valgrind runs at once would only slow both down.
python3 "$here/cosmolite_instr.py" "$old" "$@" >"$tmp/old"
python3 "$here/cosmolite_instr.py" "$new" "$@" >"$tmp/new"
printf '%-12s %12s %12s %7s\n' operation old new ratio
awk 'NR == FNR { o[$1] = $2; order[++n] = $1; next } { w[$1] = $2 }
     END { for (i = 1; i <= n; i++) { k = order[i];
           printf "%-12s %12d %12d %7.3f\n", k, o[k], w[k], o[k] ? w[k] / o[k] : 0 } }' \
    "$tmp/old" "$tmp/new"
