#!/usr/bin/env bash
# scripts/bench-all.sh - runs every benchmark on a Release build and writes
# docs/benchmarks.md (the machine, the exact commands, a table of figures and
# every program's own output) and docs/benchmarks/throughput-lag.png (gnuplot:
# sagafeed's throughput, backlog and lag over a run with a burst).
#
#   cosmolite_bench  cosmolite ops/s and latency, start-up, RSS idle and loaded,
#                    next to a plain libmicrohttpd server (the ceiling)
#   client_bench     the cosmos client against bench_util's raw HTTP loop
#   feed_bench       change feed processor items/s against raw page reads,
#                    pickup latency, RSS with 64 ranges
#   saga_bench       (also: default settings against fixed workers at 0, 5, 20 ms,
#                    RU/s spent on an orders container provisioned 400 and
#                    1,000 RU/s at 0 and 5 ms and under a cap, RSS with a backlog)
#                    sagafeed orders/s end to end against the ceiling of the
#                    same writes issued directly, latency at half load, RSS
#   outbox_bench     outbox events/s into a mock Kafka cluster, relay RSS
#   saga_timeline    (tests/checks) throughput and lag every second while
#                    orders arrive at half of saga_bench's rate, then at 1.5x
#   grid             saga_bench on a backlog (every order written first): default
#                    settings against fixed workers 8, 32 and 128 over latency
#                    {0, 5, 20 ms} x {500, 2,000, 10,000 orders} x key shapes
#                    {even: the demo's 60 customers, skewed: a tenth of them place
#                    half the orders, distinct: one order per customer}
#   balance          feed_balance_sim (tests/feed): the lease balancer with 1,000
#                    ranges and 50 instances joining, leaving and killed, on a
#                    stepped clock: rounds, moves and time to converge
#
# Usage: bash scripts/bench-all.sh [--quick] [--only LIST] [--from-results] [--grid-latency LIST]
#            [--grid-orders LIST] [--grid-shapes LIST] [--grid-workers LIST]
#            [--build-dir DIR] [--out FILE]
#   --quick          shorter phases (a smoke run, ~4 minutes; figures noisier)
#   --only LIST      run only these parts, comma-separated, of "grid" and
#                    "balance", and replace only their sections of an existing
#                    report (the other figures stay as they were)
#   --from-results   with --only: no runs, the sections from the results of the
#                    last run in the build directory (a grid cut short)
#   --grid-latency LIST, --grid-orders LIST, --grid-shapes LIST, --grid-workers LIST
#                    a reduced grid (space- or comma-separated; defaults
#                    "0 5 20", "500 2000 10000", "even skewed distinct", "8 32 128";
#                    --quick: "0 5", "300", "even skewed distinct", "32")
#   --build-dir DIR  Release build directory (default build-bench-all)
#   --out FILE       the report (default docs/benchmarks.md; the PNG goes to
#                    docs/benchmarks/ next to it)
# About 9 minutes on 2 cores plus the build, and the full grid about an hour
# more (108 runs: 62 min on 2 shared cores; --only grid runs just it). Needs
# gnuplot and jq (installed with apt-get when missing and running as root). Exit status 0 when every
# benchmark ran without errors, 1 otherwise (the report says which failed).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1

invocation="bash scripts/bench-all.sh${*:+ $*}"
quick=0
build="build-bench-all"
out=docs/benchmarks.md
only=""
from_results=0
g_lats="" g_sizes="" g_shapes="" g_workers=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --from-results) from_results=1 ;;
    --only) only=",${2//[[:space:]]/},"; shift ;;
    --grid-latency) g_lats=${2//,/ }; shift ;;
    --grid-orders) g_sizes=${2//,/ }; shift ;;
    --grid-shapes) g_shapes=${2//,/ }; shift ;;
    --grid-workers) g_workers=${2//,/ }; shift ;;
    --build-dir) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench-all.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for part in ${only//,/ }; do
    case "$part" in grid | balance) ;; *) echo "bench-all.sh: --only knows grid and balance, not '$part'" >&2; exit 2 ;; esac
