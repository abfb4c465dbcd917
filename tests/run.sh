#!/usr/bin/env bash
# Test runner for `make check`: throwaway Redis + PostgreSQL, then prove,
# several test files at once.
#
#   tests/run.sh [TEST...]   default: every executable $BUILD/tests/t_* and
#                            every tests/*.t (bash scripts printing TAP), then
#                            the tests of CLUSTER_TESTS once more against a
#                            Redis Cluster, named $BUILD/tests/t_foo:cluster
#                            (a name may be given so too; the clusters are
#                            started only when some test needs one)
#
# Side by side: FEED_TEST_JOBS files run at once (default: twice the cores,
# at least 2; most of a test's time is spent waiting on servers). Each job
# has a server set of its own, DIR/s<k>/: Redis, PostgreSQL and, when some
# test needs it, a Redis Cluster; the Sentinels and the replica a test starts
# live there too. A test file runs with one set to itself, taken when it
# starts (a lock on DIR/s<k>/lock, held by this script around the test) and
# left for the next file when it ends, so a test that kills, freezes,
# restarts or flushes a server reaches no other test's servers. The sets'
# ports are picked through one ledger (FEED_PORT_LEDGER, tools/servers.sh),
# so two sets never take the same port.
#
# Output: one line per file with its time (prove --timer); each file's
# whole TAP goes to $BUILD/test-logs/<name>.log (its stderr to <name>.err),
# and a file that fails has both printed at the end. Then the total wall time and the slowest
# files, so that the next slow test is noticed when it is added.
#
# Env: BUILD (default build); REDIS=valkey runs every server on Valkey
# instead of Redis (tools/servers.sh); FEED_TEST_JOBS (see above; 1 runs
# the files one after another, on one set); FEED_KEEP=1 keeps the servers'
# folder (logs, data) and prints its path; FEED_TEST_WRAPPER, e.g.
# "valgrind --error-exitcode=99 -q", wraps the C test binaries (not .t
# files). Tests run from the repo root with their set's env sourced (see
# tools/servers.sh).
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# prove runs every test as `run.sh --exec-one PATH` (see --exec below): the
# first free server set is taken, its env sourced, then .t files go to bash
# and binaries through the optional wrapper.
if [[ ${1:-} == --exec-one ]]; then
    test=$2
    # Suffixes: ":cluster" against the Redis Cluster, ":async" through the
    # async API on libevent, ":async-uv" on libuv (tests/shim.h).
    while [[ $test == *:* ]]; do
        case ${test##*:} in
        cluster) export FEED_TEST_CLUSTER=1 ;;
        async) export FEED_TEST_ASYNC=libevent ;;
        async-uv) export FEED_TEST_ASYNC=libuv ;;
        *) echo "run.sh: unknown suffix in $test" >&2; exit 2 ;;
        esac
        test=${test%:*}
    done
    pool=${FEED_TEST_POOL:?run.sh --exec-one runs under tests/run.sh only}
    # A free set: prove starts at most as many files as there are sets, so
    # one is free or about to be (the file before has just ended).
    exec {lock}>/dev/null
    for ((try = 0; ; try++)); do
        for set in "$pool"/s*/; do
            exec {lock}>"$set/lock"
            flock -n "$lock" && break 2
            exec {lock}>&-
        done
        ((try < 6000)) || { echo "run.sh: no free server set in 60 s" >&2; exit 1; }
        sleep 0.01
    done
    # shellcheck source=/dev/null
    . "$set/env.base"
    log=$FEED_TEST_LOGS/$(basename "$2" | tr ':' '-')
    # The test runs as a child, without the lock's descriptor (servers it
    # starts outlive it and must not hold the set), its TAP into a file
    # that prove gets whole when it ends, its stderr beside it.
    child=
    trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 143' TERM INT
    if [[ $test == *.t ]]; then
        bash "$test" {lock}>&- >"$log.log" 2>"$log.err" &
    else
        # shellcheck disable=SC2086  # the wrapper is a command line: split it
        ${FEED_TEST_WRAPPER:-} "$test" {lock}>&- >"$log.log" 2>"$log.err" &
    fi
    child=$!
    rc=0
    wait "$child" || rc=$?
    cat "$log.log"
    cat "$log.err" >&2
    exit "$rc"
