#!/usr/bin/env bash
# scripts/checks.sh - the checkers that cannot share the ASan+UBSan build
# (scripts/test.sh runs that suite):
#
#   tsan      ThreadSanitizer build (-DSF_TSAN=ON, build-checks-tsan) running
#             the threaded tests: the cosmos client's pool and integration,
#             feed (leases, processor, three processes), the processor's
#             lanes, steps and saga cases against cosmolite, the store's group
#             commit, the end-to-end seat race and poison cases, and every
#             case of tests/fault with fewer orders. sagafeed and cosmolite
#             are TSan builds too: a report from any process fails the check
#             (tests/checks/tsan.supp says what is suppressed, and why).
#             Tests labelled "kafka" are left out: librdkafka 2.0 (Debian's,
#             not built with TSan) crashes under TSan in one of its own
#             threads (SIGSEGV in every test of test_outbox_sink).
#   valgrind  memcheck (--leak-check=full, definite and indirect leaks and any
#             error fail, CK_FORK=no) of every unit suite that starts no
#             server and no Kafka cluster (ctest -L unit -LE
#             'integration|kafka|bench'), on a plain Debug build
#             (build-checks-valgrind).
#   fuzz      libFuzzer (clang, -DSF_FUZZ=ON with ASan+UBSan,
#             build-checks-fuzz): every fuzz_* target of tests/fuzz for 25 s
#             each, starting from its corpus (new inputs go to a scratch
#             directory, never into the repository; a crash leaves its input
#             in build-checks-logs/fuzz/).
#
# Each check runs in its own process under `timeout` (tsan 420 s, valgrind
# 240 s, fuzz 200 s: at most ~14.5 minutes) and prints one line:
#   PASS <check> (<what ran>, <seconds>s)   or   FAIL <check>: <why> (log: FILE)
# then "checks: PASS" (exit 0) or "checks: FAIL (...)" (exit 1). A full run
# takes about 4 minutes on 2 cores from clean build directories.
#
# Usage: bash scripts/checks.sh [--quick] [--only tsan,valgrind,fuzz]
#                               [--fuzz-seconds N] [--jobs N]
#   --quick   fewer tests under TSan and valgrind, 5 s per fuzz target
#             (about 2 minutes)
# Logs go to build-checks-logs/ (SF_CHECKS_LOGS overrides). Installs valgrind
# with apt-get when it is missing and the script runs as root.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1

quick=0
section=""
only="tsan,valgrind,fuzz"
fuzz_seconds=""
jobs=2
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --only) only="$2"; shift ;;
    --fuzz-seconds) fuzz_seconds="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --section) section="$2"; shift ;; # internal: run one check (the bounded child)
    -h | --help) usage; exit 0 ;;
    *) echo "checks.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$jobs" in '' | *[!0-9]*) echo "checks.sh: --jobs wants a number" >&2; exit 2 ;; esac
case ",$only," in *,tsan,* | *,valgrind,* | *,fuzz,*) ;; *) echo "checks.sh: --only wants tsan, valgrind and/or fuzz" >&2; exit 2 ;; esac
case "$section" in '' | tsan | valgrind | fuzz) ;; *) echo "checks.sh: unknown section '$section'" >&2; exit 2 ;; esac
if [ -z "$fuzz_seconds" ]; then
    fuzz_seconds=$([ "$quick" = 1 ] && echo 5 || echo 25)
fi
case "$fuzz_seconds" in '' | *[!0-9]*) echo "checks.sh: --fuzz-seconds wants a number" >&2; exit 2 ;; esac

logs=${SF_CHECKS_LOGS:-$here/build-checks-logs}
mkdir -p "$logs"
failed=()
t_all=$SECONDS

pass() { echo "PASS $1 ($2, $(( SECONDS - $3 ))s)"; }
fail() { echo "FAIL $1: $2 (log: $3)"; failed+=("$1"); }
wants() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Tools: install what is missing when we can (CI runs as root), else say so.
need_pkg() { # need_pkg COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "checks.sh: installing $2"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; }
    fi
    command -v "$1" >/dev/null 2>&1
}