done
# wants PART: whether this run includes PART (every part without --only)
wants() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
case "$build" in /*) ;; *) build=$here/$build ;; esac
case "$out" in /*) ;; *) out=$here/$out ;; esac
if [ "$from_results" = 1 ] && [ -z "$only" ]; then
    echo "bench-all.sh: --from-results goes with --only" >&2
    exit 2
fi
if [ -n "$only" ] && [ ! -f "$out" ]; then
    echo "bench-all.sh: --only replaces sections of an existing report; $out is missing" >&2
    exit 2
fi
docdir=$(dirname "$out")
pngdir=$docdir/benchmarks
png=$pngdir/throughput-lag.png
res=$build/bench-results
t_all=$SECONDS

need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bench-all.sh: installing $2"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; }
    fi
    command -v "$1" >/dev/null 2>&1 || { echo "bench-all.sh: $1 is missing (apt-get install $2)" >&2; exit 1; }
}
need gnuplot gnuplot-nox
need jq jq

# ---------------------------------------------------------------------------
# Build (Release, no sanitizers: figures from a sanitizer build mean nothing)
echo "== building (Release) in $build"
targets=(cosmolite sagafeed sagafeed-kafka-mock plain_http_server cosmolite_bench client_bench
         feed_bench saga_bench outbox_bench saga_timeline feed_balance_sim)
if [ -n "$only" ]; then
    targets=()
    wants grid && targets+=(cosmolite sagafeed saga_bench)
    wants balance && targets+=(feed_balance_sim)
fi
if [ "$from_results" = 1 ]; then
    [ -d "$res" ] || { echo "bench-all.sh: --from-results: no $res" >&2; exit 2; }
elif ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSF_SANITIZE=OFF -DSF_TSAN=OFF >"$build.cmake.log" 2>&1 ||
    ! cmake --build "$build" -j2 --target "${targets[@]}" >>"$build.cmake.log" 2>&1; then
    echo "bench-all.sh: the build failed, see $build.cmake.log" >&2
    exit 1
fi
if [ "$from_results" = 0 ]; then
    rm -rf "$res" && mkdir -p "$res" "$pngdir"
    mv "$build.cmake.log" "$res/build.log"
fi

# ---------------------------------------------------------------------------
# The runs. Every command is recorded as run (relative to the build dir).
if [ "$quick" = 1 ]; then
    c_args="--plain --duration 1 --docs 20000 --json"
    cl_args="--duration 1"
    f_args="--items 20000 --rounds 1 --duration 4 --rss-items 1280"
    s_args="--orders 600 --rounds 1 --latency-seconds 2"
    o_args="--events 50000 --feed-events 20000"
    tl_steady=5 tl_burst=3
else
    c_args="--plain --duration 4 --json"
    cl_args="--duration 3"
    f_args=""
    s_args="--orders 3000 --latency-seconds 5"
    o_args=""
    tl_steady=12 tl_burst=8
fi
if [ "$quick" = 1 ]; then p_orders=300 p_workers="8 128" p_backlog=1000; else p_orders=1500 p_workers="8 32 128" p_backlog=5000; fi
p_common="--rounds 1 --latency-seconds 0 --no-ceiling"
failed=()
cmds=()
run() { # run NAME COMMAND... : output in $res/NAME.txt, seconds in $res/NAME.secs
    local name=$1 t0=$SECONDS rc
    shift
    echo "== $name: $*"
    cmds+=("$*")
    echo "$*" >"$res/$name.cmd"
    (cd "$build" && "$@") >"$res/$name.txt" 2>"$res/$name.err"
    rc=$?
    echo $((SECONDS - t0)) >"$res/$name.secs"
    if [ "$rc" != 0 ]; then
        echo "   FAILED (exit $rc): $(tail -3 "$res/$name.err" | tr '\n' ' ')"
        failed+=("$name")
    fi
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -z "$only" ]; then
# shellcheck disable=SC2086
run cosmolite bench/cosmolite_bench $c_args
# shellcheck disable=SC2086
run client bench/client_bench $cl_args
# shellcheck disable=SC2086
run feed bench/feed_bench $f_args
# shellcheck disable=SC2086
run saga bench/saga_bench $s_args
# Pacing: default settings next to fixed workers at 0, 5 and 20 ms (one round each, the
# settings of one latency run back to back); RU/s against a provisioned container; RSS
# with a backlog (every order written before sagafeed catches up).
for lat in 0 5 20; do
    for w in 0 $p_workers; do
        # shellcheck disable=SC2086
        run "pace-l$lat-w$w" bench/saga_bench --orders "$p_orders" $p_common --latency "$lat" --workers "$w"
    done
done
# Throughput control: a backlog drained against an orders container provisioned 400 and
# 1,000 RU/s (the others unlimited), orders spread evenly over its 4 ranges; RU/s and 429s
# after a 5 s warm-up; then the same under processor.max_ru_per_second below what is provisioned.
if [ "$quick" = 1 ]; then ru_n400=100 ru_n1000=250; else ru_n400=200 ru_n1000=500; fi
ru_common="--rounds 1 --latency-seconds 0 --no-ceiling --backlog --customers even"
ru_cap=600
for thr in 400 1000; do
    for lat in 0 5; do
        n=$ru_n400 && [ "$thr" = 1000 ] && n=$ru_n1000
        # shellcheck disable=SC2086
        run "ru-$thr-l$lat" bench/saga_bench --orders "$n" $ru_common --latency "$lat" --throughput "$thr"
    done
done
# shellcheck disable=SC2086
run ru-cap bench/saga_bench --orders "$ru_n1000" $ru_common --latency 5 --throughput 1000 --cap "$ru_cap"
# shellcheck disable=SC2086
run pace-backlog bench/saga_bench --orders "$p_backlog" $p_common --backlog
# shellcheck disable=SC2086
run outbox bench/outbox_bench $o_args
# the timeline: half of the measured end-to-end rate, then a burst at 1.5x it
saga_rate=$(sed -n 's/^sagafeed end to end .*: \([0-9]*\) orders\/s.*/\1/p' "$res/saga.txt")
tl_rate=$(( ${saga_rate:-200} / 2 ))
[ "$tl_rate" -ge 10 ] || tl_rate=10
run timeline tests/saga_timeline --rate "$tl_rate" --steady "$tl_steady" --burst "$tl_burst" \
    --interval 0.5 --out "$res/timeline.tsv"
