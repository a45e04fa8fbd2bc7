#!/bin/sh
# Wall-clock ops/s of two cosmolite binaries on a shared machine (bench/README.md).
# Runs cosmolite_bench against OLD, then NEW, PAIRS times (old new old new ...),
# each run a fresh durable server, and prints per operation the median of
# each binary, the ratio of medians (new / old) and how many pairs NEW won.
# Alternating short runs is what keeps the machine's other load from
# favouring one side; asserts nothing.
#
# Usage: bench/cosmolite_pairs.sh OLD_BIN NEW_BIN [PAIRS [OPS [CONNECTIONS [DURATION]]]]
#   defaults: 8 pairs, create,read,changefeed, 8 connections, 1.5 s per phase
#   e.g. bench/cosmolite_pairs.sh /tmp/old/build-rel/emulator/cosmolite \
#            build-rel/emulator/cosmolite 10 create,read,changefeed 1
# COSMOLITE_BENCH names the cosmolite_bench binary (default: next to this script
# in a build tree, else build-rel/bench/cosmolite_bench).
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_BIN NEW_BIN [PAIRS [OPS [CONNECTIONS [DURATION]]]]" >&2
    exit 2
fi
old=$1
new=$2
pairs=${3:-8}
ops=${4:-create,read,changefeed}
conns=${5:-8}
dur=${6:-1.5}
here=$(dirname "$0")
bench=${COSMOLITE_BENCH:-}
if [ -z "$bench" ]; then
    if [ -x "$here/cosmolite_bench" ]; then bench=$here/cosmolite_bench; else bench=build-rel/bench/cosmolite_bench; fi
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cosmolite-pairs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
i=0
while [ "$i" -lt "$pairs" ]; do
    i=$((i + 1))
    for side in old new; do
        if [ "$side" = old ]; then bin=$old; else bin=$new; fi
        "$bench" --cosmolite "$bin" --ops "$ops" --connections "$conns" --duration "$dur" \
            --docs 2000 --no-crash-check --json >"$tmp/run.json"
        python3 -c '
import json, sys
for k, v in json.load(open(sys.argv[1]))["ops"].items():
    if k != "fill":
        print(sys.argv[2], sys.argv[3], k, v["ops_per_s"])' "$tmp/run.json" "$i" "$side" >>"$tmp/all"
    done
done
python3 -c '
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("%-11s %6s %10s %10s %7s %9s" % ("operation", "pairs", "old ops/s", "new ops/s", "ratio", "new wins"))
for op in dict.fromkeys(r[2] for r in rows):
    o = {r[0]: float(r[3]) for r in rows if r[2] == op and r[1] == "old"}
    n = {r[0]: float(r[3]) for r in rows if r[2] == op and r[1] == "new"}
    mo, mn = statistics.median(o.values()), statistics.median(n.values())
    wins = sum(1 for k in o if k in n and n[k] > o[k])
    print("%-11s %6d %10.0f %10.0f %7.3f %6d/%d" % (op, len(o), mo, mn, mn / mo, wins, len(o)))' "$tmp/all"