# configure_build DIR LOG TARGETS... (extra cmake arguments in $cmake_args)
configure_build() {
    local dir=$1 log=$2
    shift 2
    cmake -S . -B "$dir" "${cmake_args[@]}" >"$log" 2>&1 &&
        cmake --build "$dir" -j"$jobs" --target "$@" >>"$log" 2>&1
}

# The TSan runtime needs a fixed address layout: with the kernel's 28+ bits of
# mmap randomisation it aborts ("unexpected memory mapping"). setarch -R turns
# ASLR off for the tests and everything they spawn.
no_aslr() {
    if setarch "$(uname -m)" -R true 2>/dev/null; then
        setarch "$(uname -m)" -R "$@"
    else
        "$@"
    fi
}

# ---------------------------------------------------------------------------
check_tsan() {
    local t0=$SECONDS dir=$here/build-checks-tsan log=$logs/tsan.log rdir=$logs/tsan-reports
    local tests targets rc=0 n
    rm -rf "$rdir" && mkdir -p "$rdir"
    if [ "$quick" = 1 ]; then
        tests="test_cosmos_http|test_cosmos_client|test_cosmos_integration|test_feed_core|test_feed_proc|test_processor|test_proc_dispatch"
    else
        tests="test_cosmos_http|test_cosmos_client|test_cosmos_integration|test_feed_core|test_feed_lease|test_feed_proc|test_feed_multi|test_processor|test_proc_dispatch|test_steps_integration|test_saga_cases|test_emu_store_ops"
    fi
    targets="${tests//|/ } cosmolite sagafeed feed_worker sf_plugin_loyalty test_sagas_e2e test_fault_suite"
    cmake_args=(-DSF_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    # shellcheck disable=SC2086
    if ! configure_build "$dir" "$log" $targets; then
        fail tsan "build failed" "$log"
        return
    fi
    export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 log_path=$rdir/report suppressions=$here/tests/checks/tsan.supp"
    no_aslr ctest --test-dir "$dir" -R "^($tests)\$" -LE kafka -j"$jobs" --timeout 300 \
        --output-on-failure >>"$log" 2>&1 || rc=1
    if [ "$quick" = 0 ]; then
        # sagafeed itself under TSan: the seat race (ten lanes on one seat), the poison item
        # and every fault case, smaller (300 orders; 500 with 20 kills)
        for c in seat_race poison; do
            CK_RUN_CASE=$c no_aslr ctest --test-dir "$dir" -R '^test_sagas_e2e$' --timeout 300 \
                --output-on-failure >>"$log" 2>&1 || rc=1
        done
        SF_FAULT_ORDERS=300 SF_FAULT_KILL9_ORDERS=500 no_aslr ctest --test-dir "$dir" -L fault \
            -j"$jobs" --timeout 300 --output-on-failure >>"$log" 2>&1 || rc=1
    fi
    unset TSAN_OPTIONS
    n=$(find "$rdir" -name 'report*' -size +0 2>/dev/null | wc -l)
    if [ "$n" -gt 0 ]; then
        for f in $(find "$rdir" -name 'report*' -size +0 | head -3); do
            echo "--- $f" >>"$log"
            head -60 "$f" >>"$log"
        done
        fail tsan "$n ThreadSanitizer report(s) in $rdir, first: $(grep -m1 'WARNING: ThreadSanitizer' "$(find "$rdir" -name 'report*' -size +0 | head -1)")" "$log"
    elif [ "$rc" != 0 ]; then
        fail tsan "a test failed: $(grep -E '^\s+[0-9]+ - ' "$log" | tr -s ' ' | head -5 | tr '\n' ';')" "$log"
    else
        pass tsan "$(grep -c 'Test *#' "$log") tests, no report" "$t0"
    fi
}

# ---------------------------------------------------------------------------
check_valgrind() {
    local t0=$SECONDS dir=$here/build-checks-valgrind log=$logs/valgrind.log vdir=$logs/valgrind
    local list names rc=0 n_ok=0 n_bad=0 bad="" per_test=240
    rm -rf "$vdir" && mkdir -p "$vdir"
    if ! need_pkg valgrind valgrind; then
        fail valgrind "valgrind is not installed (apt-get install valgrind)" "$log"
        return
    fi
    cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DSF_SANITIZE=OFF -DSF_TSAN=OFF)
    if ! cmake -S . -B "$dir" "${cmake_args[@]}" >"$log" 2>&1; then
        fail valgrind "configure failed" "$log"
        return
    fi
    # unit suites that start no server and no Kafka cluster; test programs only
    names=$(ctest --test-dir "$dir" -N -L unit -LE 'integration|kafka|bench' |
        sed -n 's/^ *Test *#[0-9]*: \([A-Za-z0-9_]*\)$/\1/p' |
        # test_proc_limit simulates minutes of traffic on a synthetic clock and
        # allocates nothing (nor does proc_limit.c): memcheck has nothing to
        # find there, and under it the suite alone outlasts this check's bound.
        grep -v '^test_proc_limit$')
    if [ "$quick" = 1 ]; then
        names=$(echo "$names" | grep -E '^(test_common|test_config|test_cosmos_proto|test_feed_core|test_steps_sql|test_record)$')
    fi
    # shellcheck disable=SC2086
    if ! cmake --build "$dir" -j"$jobs" --target $names >>"$log" 2>&1; then
        fail valgrind "build failed" "$log"
        return
    fi
    list=$vdir/tests.txt
    echo "$names" >"$list"
    # Two at a time; each under its own bound. Check's fork mode would hide the
    # children's leaks from valgrind: CK_FORK=no.
    export SF_SOURCE_DIR=$here SF_BUILD_DIR=$dir CK_FORK=no CK_DEFAULT_TIMEOUT=600
    # shellcheck disable=SC2016 # the inner script's variables are its own
    xargs -P "$jobs" -I{} sh -c '
        t=$1; d=$2; v=$3; s=$4
        cd "$d/tests" || exit 1
        timeout --kill-after=10 "$s" valgrind --error-exitcode=97 --leak-check=full \
            --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
            --num-callers=30 --suppressions="$5" "./$t" >"$v/$t.log" 2>&1
        echo "$? $t" >>"$v/status.txt"
    ' _ {} "$dir" "$vdir" "$per_test" "$here/tests/checks/valgrind.supp" <"$list"
    unset CK_FORK CK_DEFAULT_TIMEOUT
    while read -r code t; do
        if [ "$code" = 0 ]; then
            n_ok=$((n_ok + 1))
        else
            n_bad=$((n_bad + 1))
            case "$code" in
            97) why="memcheck errors" ;;
            124 | 137) why="timed out after ${per_test}s" ;;
            *) why="test failed ($code)" ;;
            esac
            bad="$bad $t: $why;"
            { echo "--- $t ($why)"; grep -E '==[0-9]+== (Invalid|Conditional|Use of|Mismatched|[0-9,]+ bytes in|Syscall)|ERROR SUMMARY|[0-9]+%: Checks' "$vdir/$t.log" | head -20; } >>"$log"
        fi
    done <"$vdir/status.txt"
    if [ "$n_bad" -gt 0 ]; then
        fail valgrind "$n_bad of $((n_ok + n_bad)) suites:$bad per-suite logs in $vdir" "$log"
    elif [ "$n_ok" = 0 ]; then
        fail valgrind "no suite ran" "$log"
    else
        pass valgrind "$n_ok unit suites, no error, no leak" "$t0"
    fi
}