fi # [ -z "$only" ]

# The backlog grid: every order written before sagafeed starts, default settings against
# each fixed workers setting, per latency x backlog x shape (one round each).
if [ "$quick" = 1 ]; then
    : "${g_lats:=0 5}" "${g_sizes:=300}" "${g_shapes:=even skewed distinct}" "${g_workers:=32}"
else
    : "${g_lats:=0 5 20}" "${g_sizes:=500 2000 10000}" "${g_shapes:=even skewed distinct}" "${g_workers:=8 32 128}"
fi
grid_t0=$SECONDS
if wants grid; then
    for n in $g_sizes; do # the small backlogs first: an interrupted grid still holds them
        for lat in $g_lats; do
            for shape in $g_shapes; do
                for w in 0 $g_workers; do
                    [ "$from_results" = 1 ] && continue
                    # shellcheck disable=SC2086
                    run "grid-l$lat-n$n-$shape-w$w" bench/saga_bench --orders "$n" $p_common --backlog \
                        --latency "$lat" --shape "$shape" --workers "$w"
                done
            done
        done
    done
fi
[ "$from_results" = 1 ] && grid_secs=$(cat "$res"/grid-*.secs 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
grid_secs=$((SECONDS - grid_t0))
if wants balance && [ "$from_results" = 0 ]; then
    run balance tests/feed_balance_sim
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# bl RUN KEY: a figure of saga_bench's "bench-line:" in that run's output ("?" when absent)
bl() { sed -n "s/^bench-line: .*\b$2=\([0-9.]*\).*/\1/p" "$res/$1.txt" 2>/dev/null | head -1 | grep . || echo "?"; }

# grid_section: the grid's report section (between its markers)
grid_section() {
    local lat n shape d best bw v cell pct low=0 cells=0 missing="" f
    echo "<!-- bench-all:grid:begin -->"
    echo "## Backlog shapes: default settings against the best fixed workers"
    echo
    echo "A backlog (every order written before sagafeed starts: \`--backlog\`), one saga_bench round"
    echo "per setting (\`$p_common --backlog --latency L --shape S --workers W\`); \"default\" is no"
    echo "processor.workers at all, \"fixed N\" is workers = min_workers = N for N in {$g_workers}."
    echo "Shapes (orders per partition key): **even** the demo's 60 customers, **skewed** a tenth of"
    echo "them place half the orders, **distinct** one order per customer. Target: default >= 90 % of"
    echo "the best fixed setting in every cell (below it: **bold**). Grid: latency {$g_lats} ms x"
    echo "{$g_sizes} orders x {$g_shapes}; $grid_secs s on $(date -u '+%Y-%m-%d %H:%M UTC') with"
    echo "\`$invocation\` (reduced grids name their cells with"
    echo "\`--grid-latency\`, \`--grid-orders\`, \`--grid-shapes\`, \`--grid-workers\`). One run each on a"
    echo "shared machine: repeat a cell before trusting a difference of less than ~20 %."
    echo
    echo "| latency | orders | shape | default orders/s | best fixed (workers) | default / best | every fixed setting | CPU ms/order default / best |"
    echo "|---|---|---|---|---|---|---|---|"
    for lat in $g_lats; do
        for n in $g_sizes; do
            for shape in $g_shapes; do
                cells=$((cells + 1))
                [ -f "$res/grid-l$lat-n$n-$shape-w0.txt" ] || { missing="$missing${missing:+, }$lat ms/$n/$shape"; continue; }
                d=$(bl "grid-l$lat-n$n-$shape-w0" orders_per_s) best=0 bw=? cell=""
                for w in $g_workers; do
                    v=$(bl "grid-l$lat-n$n-$shape-w$w" orders_per_s)
                    cell="$cell${cell:+, }$w: $v"
                    if awk -v a="$v" -v b="$best" 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a + 0 > b + 0) }'; then best=$v bw=$w; fi
                done
                pct=$(awk -v a="$d" -v b="$best" 'BEGIN { if (b + 0 > 0 && a ~ /^[0-9.]+$/) printf "%.0f %%", a * 100 / b; else printf "?" }')
                if awk -v a="$d" -v b="$best" 'BEGIN { exit !(b + 0 > 0 && a ~ /^[0-9.]+$/ && a * 100 / b < 90) }'; then
                    pct="**$pct**" low=$((low + 1))
                fi
                echo "| $lat ms | $n | $shape | $d | $best ($bw) | $pct | $cell | $(bl "grid-l$lat-n$n-$shape-w0" cpu_ms_per_order) / $(bl "grid-l$lat-n$n-$shape-w$bw" cpu_ms_per_order) |"
            done
        done
    done
    echo
    echo "Cells below 90 %: $low.${missing:+ Not run (the grid was cut short): $missing.} The"
    echo "commands, from \`$(basename "$build")/\`, in the order run:"
    echo
    echo '```sh'
    for f in $(ls -tr "$res"/grid-*.cmd 2>/dev/null); do cat "$f"; done
    echo '```'
    echo "<!-- bench-all:grid:end -->"
}