fi

ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
if (($#)); then
    tests=()
    for t in "$@"; do   # named relative to the caller's folder
        if [[ $PWD != "$ROOT" && $t != /* ]]; then t=$PWD/$t; fi
        tests+=("$t")
    done
fi
cd "$ROOT"
BUILD=${BUILD:-build}

if ((!$#)); then
    tests=()
    for t in "$BUILD"/tests/t_* tests/*.t; do
        [[ -f $t && ( -x $t || $t == *.t ) ]] && tests+=("$t")
    done
    ((${#tests[@]})) || { echo "run.sh: no tests found (did you run make?)" >&2; exit 1; }
    # The correctness tests again through Redis Cluster routing, and
    # feedcache-sync on the cluster; t_cluster (resharding, failover) and
    # t_ha_cluster (the failover loss) only make sense there.
    for t in t_walk t_hooks t_model t_lease t_stress t_invalidate t_sync t_sync_chaos t_ranked t_merge t_filter t_tables t_cluster t_ha_cluster; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:cluster")
    done
    # The correctness tests once more through the async API (tests/shim.h):
    # on libevent, some on libuv, and the cluster's through both.
    for t in t_walk t_hooks t_model t_lease t_stress t_plain t_ranked t_newer t_fault_redis t_fault_pg t_fault_hooks t_defaults t_hostile t_format t_ha_sentinel t_ha_failover t_health t_merge t_filter t_tables t_tls; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async")
    done
    for t in t_walk t_hooks t_model; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async-uv")
    done
    for t in t_walk t_hooks t_model t_lease t_stress t_tables t_cluster; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async:cluster")
    done
fi

# The longest files first, so that the last one to end starts early: the
# times of the last run ($BUILD/test-times, "ms name" lines), else those of
# a run on a 2-core machine kept in tests/test-times (a fresh clone, CI).
# A file never timed goes first (it may be slow).
order_tests() {
    local times=$BUILD/test-times t ms
    [[ -s $times ]] || times=tests/test-times
    [[ -s $times ]] || { printf '%s\n' "${tests[@]}"; return; }
    for t in "${tests[@]}"; do
        ms=$(awk -v n="$(basename "$t")" '$2 == n { print $1; exit }' "$times")
        printf '%s\t%s\n' "${ms:-999999999}" "$t"
    done | sort -s -t$'\t' -k1,1nr | cut -f2
}
mapfile -t tests < <(order_tests)

cores=$(nproc 2>/dev/null || echo 2)
JOBS=${FEED_TEST_JOBS:-$((cores * 2 > 2 ? cores * 2 : 2))}
((JOBS > ${#tests[@]})) && JOBS=${#tests[@]}
((JOBS >= 1)) || JOBS=1

DIR=$(mktemp -d -t feedcache-test.XXXXXX)
chmod 0755 "$DIR"   # the sets' PostgreSQL runs as user postgres when we are root
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    local rc=$? s
    for s in "$DIR"/s*/; do tools/servers.sh stop "$s" >/dev/null 2>&1 & done
    wait
    if [[ ${FEED_KEEP:-} == 1 ]]; then
        echo "run.sh: kept $DIR (restart a set with: tools/servers.sh start $DIR/s1)" >&2
    else
        rm -rf "$DIR"
    fi
    exit "$rc"
}
# prove runs in the background so that a signal to this script is handled at
# once (bash defers traps while a foreground child runs): stop prove, then the
# EXIT trap stops the servers.
PROVE_PID=
trap cleanup EXIT
# shellcheck disable=SC2317  # invoked by the traps
stop_prove() {  # the running tests (prove's children), then prove
    [[ -n $PROVE_PID ]] || return 0
    pkill -TERM -P "$PROVE_PID" 2>/dev/null || true
    kill "$PROVE_PID" 2>/dev/null || true
}
trap 'stop_prove; exit 130' INT
trap 'stop_prove; exit 143' TERM

# REDIS=valkey: tools/servers.sh starts Valkey's programs; the tests that
# start or call redis-server or redis-cli by name (t_auth, the .t scripts)
# get Valkey's too, through $DIR/bin first on PATH.
if [[ ${REDIS:-redis} == valkey ]]; then
    mkdir -p "$DIR/bin"
    for p in server cli; do
        v=$(command -v "valkey-$p") || { echo "run.sh: REDIS=valkey but no valkey-$p (tools/deps.sh)" >&2; exit 1; }
        ln -s "$v" "$DIR/bin/redis-$p"
    done
    export REDIS PATH=$DIR/bin:$PATH
fi
pg=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n1)
echo "run.sh: $("${REDIS:-redis}-server" --version | sed 's/ sha=.*//'); $("$pg" --version); ${#tests[@]} files, $JOBS at a time" >&2

# The server sets, started side by side; each one's env as it was then
# (env.base: a replica a test starts later is that test's own).
export FEED_PORT_LEDGER=$DIR/ports
want_cluster=0
[[ " ${tests[*]} " == *":cluster "* ]] && want_cluster=1
start_set() {
    local s=$DIR/s$1
    tools/servers.sh start "$s" || return 1
    if ((want_cluster)); then tools/servers.sh cluster-start "$s" || return 1; fi
    cp "$s/env" "$s/env.base"
}
t0=$SECONDS
pids=()
for ((k = 1; k <= JOBS; k++)); do start_set "$k" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || { echo "run.sh: a server set did not start" >&2; exit 1; }; done
echo "run.sh: $JOBS server sets up in $((SECONDS - t0)) s" >&2

# Each file's log is written over (never the folder emptied: another run on
# the same build may be writing there).
export FEED_TEST_POOL=$DIR FEED_TEST_LOGS=$BUILD/test-logs
mkdir -p "$FEED_TEST_LOGS"
out=$DIR/prove.out
t0=$SECONDS
rc=0
prove -f --timer -j "$JOBS" --exec "$SELF --exec-one" "${tests[@]}" > >(tee "$out") 2>&1 &
PROVE_PID=$!
wait "$PROVE_PID" || rc=$?
PROVE_PID=
took=$((SECONDS - t0))

# Each file's time, for the next run's order and for the summary.
sed -nE 's/^\[[0-9:]+\] ([^ ]+) \.+ (ok|skipped|Failed|Dubious)[^0-9]* ([0-9]+) ms.*/\3 \1/p' "$out" |
    while read -r ms name; do echo "$ms $(basename "$name")"; done | sort -rn >"$DIR/times"
if [[ -s $DIR/times ]]; then cp "$DIR/times" "$BUILD/test-times"; fi
failed=$(sed -nE 's/^([^ ]+) +\(Wstat.*/\1/p; s/^([^ ]+) +\(Tests: .*Failed.*/\1/p' "$out" | sort -u)
if grep -q '^Bailout called' "$out"; then   # prove stopped: the file that bailed out
    for t in "${tests[@]}"; do
        grep -qs '^Bail out!' "$FEED_TEST_LOGS/$(basename "$t" | tr ':' '-').log" && failed+=" $t"
    done
fi
for f in $failed; do
    log=$FEED_TEST_LOGS/$(basename "$f" | tr ':' '-')
    echo "==== $f: its TAP ($log.log), then its stderr"
    cat "$log.log" "$log.err" 2>/dev/null || true
done
echo "run.sh: ${#tests[@]} files in $((took / 60)) min $((took % 60)) s, $JOBS at a time; the slowest:"
head -n 8 "$DIR/times" | awk '{ printf "    %6.1f s  %s\n", $1 / 1000, $2 }'
exit "$rc"