# ---------------------------------------------------------------------------
check_fuzz() {
    local t0=$SECONDS dir=$here/build-checks-fuzz log=$logs/fuzz.log fdir=$logs/fuzz
    local targets t corpus n_ok=0 bad="" line
    rm -rf "$fdir" && mkdir -p "$fdir"
    if ! command -v clang >/dev/null 2>&1; then
        fail fuzz "clang is not installed (apt-get install clang libclang-rt-14-dev)" "$log"
        return
    fi
    targets=$(grep -ho 'sf_fuzz_target(fuzz_[A-Za-z0-9_]*' tests/fuzz/*.cmake | sed 's/sf_fuzz_target(//' | sort -u)
    if [ -z "$targets" ]; then
        fail fuzz "no fuzz targets found in tests/fuzz/*.cmake" "$log"
        return
    fi
    cmake_args=(-DCMAKE_C_COMPILER=clang -DSF_FUZZ=ON -DSF_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
    # shellcheck disable=SC2086
    if ! configure_build "$dir" "$log" $targets; then
        fail fuzz "build failed" "$log"
        return
    fi
    for t in $targets; do
        # its corpus: tests/fuzz/corpus/<name without fuzz_> (as tests/fuzz/*.cmake name them)
        corpus=tests/fuzz/corpus/${t#fuzz_}
        [ -d "$corpus" ] || corpus=""
        mkdir -p "$fdir/$t.corpus"
        if ! (cd "$fdir" && timeout --kill-after=10 $((fuzz_seconds + 60)) "$dir/tests/$t" \
            -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$fdir/$t-" "$fdir/$t.corpus" ${corpus:+"$here/$corpus"} \
            >"$fdir/$t.log" 2>&1); then
            bad="$bad $t: $(grep -m1 -E 'ERROR: |SUMMARY: |runtime error|Test unit written' "$fdir/$t.log" || echo "exit status $?");"
            { echo "--- $t"; tail -40 "$fdir/$t.log"; } >>"$log"
        else
            n_ok=$((n_ok + 1))
            line=$(grep -m1 'stat::number_of_executed_units' "$fdir/$t.log" | awk '{print $2}')
            echo "$t: ${line:-?} runs in ${fuzz_seconds}s, corpus $corpus" >>"$log"
        fi
    done
    if [ -n "$bad" ]; then
        fail fuzz "$bad artifacts in $fdir" "$log"
    else
        pass fuzz "$n_ok targets x ${fuzz_seconds}s: $(grep -E '^fuzz_.*runs in' "$log" | sed 's/ in .*//' | tr '\n' ',' | sed 's/,$//')" "$t0"
    fi
}

# ---------------------------------------------------------------------------
# One check per child process, each bounded by `timeout` (which kills the
# whole process group: builds, ctest, servers). The bounds add up to less
# than 15 minutes on 2 cores; a run normally takes well under them.
if [ -n "$section" ]; then
    "check_$section"
    [ "${#failed[@]}" = 0 ]
    exit
fi
# shellcheck disable=SC2034 # read through ${!bound_var}
if [ "$quick" = 1 ]; then b_tsan=240 b_valgrind=150 b_fuzz=100; else b_tsan=420 b_valgrind=240 b_fuzz=200; fi
args=(--jobs "$jobs" --fuzz-seconds "$fuzz_seconds")
[ "$quick" = 1 ] && args+=(--quick)
ran=0
for name in tsan valgrind fuzz; do
    wants "$name" || continue
    ran=$((ran + 1))
    bound_var=b_$name
    bound=${!bound_var}
    out=$logs/$name.result
    timeout --kill-after=15 "$bound" bash "$0" --section "$name" "${args[@]}" >"$out" 2>&1
    rc=$?
    cat "$out"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        fail "$name" "timed out after ${bound}s" "$logs/$name.log"
    elif ! grep -qE "^(PASS|FAIL) $name" "$out"; then
        fail "$name" "ended without a verdict (exit $rc)" "$logs/$name.log"
    elif grep -q "^FAIL $name" "$out"; then
        failed+=("$name")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "checks: FAIL (${failed[*]}) in $(( SECONDS - t_all ))s; logs in $logs"
    echo "checks: $((ran - ${#failed[@]})) passed, ${#failed[@]} failed"
    exit 1
fi
echo "checks: PASS in $(( SECONDS - t_all ))s; logs in $logs"
echo "checks: $ran passed, 0 failed"