# balance_section: the balancing simulation's report section (between its markers)
balance_section() {
    echo "<!-- bench-all:balance:begin -->"
    echo "## Lease balancing at scale, simulated"
    echo
    echo "\`tests/feed_balance_sim\` (also the ctest entry \`feed_balance_sim\`, which fails when a"
    echo "property below is broken): feed/'s balancing decision and lease bookkeeping"
        echo "(\`feed_balance_seen_update\`, \`feed_balance_view\`, \`feed_balance_pick\`) for every"
    echo "instance as its manager runs them (renew every 5 s, an acquire round every 5 s or when the"
    echo "next lease expires, relisting 250 ms after a lost race), against an in-memory lease store"
    echo "with If-Match, one request per instance per 10 ms step, on a clock the simulation steps (no"
    echo "sleeps). The scenarios run one after another on one fleet; each changes it once, then runs"
    echo "until nothing moved for two expiries. Rounds are acquire intervals (5 s) from the change;"
    echo "\"moves\" are leases changing owner (a dead owner's included), \"takes\" leases taken free."
    echo "Checked after every change: every range owned within 3 rounds (after the expiry for a"
    echo "kill, which only the expiry reveals), at most one move per lease, no lease going back to"
    echo "an owner it left, no range without a live owner for longer than the expiry (20 s)."
        echo "Stealing is one lease per round per instance (PROTOCOL.md section 10), so a joining"
    echo "instance takes its share over about as many rounds as the share. Before a round that lost"
    echo "a race relisted 250 ms later (it waited a whole acquire interval), the same runs left ranges"
    echo "24.6 s (kill -9 1) and 23.9 s (kill -9 10) without an owner, and after ten instances left"
    echo "the last range was owned after more than 3 rounds."
    echo
    sed -n '/^| scenario/,/^$/p' "$res/balance.txt"
    echo "<!-- bench-all:balance:end -->"
}

# replace_section NAME FILE: the report's NAME section replaced by FILE's (appended when absent)
replace_section() {
    local name=$1 file=$2 tmp="$out.tmp"
    if grep -q "^<!-- bench-all:$name:begin -->" "$out"; then
        awk -v b="<!-- bench-all:$name:begin -->" -v e="<!-- bench-all:$name:end -->" -v f="$file" '
            $0 == b { while ((getline l < f) > 0) print l; skip = 1; next }
            $0 == e { skip = 0; next }
            !skip' "$out" >"$tmp" && mv "$tmp" "$out"
    else
        { echo; cat "$file"; } >>"$out"
    fi
}

if [ -n "$only" ]; then
    for part in grid balance; do
        wants "$part" || continue
        "${part}_section" >"$res/$part.section.md"
        replace_section "$part" "$res/$part.section.md"
    done
        parts=$(echo ${only//,/ })
    echo "replaced the sections $parts of $out in $((SECONDS - t_all)) s"
    if [ "${#failed[@]}" -gt 0 ]; then
        echo "bench-all.sh: failed: ${failed[*]}" >&2
        exit 1
    fi
    exit 0
fi

# ---------------------------------------------------------------------------
# Figures
cj() { jq -r "$1 // \"?\"" "$res/cosmolite.txt" 2>/dev/null || echo "?"; }
fmt0() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%\047.0f", v; else printf "%s", v }'; }
mb() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%.1f", v / 1024; else printf "?" }'; }
grab() { sed -n "$2" "$res/$1.txt" | head -1; }
# rl RUN KEY: a figure of saga_bench's "ru-line:" (the RU figures after the warm-up)
rl() { sed -n "s/^ru-line: .*\b$2=\([0-9.]*\).*/\1/p" "$res/$1.txt" 2>/dev/null | head -1 | grep . || echo "?"; }

c_create=$(cj '.ops.create.ops_per_s') c_read=$(cj '.ops.read.ops_per_s')
c_replace=$(cj '.ops.replace.ops_per_s') c_cf=$(cj '.ops.changefeed.ops_per_s')
c_cf_items=$(jq -r '(.ops.changefeed.items / .ops.changefeed.seconds) // "?"' "$res/cosmolite.txt" 2>/dev/null)
c_patch=$(cj '.ops.patch.ops_per_s') c_batch=$(cj '.ops.batch10.ops_per_s') c_query=$(cj '.ops.query.ops_per_s')
c_plain=$(cj '.ops["plain-get"].ops_per_s') c_ratio=$(cj '.read_to_plain_ratio')
c_read_p99=$(cj '.ops.read.p99_us') c_create_p99=$(cj '.ops.create.p99_us')
c_first=$(cj '.startup.first_get_ms') c_idle=$(cj '.idle_rss_kb') c_loaded=$(cj '.loaded.rss_kb')
c_docs=$(cj '.loaded.docs') c_crash_ok=$(cj '.crash_check.ok') c_crash_n=$(cj '.crash_check.checked')

cl_line() { grep -E "^$1 +$2 " "$res/client.txt" | head -1; }
cl_ops() { cl_line "$1" "$2" | awk '{print $3}'; }
cl_cpu() { cl_line "$1" "$2" | sed -n 's/.*cpu *\([0-9.]*\) us\/op.*/\1/p'; }
cl_ratio() { grep -E "^ratio +$1 " "$res/client.txt" | sed -n 's/.*client\/raw *\([0-9.]*\) %.*/\1/p'; }

f_raw=$(grab feed 's/^ *raw change-feed pages *\([0-9]*\) items\/s.*/\1/p')
f_feed=$(grab feed 's/^ *feed processor *\([0-9]*\) items\/s.*/\1/p')
f_pct=$(grab feed 's/^ *feed processor .*= *\([0-9.]*\)% of raw.*/\1/p')
f_p50=$(grab feed 's/^ *p50 \([0-9.]*\) ms.*/\1/p') f_p99=$(grab feed 's/^ *p50 .*p99 \([0-9.]*\) ms.*/\1/p')
f_rss=$(grab feed 's/^memory, .*VmRSS \([0-9.]*\) MB.*/\1/p')

s_ceiling=$(grab saga 's/^ceiling .*: \([0-9]*\) orders\/s.*/\1/p')
s_rate=$saga_rate
s_pct=$(grab saga 's/^sagafeed end to end .*= \([0-9]*\)% of the.*/\1/p')
s_lat=$(grab saga 's/^latency at \([0-9]*\) orders\/s .*p50 \([0-9]*\) ms, p99 \([0-9]*\) ms.*/\2 \/ \3 ms at \1 orders\/s/p')
s_rss=$(grab saga 's/^sagafeed peak RSS: \([0-9.]*\) MB.*/\1/p')
s_cpu=$(grab saga 's/^CPU during that run: sagafeed [0-9.]* s (\([0-9.]*\) ms\/order).*/\1/p')

o_relay=$(grab outbox 's/^ *[0-9]* events in [0-9.]* s = \([0-9]*\) events\/s$/\1/p')
o_feed=$(grab outbox 's/^ *[0-9]* events in [0-9.]* s after the first acknowledgement = \([0-9]*\) events\/s.*/\1/p')
o_relay_rss=$(grab outbox 's/^ *relay process RSS peak \([0-9.]*\) MiB.*/\1/p')
o_feed_rss=$(grab outbox 's/^ *relay process RSS .* peak \([0-9.]*\) MiB while relaying.*/\1/p')
o_lat=$(grab outbox 's/^ *latency offer -> Kafka ack: p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms.*/\1 \/ \2 ms/p')

tl_summary=$(head -1 "$res/timeline.txt")
tl_peak=$(grab timeline 's/^peak settled\/s \([0-9]*\),.*/\1/p')
tl_lag=$(grab timeline 's/^peak settled\/s [0-9]*, peak lag \([0-9.]*\) s.*/\1/p')
tl_rss=$(grab timeline 's/.*sagafeed peak RSS \([0-9.]*\) MB.*/\1/p')

# ---------------------------------------------------------------------------
# The plot: throughput in and out (top), backlog and lag (bottom)
if [ -s "$res/timeline.tsv" ]; then
    gnuplot <<EOF >"$res/gnuplot.log" 2>&1 || failed+=("gnuplot")
set terminal pngcairo size 1000,700 font "sans,10" noenhanced
set output "$png"
set multiplot layout 2,1 title "sagafeed: order fulfilment saga, ${tl_rate} orders/s for ${tl_steady} s, then $((tl_rate * 3))/s for ${tl_burst} s (Release, $(nproc) CPUs)"
set grid
set key top left
set ylabel "orders/s"
set xlabel ""
plot "$res/timeline.tsv" using 1:4 with lines lw 2 title "written (in/s)", \
     "" using 1:5 with lines lw 2 title "settled (out/s)"
set ylabel "orders"
set y2label "seconds"
set ytics nomirror
set y2tics
set xlabel "time since the first order (s)"
plot "$res/timeline.tsv" using 1:6 with lines lw 2 title "backlog (written - settled)" axes x1y1, \
     "" using 1:7 with lines lw 2 dt 2 title "lag: age of the oldest unsettled order" axes x1y2
unset multiplot
EOF
else
    failed+=("timeline-plot")
fi

# ---------------------------------------------------------------------------
# The report
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
cc_version=$(cc --version 2>/dev/null | head -1)
{
    echo "# Benchmarks"
    echo
    echo "Generated by \`bash scripts/bench-all.sh$([ "$quick" = 1 ] && echo " --quick")\` on $(date -u '+%Y-%m-%d %H:%M UTC') in $((SECONDS - t_all)) s;"
    echo "do not edit by hand, run the script again. \`bench/README.md\` explains how each"
    echo "figure is measured. Client and servers share the machine, so every figure includes the"
    echo "load generator's own CPU; on a shared machine repeat a run before trusting a difference"
    echo "of less than ~20 %."
    echo
    echo "## Machine"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| CPUs (nproc) | $(nproc) |"
    echo "| CPU model | ${cpu_model:-unknown} |"
    echo "| memory | $mem_total |"
    echo "| kernel | $(uname -sr) |"
    echo "| compiler | $cc_version, CMake Release (-O3), no sanitizers |"
    echo "| load average before / after | $load_before / $load_after |"
    echo
    echo "## Figures"
    echo
    echo "| area | figure | value |"
    echo "|---|---|---|"
    echo "| cosmolite | create, durable (8 connections) | $(fmt0 "$c_create") ops/s, p99 $(fmt0 "$c_create_p99") µs |"
    echo "| cosmolite | point read | $(fmt0 "$c_read") ops/s, p99 $(fmt0 "$c_read_p99") µs |"
    echo "| cosmolite | replace / patch / batch of 10 | $(fmt0 "$c_replace") / $(fmt0 "$c_patch") / $(fmt0 "$c_batch") ops/s |"
    echo "| cosmolite | change feed pages (100 items) | $(fmt0 "$c_cf") pages/s = $(fmt0 "$c_cf_items") items/s |"
    echo "| cosmolite | query | $(fmt0 "$c_query") ops/s |"
    echo "| cosmolite | ceiling: plain HTTP server, same client | $(fmt0 "$c_plain") req/s (read = $(awk -v r="$c_ratio" 'BEGIN { if (r ~ /^[0-9.]+$/) printf "%.0f", r * 100; else printf "?" }') % of it) |"
    echo "| cosmolite | start to first 200 | $(awk -v v="$c_first" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%.1f", v; else printf "?" }') ms |"
    echo "| cosmolite | kill -9, restart, read back | $c_crash_ok of $c_crash_n acknowledged writes found |"
    for ph in create read replace; do
        echo "| client | $ph: cosmos client / raw HTTP loop | $(fmt0 "$(cl_ops client $ph)") / $(fmt0 "$(cl_ops raw $ph)") ops/s ($(cl_ratio $ph) %), CPU $(cl_cpu client $ph) / $(cl_cpu raw $ph) µs per request |"
    done
    echo "| feed | processor items/s over 4 ranges / raw page reads | $(fmt0 "$f_feed") / $(fmt0 "$f_raw") items/s ($f_pct %) |"
    echo "| feed | pickup latency, write to consumer (poll 500 ms) | p50 $f_p50 ms, p99 $f_p99 ms |"
    echo "| saga | sagafeed end to end / ceiling (same writes direct) | $(fmt0 "$s_rate") / $(fmt0 "$s_ceiling") orders/s ($s_pct %) |"
    echo "| saga | latency written -> settled at half load | p50 / p99 $s_lat |"
    echo "| saga | sagafeed CPU | $s_cpu ms per order |"
    echo "| saga | timeline peak settled/s, peak lag (plot below) | $tl_peak orders/s, $tl_lag s |"
    echo "| outbox | relay alone -> Kafka acknowledged | $(fmt0 "$o_relay") events/s (offer -> ack p50 / p99 $o_lat) |"
    echo "| outbox | end to end: cosmolite -> change feed -> relay -> Kafka | $(fmt0 "$o_feed") events/s |"
    echo
    echo "Memory (resident set):"
    echo
    echo "| program | RSS |"
    echo "|---|---|"
    echo "| cosmolite idle | $(mb "$c_idle") MB |"
    echo "| cosmolite with $(fmt0 "$c_docs") documents | $(mb "$c_loaded") MB |"
    echo "| sagafeed, peak during saga_bench | $s_rss MB |"
    echo "| sagafeed, peak during the timeline run | $tl_rss MB |"
    echo "| feed processor owning 64 ranges (feed_bench) | $f_rss MB |"
    echo "| outbox relay alone, peak | $o_relay_rss MiB |"
    echo "| outbox relay on the change feed, peak | $o_feed_rss MiB |"
    echo
    echo "## Pacing: default settings against fixed workers"
    echo
    echo "One saga_bench round per setting (\`--orders $p_orders --no-ceiling\`); \"default\" is no"
    echo "processor.workers at all (the adaptive limit, cap 128); \"fixed N\" is workers = min_workers = N."
    echo "Target: default >= 90 % of the best"
    echo "fixed setting at every latency."
    echo
    echo "| latency | default orders/s | best fixed (workers) | default / best | sagafeed CPU ms/order: default / best fixed |"
    echo "|---|---|---|---|---|"
    for lat in 0 5 20; do
        d=$(bl "pace-l$lat-w0" orders_per_s) dcpu=$(bl "pace-l$lat-w0" cpu_ms_per_order) best=0 bw=?
        for w in $p_workers; do
            v=$(bl "pace-l$lat-w$w" orders_per_s)
            if awk -v a="$v" -v b="$best" 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a + 0 > b + 0) }'; then best=$v bw=$w; fi
        done
        bcpu=$(bl "pace-l$lat-w$bw" cpu_ms_per_order)
        echo "| $lat ms | $d | $best ($bw) | $(awk -v a="$d" -v b="$best" 'BEGIN { if (b + 0 > 0 && a ~ /^[0-9.]+$/) printf "%.0f %%", a * 100 / b; else printf "?" }') | $dcpu / $bcpu |"
    done
    echo
    echo "Throughput control (\`--backlog --customers even --throughput RU\`): a backlog drained against"
    echo "an orders container provisioned RU RU/s over 4 ranges (the other containers unlimited), the"
    echo "orders spread evenly over the ranges (busiest range: $(rl ru-1000-l0 busiest_range_pct) % of them);"
    echo "RU/s on orders and the 429 share of sagafeed's attempts on it after a 5 s warm-up (target:"
    echo "spent >= 85 % of provisioned, 429s < 2 %). One run each: repeat before trusting a difference."
    echo
    echo "| provisioned | latency | spent on orders | of provisioned | 429s | orders/s |"
    echo "|---|---|---|---|---|---|"
    for thr in 400 1000; do
        for lat in 0 5; do
            echo "| $thr RU/s | $lat ms | $(rl "ru-$thr-l$lat" orders_ru_per_s) RU/s | $(rl "ru-$thr-l$lat" orders_pct) % | $(rl "ru-$thr-l$lat" p429) % | $(bl "ru-$thr-l$lat" orders_per_s) |"
        done
    done
    echo
    echo "Under a cap (\`--throughput 1000 --cap $ru_cap --latency 5\`: processor.max_ru_per_second below"
    echo "what is provisioned): sagafeed spent $(rl ru-cap all_ru_per_s) RU/s over every container ="
    echo "$(rl ru-cap cap_pct) % of the cap, $(rl ru-cap orders_ru_per_s) RU/s of it on orders, 429s $(rl ru-cap p429) %."
    echo "Peak RSS with a $p_backlog-order backlog (every order written before sagafeed starts) at default"
    echo "settings: $(bl pace-backlog rss_mb) MB (target <= 30 MB)."
    echo
    grid_section
    echo
    balance_section
    echo
    echo "## Throughput and lag over a run"
    echo
    echo "![throughput and lag](benchmarks/$(basename "$png"))"
    echo
    echo "$tl_summary. Orders arrive at half of saga_bench's"
    echo "end-to-end rate, then at one and a half times it: the backlog grows during the burst and"
    echo "drains after it; lag is the age of the oldest unsettled order. Samples every 0.5 s:"
    echo "\`$(basename "$build")/bench-results/timeline.tsv\`."
    echo
    echo "## Commands"
    echo
    echo "Run from \`$(basename "$build")/\` (Release build of this tree), in this order:"
    echo
    echo '```sh'
    for c in "${cmds[@]}"; do echo "${c//$res/bench-results}"; done
    echo '```'
    echo
    echo "## Output of each program"
    for n in cosmolite client feed saga outbox timeline $(cd "$res" && ls pace-*.txt ru-*.txt 2>/dev/null | sed 's/\.txt$//'); do
        echo
        echo "<details><summary>$n ($(cat "$res/$n.secs" 2>/dev/null || echo ?) s)</summary>"
        echo
        echo '```'
        if [ "$n" = cosmolite ]; then jq -c '{startup, idle_rss_kb, loaded, read_to_plain_ratio, crash_check, stop, targets}' "$res/$n.txt" 2>/dev/null || cat "$res/$n.txt"; jq -r '.ops | to_entries[] | "\(.key)\t\(.value.ops_per_s|floor) ops/s\tp50 \(.value.p50_us|floor) us\tp99 \(.value.p99_us|floor) us\terrors \(.value.errors)"' "$res/$n.txt" 2>/dev/null; else cat "$res/$n.txt"; fi
        echo '```'
        echo
        echo "</details>"
    done
    if [ "${#failed[@]}" -gt 0 ]; then
        echo
        echo "**Failed:** ${failed[*]} (see \`$(basename "$build")/bench-results/*.err\`)."
    fi
} >"$out"

echo "wrote $out and $png in $((SECONDS - t_all)) s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "bench-all.sh: failed: ${failed[*]}" >&2
    exit 1
fi
